"""The C Nic.receive (traffic/fast/nicrx.c) against the Python reference
(traffic/nic/datapath.py): the same frame sequences - in-order WRITEs with immediate and
SENDs, CE-marked ones (CNPs), duplicates, out of order, a bad ICRC, a PFC pause, a CNP, an
ACK, a frame for an unknown QP, malformed frames of emu.bench.malformed, a frame longer
than the receive buffer - reach NIC b through a socketpair (its raw socket, with and
without the kernel's SO_TIMESTAMPNS stamps), in batches, and each receive must give the
same count, the same replies (bytes, order), counters, events, meter records, MR contents,
CQ entries and QP state (DCQCN's too). The other direction: NIC b the requester of WRITEs
and a SEND, its in-order, duplicate and reordered ACKs, NAKs and CNPs (CE-marked data at the
responder) received by the C and by the Python, with the same frames sent, events, CQ
entries and QP / DCQCN state. The common frames (data and ACK for a known QP, CNP) run in
C: no Python Nic.on_frame, pkt_of or RcEndpoint.on_packet for them. Each stamped frame's
arrival is the stamp + now - realtime() exactly (traffic.nic.wakeup.arrival, checked
against a MSG_PEEK of the same frame). A RocePkt that pkt_of cannot fill is an ImportError
at the first receive. Also under ASan + UBSan."""

import random
import socket
import sys
from unittest import mock

import pytest

from emu.bench.malformed import base_frames, malformed_frames
from emucore.fidelity import BUCKET_EDGES, LagMeter
from emucore.timedil import TimeDilation
from emucore.wire.ib import Op
from emucore.wire.pause import pause_frame
from tests.unit.test_fast_dcqcn import run_sanitized
from tests.unit.test_fast_rc import WRONG_ROCE_PKT, with_roce_pkt
from tests.unit.test_fast_nictx import mark_ce
from tests.unit.test_nic import connected, own_qps
from traffic.fast import nicrx
from traffic.nic import datapath
from traffic.nic.wakeup import RX_ANC, arrival, enable_rx_stamps
from traffic.rc.endpoint import RcEndpoint

C = nicrx.receive("fast")
LAG_RECORD = nicrx.lag_record("fast")
REALTIME = 1.7e9 + 0.123456789  #: the fake CLOCK_REALTIME of NIC b (the stamps' offset)


class Meter:
    """Records what the receive loop records (the C calls its record too)."""

    def __init__(self):
        self.got = []

    def record(self, due, done, what=""):
        self.got.append((due, done, what))
        return 0.0


def using(fn):
    """A patch making Nic.receive dispatch to `fn` (None: the Python), and the list of what
    the C answered."""
    answers = []

    def counted(nic, now):
        answers.append(fn(nic, now))
        return answers[-1]

    return mock.patch.object(datapath, "RECEIVE", None if fn is None else counted), answers


def wire(nic, stamps):
    """A socketpair end as `nic`'s raw socket (non-blocking, stamped or not); the other end."""
    mine, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    mine.setblocking(False)
    peer.setblocking(False)
    nic.raw, nic.rx_stamps = mine, stamps and enable_rx_stamps(mine)
    nic.realtime = lambda: REALTIME
    return peer


def attach(b, stamps, clock):
    """NIC b's raw socket a socketpair end (`wire`), its meter a Meter, its clock `clock`,
    its events into a list; (the other end, the list)."""
    peer = wire(b, stamps)
    b.meter, b.clock = Meter(), clock
    events = []
    b.ev.emit = lambda name, t, **kw: events.append((name, t, sorted(kw.items())))
    return peer, events


def drain(sock):
    """Every datagram waiting on `sock`, in order."""
    out = []
    while True:
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            return out


def flip_icrc(f):
    m = bytearray(f)
    m[-1] ^= 0x5A
    return bytes(m)


