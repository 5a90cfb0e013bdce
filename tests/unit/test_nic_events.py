"""The NIC's event log (docs/EVENTS.md "RDMA NICs", emucore.eventlog) and its per-QP knobs.

Two socket-less NICs back to back (tests/unit/test_nic.py), TDF 1000 and a fake clock:
lab T0 = 10 s is model 10000.00 us, 1 ms lab is 1 us model. Each case scripts an
exchange and compares the whole event file, in the order it was written, field by
field. Then the knobs: a QP's DSCP/ECN (ToS of its frames, the PFC priority that stops
it), the CNP's DSCP, pinned start PSN and QPN through the control protocol."""

import json
from types import SimpleNamespace

import pytest

import emu.realise.nics
import topologies
from emucore.qos.classify import mark_ce
from emucore.wire.ib import Op
from emucore.wire.pause import build_pfc_frame, pause_frame
from emucore.wire.templates import parse
from traffic.nic import ctl as nic_ctl
from traffic.nic.client import NicClient
from traffic.nic.nicconfig import NicConfig
from traffic.verbs import VerbsError

from .test_nic import _pair, connected, own_qps

MS = 1e-3
T0 = 10.0
QA, QB, PSN = 0x123456, 0x654321, 0xABC  # the book's QPN and PSN (Figure 9-5)
MAC = b"\x02" * 6


class Clock:
    """A NIC's `clock`: the lab time the test says it is."""

    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def events(nic):
    """The NIC's event file as written so far (a counters request flushes it)."""
    nic.counters()
    with open(nic.cfg.events_path) as f:
        return [json.loads(line) for line in f]


def ev(t, node, name, **fields):
    return {"t": t, "node": node, "ev": name, **fields}


def wr(c, wr_id, length, offset=0):
    return {"wr_id": wr_id, "local_addr": c.ma["addr"] + offset, "length": length,
            "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"] + offset, "rkey": c.mb["rkey"]}


def post(m, wr_id=1):
    """A 100-byte WRITE from MR `m` to a peer that does not exist."""
    return {"wr_id": wr_id, "local_addr": m["addr"], "length": 100, "lkey": m["lkey"],
            "remote_addr": 0, "rkey": 1}


def ce(frame):
    """The frame as a switch's WRED marks it (CE, the IPv4 checksum updated: the NIC
    drops a frame whose checksum is wrong)."""
    return memoryview(bytearray(mark_ce(frame)))


def deliver(nic, frames, now):
    for f in frames:
        nic.on_frame(memoryview(bytearray(f)), now)


def send_all(a, q, now):
    """Transmit each frame when the pacer allows it until the QP has nothing to send."""
    n = len(a.raw.frames)
    while not q.blocked:
        a.transmit(now)
        now = max(q.next_t, a.port_next - a.slack)
    return a.raw.frames[n:]


def test_ce_cnp_rate_cut_increases_and_completion(tmp_path):
    """Figure 11-7 t2..t4 as events: ce_first and cnp_tx at the receiver, cnp_rx and the
    paper profile's cut (alpha 1: 200 -> 100 Gbit/s) at the sender, wr_done; the timer
    increases caught up 200 us later carry the model times they were due at."""
    clock = Clock(T0)
    with connected(100, bytes(100), clock=clock, events=tmp_path,
                   qa_kw=dict(qpn=QA, start_psn=PSN), qb_kw=dict(qpn=QB)) as c:
        a, b = c.a, c.b
        a.post_send(QA, [wr(c, 1, 100)])
        a.transmit(T0)
        b.on_frame(ce(a.raw.frames[0]), T0 + 1 * MS)
        cnp, ack = b.raw.frames
        assert (parse(cnp).opcode, parse(ack).opcode) == (Op.CNP, Op.ACK)
        deliver(a, [cnp, ack], T0 + 2 * MS)
        clock.t = T0 + 202 * MS
        a.post_send(QA, [wr(c, 2, 100)])
        a.transmit(clock.t)  # the rate is next used: three timer increases (55 us each)
        b.on_frame(ce(a.raw.frames[1]), T0 + 203 * MS)  # no second ce_first; a CNP again
        assert events(a) == [
            ev(10000.0, "h1g1", "wr_post", qp=QA, wr_id=1, bytes=100),
            ev(10002.0, "h1g1", "cnp_rx", qp=QA),
            ev(10002.0, "h1g1", "rate", qp=QA, rate_bps=100e9, why="cut"),
            ev(10002.0, "h1g1", "wr_done", qp=QA, wr_id=1, status="SUCCESS"),
            ev(10202.0, "h1g1", "wr_post", qp=QA, wr_id=2, bytes=100),
            ev(10057.0, "h1g1", "rate", qp=QA, rate_bps=150e9, why="increase"),
            ev(10112.0, "h1g1", "rate", qp=QA, rate_bps=175e9, why="increase"),
            ev(10167.0, "h1g1", "rate", qp=QA, rate_bps=187.5e9, why="increase"),
        ]
        assert events(b) == [
            ev(10001.0, "h4g2", "ce_first", qp=QB),
            ev(10001.0, "h4g2", "cnp_tx", qp=QB, dqp=QA),
            ev(10203.0, "h4g2", "cnp_tx", qp=QB, dqp=QA),
        ]