def scenario(seed, fn, stamps=True, size=24 * 4096 + 300):
    """One run; returns its trace: per batch (frames fed, receive's count, b's replies,
    events, meter records) and b's final state."""
    rng = random.Random(seed)
    data = random.Random(seed).randbytes(size)
    trace = []
    patch, answers = using(fn)
    with patch, connected(size, data) as c, \
            own_qps(c.a, {}, size=size, clear_shms=False) as stray:
        a, b = c.a, c.b
        _, ms, _, qs = stray[0]
        a.to_rtr(qs, 0x777, 0, b.cfg.ip, 4096)  # b has no QP 0x777: unknown QP at b
        a.to_rts(qs)
        peer, events = attach(b, stamps, lambda: 1000.0)  # the CNP's record: a fixed time
        b.post_recv(c.qb.qpn, [7, {"wr_id": 8, "addr": c.mb["addr"] + 14 * 4096,
                                   "length": 3 * 4096, "lkey": c.mb["lkey"]}])
        a.post_send(c.qa.qpn, [
            {"wr_id": 1, "local_addr": c.ma["addr"], "length": 12 * 4096 + 100,
             "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"], "rkey": c.mb["rkey"], "imm": 9},
            {"wr_id": 2, "local_addr": c.ma["addr"], "length": 2 * 4096, "lkey": c.ma["lkey"],
             "opcode": "send"},
            {"wr_id": 3, "local_addr": c.ma["addr"] + 100, "length": 8 * 4096 + 7,
             "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"] + 64, "rkey": c.mb["rkey"]}])
        a.post_send(qs.qpn, [{"wr_id": 4, "local_addr": ms["addr"], "length": 64,
                              "lkey": ms["lkey"], "remote_addr": 0, "rkey": 1}])
        garbage = [f for _, f in malformed_frames(seed, 12, base_frames())]
        now = 100.0
        for _ in range(2000):
            wait = a.step(now, rx=False)  # timers and transmit
            frames, a.raw.frames = a.raw.frames, []
            now += max(wait, 1e-6)
            if not frames:
                if c.qa.ep.requester.idle():
                    break
                continue
            batch = []
            for f in frames:
                roll = rng.random()
                if f[42] != Op.ACK and roll < 0.3:
                    f = mark_ce(f)
                batch.append(f)
                if roll > 0.85:
                    batch.append(f)  # a duplicate
            if rng.random() < 0.3 and len(batch) > 1:
                batch[0], batch[1] = batch[1], batch[0]  # out of order
            elif rng.random() < 0.2 and len(batch) > 1:
                del batch[0]  # lost: the next is out of order
            if rng.random() < 0.3:
                batch.insert(rng.randrange(len(batch) + 1), flip_icrc(batch[-1]))
            if rng.random() < 0.4:
                batch.insert(rng.randrange(len(batch) + 1), garbage.pop())
            trace.append(step(b, peer, batch, now, events))
            for r in trace[-1][2]:  # b's ACKs / NAKs / CNPs back to a
                a.on_frame(memoryview(r), now)
        # the rest: PFC pause and resume, a CNP and an ACK for b's QP, the rest of the
        # garbage, a frame longer than the buffer, and an empty socket
        q_a = c.qa
        rest = [pause_frame(b"\x02" * 6, b.cfg.pfc_priority, 100),
                bytes(q_a.cnp), pause_frame(b"\x02" * 6, b.cfg.pfc_priority, 0),
                *garbage, bytes(20000)]
        trace.append(step(b, peer, rest, now + 1e-3, events))
        trace.append(step(b, peer, [], now + 2e-3, events))
        cq = b.cqs[next(iter(b.cqs))]
        state = ({q: v.snapshot(b.td) for q, v in b.qps.items()}, dict(b.c),
                 b.pause.counters(now), (b.np.ce_seen, b.np.cnps),
                 bytes(c.sb.buf[:size]), [repr(w) for w in cq.poll(100)], b.meter.got)
        peer.close()
        b.raw.close()
    return trace, state, answers


def step(b, peer, batch, now, events):
    """Feed `batch` to b's socket, receive once at `now`; (fed, count, replies, events,
    meter records) - the stamps' own times replaced by their count (checked apart)."""
    for f in batch:
        peer.send(f)
    del events[:]
    n0 = len(b.meter.got)
    k = b.receive(now)
    rec = [(done, what) for _, done, what in b.meter.got[n0:]]
    return ([bytes(f) for f in batch], k, drain(peer), list(events), rec)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("stamps", [True, False])
def test_c_receive_is_the_python(seed, stamps):
    py_trace, py_state, _ = scenario(seed, None, stamps)
    c_trace, c_state, answers = scenario(seed, C, stamps)
    assert answers and all(type(r) is int for r in answers)  # the C did every receive
    assert c_trace == py_trace
    meter_py, meter_c = py_state[-1], c_state[-1]
    assert [m[1:] for m in meter_c] == [m[1:] for m in meter_py]
    assert c_state[:-1] == py_state[:-1]