def test_nak_and_go_back_n(tmp_path):
    """The second of three frames is lost: the responder NAKs (PSN sequence error,
    syndrome 0x60) at the third, the requester goes back to it, the WR completes."""
    with connected(3 * 4096, bytes(3 * 4096), clock=Clock(T0), events=tmp_path,
                   qa_kw=dict(qpn=QA, start_psn=PSN), qb_kw=dict(qpn=QB)) as c:
        a, b = c.a, c.b
        a.post_send(QA, [wr(c, 7, 3 * 4096)])
        f1, _, f3 = send_all(a, c.qa, T0)
        deliver(b, [f1, f3], T0 + 1 * MS)
        [nak] = b.raw.frames
        deliver(a, [nak], T0 + 2 * MS)
        again = send_all(a, c.qa, T0 + 2 * MS)
        assert [parse(f).psn for f in again] == [PSN + 1, PSN + 2]
        deliver(b, again, T0 + 3 * MS)
        deliver(a, b.raw.frames[1:], T0 + 4 * MS)
        assert events(a) == [
            ev(10000.0, "h1g1", "wr_post", qp=QA, wr_id=7, bytes=3 * 4096),
            ev(10002.0, "h1g1", "nak_rx", qp=QA, psn=PSN + 1, syndrome=0x60),
            ev(10002.0, "h1g1", "retransmit", qp=QA, psn=PSN + 1, why="nak"),
            ev(10004.0, "h1g1", "wr_done", qp=QA, wr_id=7, status="SUCCESS"),
        ]
        assert events(b) == [ev(10001.0, "h4g2", "nak_tx", qp=QB, psn=PSN + 1, syndrome=0x60)]


@pytest.mark.parametrize("retry_cnt,last", [
    (7, ev(11048.58, "h1g1", "retransmit", qp=QA, psn=PSN, why="timeout")),
    (0, ev(11048.58, "h1g1", "wr_done", qp=QA, wr_id=1, status="RETRY_EXC_ERR")),
])
def test_timeout_goes_back_or_fails(tmp_path, retry_cnt, last):
    """No answer: the local ACK timeout (4.096 us x 2^8 = 1048.576 us model) fires."""
    _, a, _ = _pair(dcqcn="off", events=tmp_path, retry_cnt=retry_cnt)
    a.clock = Clock(T0)
    with own_qps(a, dict(qpn=QA, start_psn=PSN)) as [(_, ma, _, qa)]:
        a.to_rtr(qa, 0x42, 0, "10.0.2.14", 4096)
        a.to_rts(qa)
        a.post_send(QA, [post(ma)])
        a.step(T0)
        a.step(qa.ep.deadline)
        assert events(a) == [ev(10000.0, "h1g1", "wr_post", qp=QA, wr_id=1, bytes=100), last]