def test_scenarios_exercise_what_they_name():
    trace, state, _ = scenario(1, C)
    c = state[1]
    assert c["rx_bad_checksum"] > 0 and c["rx_malformed"] > 0 and c["rx_unknown_qp"] > 0
    assert c["pfc_rx"] == 2 and c["rx_other"] >= 0 and c["tx_frames"] > 0
    names = {e[0] for t in trace for e in t[3]}
    assert {"ce_first", "cnp_tx", "cnp_rx", "pfc_rx", "pause_start", "pause_end"} <= names
    assert sum(t[1] for t in trace) == sum(len(t[0]) for t in trace)  # every frame read
    assert any(len(t[0]) > 1 for t in trace)  # batches of several frames
    assert [w.split(",")[1] for w in state[5]] == [" status=<WCStatus.SUCCESS: 'SUCCESS'>"] * 2
    assert {m[2] for m in state[6]} == {"rx", "cnp"}


@pytest.mark.parametrize("fn", [None, C], ids=["python", "c"])
def test_each_stamp_is_its_arrival_on_the_monotonic_clock(fn):
    """The meter's "rx" record of a frame: traffic.nic.wakeup.arrival of the frame's own
    SO_TIMESTAMPNS stamp (a MSG_PEEK of it) with now - realtime(), exactly; and `now`."""
    with using(fn)[0], connected(4096, bytes(4096)) as c:
        b = c.b
        peer = wire(b, True)
        b.meter = Meter()
        for i, now in enumerate((100.0, 100.5, 2**40 + 0.25, 7)):
            peer.send(b"\x01" * (60 + i))
            _, anc, _, _ = b.raw.recvmsg(16, RX_ANC, socket.MSG_PEEK)
            want = arrival(anc, now - REALTIME)
            assert b.receive(now) == 1
            assert b.meter.got[-1] == (want, now, "rx")
        peer.close()
        b.raw.close()


class SubMeter(LagMeter):
    """A LagMeter subclass: the C calls its own record (it may differ)."""

    __slots__ = ()

    def record(self, due, done, what=""):
        return LagMeter.record(self, due, done, what + "!")


#: (due, done) lab seconds: early, on time, late by 0 to far past the last bucket edge,
#: a lag exactly on an edge, infinities and NaN (the Python's `lag <= 0.0` is false for NaN)
RECORDS = [(1.0, 0.5), (2.0, 2.0), (0.0, 1e-12), (1.0, 1.0 + 3e-6), (5.0, 5.5), (0.0, 7e3),
           (0.0, BUCKET_EDGES[17] * 5000), (0.0, float("inf")), (0.0, float("nan")),
           (float("inf"), 1.0), (3.0, 3.0 + 2e-9), (0.0, 1e9)]


@pytest.mark.parametrize("tdf", [5000.0, 3, 1e-3])
@pytest.mark.parametrize("cls", [LagMeter, SubMeter])
def test_the_meters_record_is_lagmeters(tdf, cls):
    """The C record of each frame's "rx" wait (emucore/csrc/lagrec.h, also the pacer's in
    nictx.c) leaves a LagMeter as LagMeter.record does - count, every histogram bucket, max
    and worst - for early, on-time, late, edge, infinite and NaN lags, float and int TDFs;
    a subclass's own record is called. After each record, all state equal."""
    py, c = cls(TimeDilation(tdf)), cls(TimeDilation(tdf))
    for i, (due, done) in enumerate(RECORDS):
        what = f"w{i}"
        py.record(due, done, what)
        assert LAG_RECORD(c, due, done, what) is None
        assert (c.count, c.hist, c.max_s, c.worst_what) == (py.count, py.hist, py.max_s,
                                                             py.worst_what), (i, due, done)
    assert py.count == len(RECORDS) and sum(py.hist) == len(RECORDS)
    assert py.hist[0] == 3 and py.hist[-1] >= 2  # early / on time; past the last edge


def test_receive_records_into_a_lagmeter_as_the_python():
    """With a real LagMeter (the C's inline record) every stamped frame is one record, in
    the Python and the C alike; the lags themselves are the kernel's stamps (not compared)."""
    counts = []
    for fn in (None, C):
        with using(fn)[0], connected(4096, bytes(4096)) as c:
            b = c.b
            peer = wire(b, True)
            b.meter = LagMeter(b.td)
            for i in range(5):
                for _ in range(i):
                    peer.send(b"\x01" * 64)
                assert b.receive(100.0 + i) == i
            counts.append((b.meter.count, sum(b.meter.hist)))
            peer.close()
            b.raw.close()
    assert counts == [(10, 10), (10, 10)]


def test_a_failed_read_counts_rx_errors():
    """A read that fails (EINVAL: an unconnected stream socket) is counted and ends the
    loop, as the Python's `except OSError`."""
    for fn in (None, C):
        patch, answers = using(fn)
        with patch, connected(4096, bytes(4096)) as c:
            b = c.b
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            b.raw = s
            for stamps in (False, True):
                b.rx_stamps = stamps
                assert b.receive(1.0) == 0
            assert b.c["rx_errors"] == 2 and answers == ([] if fn is None else [0, 0])
            s.close()


def test_what_the_c_does_not_do_changes_nothing():
    """A raw socket that is not a socket.socket exactly or blocks, a buffer that is not a
    bytearray, a time neither float nor int: NotImplemented, the frame still waiting."""
    with connected(4096, bytes(4096)) as c:
        b = c.b
        peer = wire(b, True)
        peer.send(b"\x03" * 64)
        before = dict(b.c)
        assert C(b, "1.0") is NotImplemented
        raw = b.raw
        b.raw = type("Sock", (socket.socket,), {})(fileno=raw.detach())
        b.raw.setblocking(False)
        assert C(b, 1.0) is NotImplemented
        raw = socket.socket(fileno=b.raw.detach())
        raw.setblocking(True)
        b.raw = raw
        assert C(b, 1.0) is NotImplemented
        raw.setblocking(False)
        buf, b._buf = b._buf, bytes(16384)
        assert C(b, 1.0) is NotImplemented
        b._buf = buf
        assert dict(b.c) == before
        assert C(b, 1.0) == 1 and b.c["rx_frames"] == before["rx_frames"] + 1
        peer.close()
        raw.close()


def acks_scenario(seed, fn, stamps=True, size=20 * 4096 + 50):
    """NIC b sends WRITEs and a SEND to a (the Python responder, fed directly); a's ACKs,
    NAKs and CNPs - some duplicated, swapped or lost, a's data CE-marked - reach b's socket
    and b receives them; returns the trace per batch (fed, count, b's frames sent after,
    events) and b's final state."""
    rng = random.Random(seed)
    data = random.Random(seed + 7).randbytes(size)
    trace = []
    patch, answers = using(fn)
    with patch, connected(size, bytes(size)) as c:
        a, b = c.a, c.b
        c.sb.buf[:size] = data  # b's MR: what it writes to a
        cfg = c.qb.ep.requester.cfg
        cfg.window, cfg.ackreq_every = 6, 3  # b blocks on its window; ACKs reopen it
        now = 100.0
        peer, events = attach(b, stamps, lambda: now + 1e-6)  # sends: just after `now`
        unblocked = []  # b's QPs' blocked before and after each receive, their ready_at
        a.post_recv(c.qa.qpn, [4, {"wr_id": 5, "addr": c.ma["addr"] + 16 * 4096,
                                "length": 3 * 4096, "lkey": c.ma["lkey"]}])
        b.post_send(c.qb.qpn, [
            {"wr_id": 1, "local_addr": c.mb["addr"], "length": 9 * 4096 + 10,
             "lkey": c.mb["lkey"], "remote_addr": c.ma["addr"], "rkey": c.ma["rkey"], "imm": 3},
            {"wr_id": 2, "local_addr": c.mb["addr"], "length": 3 * 4096, "lkey": c.mb["lkey"],
             "opcode": "send"},
            {"wr_id": 3, "local_addr": c.mb["addr"] + 9, "length": 6 * 4096 + 1,
             "lkey": c.mb["lkey"], "remote_addr": c.ma["addr"] + 32, "rkey": c.ma["rkey"]}])
        for i in range(3000):
            wait = b.step(now, rx=False)
            now += max(wait, 1e-6)
            sent = drain(peer)
            if not sent and c.qb.ep.requester.idle():
                break
            for f in sent:
                roll = rng.random()
                if roll < 0.04:
                    continue  # lost: a answers the next with a NAK
                a.on_frame(memoryview(mark_ce(f) if roll > 0.8 else f), now)
            if i % 4 and sent:
                continue  # a's answers wait: b's window fills, the QP blocks
            batch = list(a.raw.frames)
            a.raw.frames = []
            if rng.random() < 0.3 and len(batch) > 1:
                batch[0], batch[1] = batch[1], batch[0]
            if rng.random() < 0.3 and batch:
                batch.append(batch[0])  # a stale duplicate
            for f in batch:
                peer.send(f)
            del events[:]
            was = [v.blocked for v in b.order]
            k = b.receive(now)
            trace.append(([bytes(f) for f in batch], k, drain(peer), list(events)))
            unblocked.append([(w, v.blocked, v.ready_at) for w, v in zip(was, b.order)])
        cq = b.cqs[next(iter(b.cqs))]
        state = ({q: v.snapshot(b.td) for q, v in b.qps.items()}, dict(b.c),
                 [repr(w) for w in cq.poll(100)], unblocked, b.meter.got)
        peer.close()
        b.raw.close()
    return trace, state, answers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c_receives_acks_and_cnps_as_the_python(seed):
    py_trace, py_state, _ = acks_scenario(seed, None, seed != 2)
    c_trace, c_state, answers = acks_scenario(seed, C, seed != 2)
    assert answers and all(type(r) is int for r in answers)
    assert c_trace == py_trace
    assert [m[1:] for m in c_state[-1]] == [m[1:] for m in py_state[-1]]
    # the pacer's due times (q.ready_at after an ACK unblocked the QP), exactly
    assert [m for m in c_state[-1] if m[2] != "rx"] == [m for m in py_state[-1] if m[2] != "rx"]
    assert c_state[:-1] == py_state[:-1]