def test_pfc_pause_resume_expiry(tmp_path):
    """pfc_rx per enabled priority; pause_start / pause_end of the data priority (3)
    only: a resume ends it now, an expiry at its expiry time (65535 quanta at 200G =
    167.7696 us model), also when a new pause is what shows it expired."""
    _, a, _ = _pair(dcqcn="off", events=tmp_path)
    script = [
        (T0, pause_frame(MAC, 3, 0xFFFF)),
        (T0 + 0.5, None),                                   # the loop, after the expiry
        (T0 + 1.0, build_pfc_frame(MAC, 0b1001, [5, 0, 0, 0xFFFF, 0, 0, 0, 0])),
        (T0 + 1.0 + 1 * MS, pause_frame(MAC, 3, 0xFFFF)),   # reloads: no new start
        (T0 + 1.0 + 2 * MS, pause_frame(MAC, 3, 0)),        # resume
        (T0 + 2.0, pause_frame(MAC, 3, 100)),               # 256 ns model
        (T0 + 3.0, pause_frame(MAC, 3, 100)),               # the first long expired
    ]
    for t, frame in script:
        if frame is None:
            a.step(t)
        else:
            a.on_frame(memoryview(frame), t)
    assert events(a) == [
        ev(10000.0, "h1g1", "pfc_rx", prio=3, quanta=0xFFFF),
        ev(10000.0, "h1g1", "pause_start", prio=3),
        ev(10167.77, "h1g1", "pause_end", prio=3),
        ev(11000.0, "h1g1", "pfc_rx", prio=0, quanta=5),
        ev(11000.0, "h1g1", "pfc_rx", prio=3, quanta=0xFFFF),
        ev(11000.0, "h1g1", "pause_start", prio=3),
        ev(11001.0, "h1g1", "pfc_rx", prio=3, quanta=0xFFFF),
        ev(11002.0, "h1g1", "pfc_rx", prio=3, quanta=0),
        ev(11002.0, "h1g1", "pause_end", prio=3),
        ev(12000.0, "h1g1", "pfc_rx", prio=3, quanta=100),
        ev(12000.0, "h1g1", "pause_start", prio=3),
        ev(12000.26, "h1g1", "pause_end", prio=3),
        ev(13000.0, "h1g1", "pfc_rx", prio=3, quanta=100),
        ev(13000.0, "h1g1", "pause_start", prio=3),
    ]
    assert a.counters()["pfc_rx"] == 6


def test_no_events_file_without_a_path(tmp_path):
    with connected(100, bytes(100), clock=Clock(T0)) as c:
        c.a.post_send(c.qa.qpn, [wr(c, 1, 100)])
        c.a.transmit(T0)
        assert not c.a.ev.enabled and c.qa.ep.requester.on_event is None
        assert c.qa.rp.on_rate is None
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- knobs
@pytest.mark.parametrize("qp,tos,prio", [
    ({}, 0x62, 3),                       # DSCP 24 + ECT(0): RoCE data, priority 3
    ({"dscp": 0}, 0x02, 0),              # class-default: priority 0
    ({"dscp": 0, "ecn": 0}, 0x00, 0),    # Not-ECT
    ({"dscp": 46, "ecn": 1}, 0xB9, 0),
    ({"dscp": 48}, 0xC2, 7),             # the CNP class
])
def test_qp_dscp_ecn_and_the_pause_that_stops_it(qp, tos, prio):
    _, a, _ = _pair(dcqcn="off")
    with own_qps(a, qp) as [(_, ma, _, q)]:
        assert q.prio == prio
        a.to_rtr(q, 0x42, 0, "10.0.2.14", 4096)
        a.to_rts(q)
        a.post_send(q.qpn, [post(ma)])
        a.on_frame(memoryview(pause_frame(MAC, 3 if prio != 3 else 0, 0xFFFF)), T0)
        a.transmit(T0)  # another priority's pause does not stop it
        [f] = a.raw.frames
        assert f[15] == tos and (parse(f).dscp, parse(f).ecn) == (tos >> 2, tos & 3)
        a.post_send(q.qpn, [post(ma, 2)])
        a.on_frame(memoryview(pause_frame(MAC, prio, 0xFFFF)), T0 + 1)
        a.transmit(T0 + 1)  # its own priority's does
        assert len(a.raw.frames) == 1 and a.step(T0 + 1) > 0
        a.transmit(T0 + 2)  # until it expires
        assert len(a.raw.frames) == 2


def test_a_dscp_0_qp_sends_while_the_roce_priority_is_paused():
    _, a, _ = _pair(dcqcn="off")
    with own_qps(a, {}, {"dscp": 0}) as made:
        for i, (_, m, _, q) in enumerate(made):
            a.to_rtr(q, 0x42 + i, 0, "10.0.2.14", 4096)
            a.to_rts(q)
            a.post_send(q.qpn, [post(m)])
        a.on_frame(memoryview(pause_frame(MAC, 3, 0xFFFF)), T0)
        a.transmit(T0)
        a.transmit(a.port_next)
        assert [(f[15], parse(f).dqpn) for f in a.raw.frames] == [(0x02, 0x43)]


def test_configured_data_priority_is_dscp_24s():
    _, a, _ = _pair(dcqcn="off", pfc_priority=5)
    with own_qps(a, {}, {"dscp": 0}) as [(_, _, _, q24), (_, _, _, q0)]:
        assert (q24.prio, q0.prio) == (5, 0)


@pytest.mark.parametrize("kw,tos", [({}, 0xC2), ({"cnp_dscp": 24}, 0x62)])
def test_cnp_dscp(kw, tos):
    """CNPs carry NicConfig.cnp_dscp (48, or 24 as the L11.9 variant) and ECT(0), as
    emucore.wire.roce.CNP_ECN (the ConnectX CNP, TOS 0xc2)."""
    with connected(100, bytes(100), clock=Clock(T0), **kw) as c:
        c.a.post_send(c.qa.qpn, [wr(c, 1, 100)])
        c.a.transmit(T0)
        c.b.on_frame(ce(c.a.raw.frames[0]), T0)
        cnp = c.b.raw.frames[0]
        assert parse(cnp).opcode == Op.CNP and cnp[15] == tos
        assert parse(c.b.raw.frames[1]).dscp == 24  # the ACK keeps the QP's DSCP


def test_control_protocol_pins_qpn_and_psn():
    _, a, _ = _pair()
    ctl = SimpleNamespace(nic=a)
    pd, cq = a.alloc_pd(), a.create_cq()
    req = {"cmd": "create_qp", "pd": pd, "send_cq": cq, "dscp": 0, "ecn": 0,
           "start_psn": PSN, "qpn": QA}
    assert nic_ctl.NicControl.dispatch(ctl, req) == {"qpn": QA}
    q = a.qps[QA]
    assert (q.start_psn, q.dscp, q.ecn, q.prio, q.ep.qp.qpn) == (PSN, 0, 0, 0, QA)
    with pytest.raises(VerbsError, match="qpn: 0x123456 is in use"):
        nic_ctl.NicControl.dispatch(ctl, req)
    a.destroy_qp(QA)
    assert nic_ctl.NicControl.dispatch(ctl, req) == {"qpn": QA}  # free again
    for field, bad in (("dscp", 64), ("ecn", 4), ("start_psn", 1 << 24), ("qpn", 1)):
        with pytest.raises(VerbsError, match=field):
            a.create_qp(pd, cq, cq, **{field: bad})
    q = a.qps[nic_ctl.NicControl.dispatch(ctl, {"cmd": "create_qp", "pd": pd,
                                                   "send_cq": cq})["qpn"]]
    assert (q.dscp, q.ecn, q.prio) == (24, 2, 3)


def test_client_sends_the_knobs():
    sent = []
    c = NicClient.__new__(NicClient)
    c.call = lambda cmd, **kw: sent.append((cmd, kw)) or {"qpn": QA}
    assert c.create_qp(1, 2, dscp=0, ecn=0, start_psn=PSN, qpn=QA) == QA
    assert c.create_qp(1, 2) == QA
    assert sent == [
        ("create_qp", dict(pd=1, send_cq=2, recv_cq=2, max_send_wr=1024, write_only=False,
                           pkey=0xFFFF, dscp=0, ecn=0, start_psn=PSN, qpn=QA)),
        ("create_qp", dict(pd=1, send_cq=2, recv_cq=2, max_send_wr=1024, write_only=False,
                           pkey=0xFFFF, dscp=None, ecn=None, start_psn=None, qpn=None)),
    ]


@pytest.mark.parametrize("log_dir", [True, False])
def test_nic_processes_put_the_events_in_the_run_directory(tmp_path, monkeypatch, log_dir):
    monkeypatch.setattr(emu.realise.nics, "run_module", lambda *a, **kw: None)
    monkeypatch.setattr(emu.realise.nics, "wait_ready", lambda *a, **kw: None)
    fab = topologies.load("rail2x4")
    run = tmp_path / "run"
    procs = emu.realise.nics.NicProcesses({h.name: None for h in fab.hosts()}, fab, tmp_path,
                                  run if log_dir else None)
    procs.start(["h1g1", "h2g1"], "paper", 4096, 1.0)
    for gpu in ("h1g1", "h2g1"):  # each NIC its own file
        cfg = NicConfig.from_json((tmp_path / f"nic-{gpu}.json").read_text())
        assert cfg.events_path == (str(run.resolve() / "events" / f"{gpu}.jsonl") if log_dir
                                   else None)