def test_acks_scenario_exercises_what_it_names():
    trace, state, _ = acks_scenario(1, C)
    assert "cnp_rx" in {e[0] for t in trace for e in t[3]}  # the reaction point
    assert any(w[0][0] and not w[0][1] for w in state[3])  # an ACK unblocked b's QP
    snap = next(iter(state[0].values()))
    assert snap["acks_rx"] > 0 and snap["naks_rx"] > 0 and snap["completions"] == 3
    assert [w.split(",")[1] for w in state[2]] == [" status=<WCStatus.SUCCESS: 'SUCCESS'>"] * 3


def python_calls(run):
    """run(); the calls of the Python Nic.on_frame, pkt_of and RcEndpoint.on_packet made
    for NIC b (the one whose receive is under test) while it ran."""
    codes = {datapath.Nic.on_frame.__code__: "on_frame", datapath.pkt_of.__code__: "pkt_of",
             RcEndpoint.on_packet.__code__: "ep.on_packet"}
    got = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            got.append(codes[frame.f_code])

    sys.setprofile(prof)
    try:
        run()
    finally:
        sys.setprofile(None)
    return got


def test_common_frames_run_in_c():
    """b's receive under the C: its data, ACKs and CNPs never reach the Python on_frame,
    pkt_of or RcEndpoint.on_packet (a's Python on_frame, called by the test, is apart:
    b receives in the C only, so count only what happens inside b.receive)."""
    real, seen = C, []

    def rx(nic, now):
        seen.extend(python_calls(lambda: rx.k.append(real(nic, now))))
        return rx.k[-1]

    rx.k = []
    acks_scenario(1, rx)  # the ACK direction: only common frames reach b
    assert rx.k and sum(rx.k) > 0 and seen == []
    # the data direction: Python on_frame only for the uncommon frames (PFC, garbage, bad
    # ICRC, unknown QP), never pkt_of nor ep.on_packet
    seen.clear()
    rx.k = []
    trace, state, _ = scenario(1, rx)
    assert set(seen) == {"on_frame"}
    assert 0 < len(seen) < sum(t[1] for t in trace)


@pytest.mark.parametrize("names, slots, said", WRONG_ROCE_PKT)
def test_a_roce_pkt_pkt_of_does_not_fill_is_an_import_error(names, slots, said):
    """pkt_of fills RocePkt's slots by slots.h's field list: the first receive binds it and
    checks that list against the class (each a slot, the dataclass's fields exactly, in
    order); `now` a str, receive then answers NotImplemented."""
    imports = "import traffic.fast._nicrx as m, traffic.fast._rc, traffic.nic.datapath"
    assert with_roce_pkt(names, slots, imports, "m.receive(None, 'x')") == said.format(who="_nicrx")


SANITIZED_CHILD = """
from tests.unit import test_fast_nicrx as t
assert t.C is mod.receive, "the sanitized build is not the one in use"
for stamps in (True, False):
    t.test_c_receive_is_the_python(1, stamps)
t.test_each_stamp_is_its_arrival_on_the_monotonic_clock(t.C)
t.test_a_failed_read_counts_rx_errors()
t.test_c_receives_acks_and_cnps_as_the_python(1)
t.test_common_frames_run_in_c()
t.test_what_the_c_does_not_do_changes_nothing()
for tdf in (5000.0, 3):
    for cls in (t.LagMeter, t.SubMeter):
        t.test_the_meters_record_is_lagmeters(tdf, cls)
t.test_receive_records_into_a_lagmeter_as_the_python()
import gc; gc.collect()
print("sanitized ok")
"""


def test_sanitized(tmp_path):
    """The differential scenarios against an ASan + UBSan build, in a child Python."""
    run_sanitized(nicrx.MODULE, SANITIZED_CHILD, tmp_path)
