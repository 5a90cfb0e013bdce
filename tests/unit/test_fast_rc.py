"""The RC transport's WRITE and SEND packets and ACKs in C (traffic/fast/rc.c) against the
Python reference (traffic.rc.responder.Responder, traffic.rc.requester.Requester):
seeded transfers on a fake wire (tests.unit.test_rc.Pair) with loss, reordering, PSN
wrap, several WRITEs and SENDs with and without immediate, odd lengths, receive buffers
of the message's size, larger, too small or none, AckReq and ACK-coalescing settings, a
bad R_Key and write-only mode give the same packets both ways (every field and payload
byte), the same memory, completions, counters and responder and requester state; the C
takes every in-order WRITE and SEND opcode and every ACK of new PSNs, and changes
nothing for the rest; the NIC takes it under auto and fast; all of it also under ASan +
UBSan. A RocePkt whose fields are not slots.h's ROCE_PKT_FIELDS, slotted, in that order, is
an ImportError of the module."""

import collections
import dataclasses
import os
import random
import subprocess
import sys

import pytest

from emucore import cbuild, datapath
from emucore.wire.ib import NAK_PSN_SEQ, PSN_MASK, Op
from tests.unit.test_fast_dcqcn import run_sanitized
from tests.unit.test_rc import Pair
from traffic.fast import rc as fast
from traffic.rc import endpoint
from traffic.rc.rcconfig import RcConfig
from traffic.rc.requester import Requester
from traffic.rc.responder import Responder
from traffic.verbs import MR
from traffic.workreq import WR, WROpcode

C_WRITE = fast.in_order_write("fast")
C_SEND = fast.in_order_send("fast")
C_NEXT = fast.next_write("fast")
C_ACK = fast.on_ack("fast")
STATE = ("epsn", "msn", "_nak_sent", "_dup_acked", "_since_ack", "_seen", "_imm",
         "_ackreq_hi")
REQ_STATE = ("una", "nxt", "tail", "max_sent", "deadline", "retries_left", "rnr_left",
             "rnr_hold", "error")


class CResponder(Responder):
    """traffic.rc.responder.FastResponder with the C whatever EMU_DATAPATH says, counting
    the packets the C handled (all, and by opcode)."""

    taken = 0
    ops = collections.Counter()

    def on_packet(self, pkt, now):
        r = (C_SEND if pkt.opcode < Op.WRITE_FIRST else C_WRITE)(self, pkt)
        if r is NotImplemented:
            return Responder.on_packet(self, pkt, now)
        CResponder.taken += 1
        CResponder.ops[Op(pkt.opcode)] += 1
        return r


class CRequester(Requester):
    """traffic.rc.requester.FastRequester with the C whatever EMU_DATAPATH says, counting
    the packets the C built and the ACKs it took."""

    taken = 0
    acked = 0

    def next_packet(self, now):
        p = C_NEXT(self, now)
        if p is NotImplemented:
            return Requester.next_packet(self, now)
        CRequester.taken += 1
        return p

    def on_response(self, pkt, now):
        if C_ACK(self, pkt, now) is NotImplemented:
            return Requester.on_response(self, pkt, now)
        CRequester.acked += 1


def pkt_rec(p):
    """A packet descriptor as comparable values (payload by content)."""
    return tuple(bytes(p.payload) if f.name == "payload" else getattr(p, f.name)
                 for f in dataclasses.fields(p))


def transfer(seed, responder_cls, requester_cls):
    """One seeded transfer; everything observable, for comparison."""
    rng = random.Random(seed)
    size = rng.choice([3 * 4096 + 100, 20 * 4096, 64 * 4096 + 1])
    cfg = RcConfig(ackreq_every=rng.choice([0, 1, 4, 16]), ack_every=rng.choice([0, 0, 3, 16]),
                   write_only=rng.random() < 0.15, mtu=rng.choice([None, None, 1024, 4000]))
    a_psn = rng.choice([0xABC, PSN_MASK - rng.randrange(40), rng.randrange(PSN_MASK + 1)])
    pr = Pair(size, cfg, a_psn=a_psn, seed=seed, retry_cnt=7)
    pr.eb.responder = responder_cls(pr.b, cfg)
    pr.ea.requester = requester_cls(pr.a, cfg)
    off = 0
    for wr_id in range(rng.randrange(1, 5)):
        n = rng.randrange(0, size - off + 1) if wr_id < 3 else size - off
        bad = rng.random() < 0.03
        imm, signaled = rng.choice([None, rng.randrange(1 << 32)]), rng.random() < 0.8
        if rng.random() < 0.25:  # a SEND into a posted receive: its size, larger, too small, none
            room = rng.choice([n, n, size - off, max(0, n - 1), None])
            if room is not None:
                pr.b.post_recv(100 + wr_id, pr.mrb.addr + off, room, pr.mrb.lkey)
            op = WROpcode.SEND if imm is None else WROpcode.SEND_WITH_IMM
            pr.a.post_send(WR(wr_id, op, pr.mra.addr + off, n, pr.mra.lkey, 0, 0, signaled, imm))
        else:
            pr.write(wr_id, off, n, imm=imm, signaled=signaled, rkey=0xBAD if bad else None)
        off += n
    loss = rng.choice([0.0, 0.01, 0.05])
    wire = random.Random(seed + 1)
    sent = []
    on_packet = pr.eb.on_packet

    def recorded(p, now):
        out = on_packet(p, now)
        sent.append((pkt_rec(p), [pkt_rec(r) for r in out]))
        return out
    pr.eb.on_packet = recorded
    next_packet = pr.ea.next_packet

    def sent_by_a(now):
        p = next_packet(now)
        sent.append(("a", now, p and pkt_rec(p)))
        return p
    pr.ea.next_packet = sent_by_a
    pr.run(drop=lambda p: wire.random() < loss,
           shuffle=wire if rng.random() < 0.3 else None, burst=rng.choice([1, 8, 64]))
    rs = pr.eb.responder
    return (sent, bytes(pr.dst), pr.a.send_cq.poll(1 << 20), pr.b.recv_cq.poll(1 << 20),
            dataclasses.asdict(rs.counters), [getattr(rs, f) for f in STATE],
            dataclasses.asdict(pr.ea.requester.counters), pr.a.state, pr.b.state,
            rs._msg[1:] if rs._msg else None, [getattr(pr.ea.requester, f) for f in REQ_STATE],
            rs._recv and (rs._recv[0], rs._recv[2]), list(pr.b.rq))


#: the opcodes whose in-order case the C's responder takes (rc.c's is_case)
C_OPS = {Op.WRITE_FIRST, Op.WRITE_MIDDLE, Op.WRITE_LAST, Op.WRITE_LAST_IMM, Op.WRITE_ONLY,
         Op.WRITE_ONLY_IMM}
C_SEND_OPS = {Op.SEND_FIRST, Op.SEND_MIDDLE, Op.SEND_LAST, Op.SEND_LAST_IMM, Op.SEND_ONLY,
              Op.SEND_ONLY_IMM}


@pytest.mark.parametrize("chunk", range(3))
def test_transfers_are_identical(chunk):
    before = CResponder.taken, CRequester.taken, CRequester.acked, CResponder.ops.copy()
    for seed in range(chunk * 40, chunk * 40 + 40):
        assert transfer(seed, CResponder, CRequester) == transfer(seed, Responder, Requester), seed
    assert CResponder.taken > before[0] and CRequester.taken > before[1]
    assert CRequester.acked > before[2]
    assert {op for op in C_OPS if CResponder.ops[op] > before[3][op]} == C_OPS  # each branch ran
    assert any(CResponder.ops[op] > before[3][op] for op in C_SEND_OPS)


def sends(responder_cls, requester_cls):
    """SENDs of every shape into posted receives (one larger than its message, one too
    small: LOC_LEN_ERR), a WRITE between; everything observable."""
    pr = Pair(16 * 4096, RcConfig(ackreq_every=4), seed=6)
    pr.eb.responder = responder_cls(pr.b, pr.eb.responder.cfg)
    pr.ea.requester = requester_cls(pr.a, pr.ea.requester.cfg)
    shapes = [(0, None), (4096, 7), (3 * 4096, None), (2 * 4096 + 5, 9), (100, None),
              (4096 + 1, None)]
    off = 0
    for wr_id, (n, imm) in enumerate(shapes):
        room = n + 50 if wr_id == 2 else n - 1 if wr_id == 5 else n
        pr.b.post_recv(100 + wr_id, pr.mrb.addr + off, room, pr.mrb.lkey)
        op = WROpcode.SEND if imm is None else WROpcode.SEND_WITH_IMM
        pr.a.post_send(WR(wr_id, op, pr.mra.addr + off, n, pr.mra.lkey, 0, 0, True, imm))
        if wr_id == 1:
            pr.write(50, 12 * 4096, 4096)
        off += room
    pr.run()
    rs = pr.eb.responder
    return (bytes(pr.dst), pr.a.send_cq.poll(64), pr.b.recv_cq.poll(64), pr.a.state, pr.b.state,
            dataclasses.asdict(rs.counters), [getattr(rs, f) for f in STATE], list(pr.b.rq))


def test_sends_are_identical_and_in_order_ones_are_c():
    """Every in-order SEND packet with a receive WR that has room is the C's (each SEND
    opcode once at least); the one too long for its buffer is the Python's (a NAK)."""
    before = CResponder.taken, CResponder.ops.copy()
    c = sends(CResponder, CRequester)
    assert c == sends(Responder, Requester)
    assert {op for op in C_SEND_OPS if CResponder.ops[op] > before[1][op]} == C_SEND_OPS
    assert [w.status.value for w in c[2]][-1] == "LOC_LEN_ERR" and c[5]["recv_len_err"] == 1


@pytest.mark.parametrize("mtu", [None, 1000])
def test_a_clean_write_is_c_but_for_its_first_packet(mtu):
    """Without loss every packet of a WRITE is the C's responder's, and every ACK the C's
    requester's; the C requester sends all but the first packet (which moves the WR into
    the PSN space: Requester._pull)."""
    pr = Pair(50_000, RcConfig(mtu=mtu, ack_every=4), seed=5)
    pr.eb.responder = CResponder(pr.b, pr.eb.responder.cfg)
    pr.ea.requester = CRequester(pr.a, pr.ea.requester.cfg)
    pr.write(1, 0, 50_000)
    before = CResponder.taken, CRequester.taken, CRequester.acked
    pr.run()
    n = -(-50_000 // (mtu or 4096))
    acks = pr.ea.requester.counters.acks
    assert (CResponder.taken - before[0], CRequester.taken - before[1]) == (n, n - 1)
    assert CRequester.acked - before[2] == acks == pr.eb.responder.counters.acks
    assert pr.dst == pr.src and acks >= 50_000 // (mtu or 4096) // 4
    assert [wc.status.value for wc in pr.a.send_cq.poll(8)] == ["SUCCESS"]


def _second_packet(shadow=None, shrink=False):
    """A 3-packet WRITE whose first packet the Python sent; its MR's `view` replaced by
    a subclass's calling `shadow` and / or its length cut to one packet (`shrink`); then the
    second packet by the C and, on an identical pair, by the Python: both outcomes."""
    out = []
    for nxt in (C_NEXT, Requester.next_packet):
        pr = Pair(3 * 4096, RcConfig(), seed=3)
        pr.write(1, 0, 3 * 4096)
        req = pr.ea.requester
        assert Requester.next_packet(req, 0.0).opcode == Op.WRITE_FIRST
        calls = []
        if shadow is not None:
            class Own(MR):  # MR is slotted: an instance cannot shadow view, a subclass can
                __slots__ = ()

                def view(self, va, n):
                    calls.append((va - self.addr, n))
                    return shadow(self, va, n)
            pr.mra.__class__ = Own
        if shrink:
            pr.mra.length = 4096
        try:
            p = nxt(req, 1e-6)
            out.append((pkt_rec(p), calls, [getattr(req, f) for f in REQ_STATE]))
        except Exception as e:  # the Python's error, by type and message
            out.append((type(e).__name__, str(e), calls))
    return out


def test_the_payload_view_is_the_mrs_own():
    """next_write takes the payload through MR.view as the Python does: in C for an MR
    with the class's view and contains; a subclass's `view` is called (once, with the
    same arguments); a payload outside the MR raises the Python's VerbsError."""
    c, py = _second_packet()
    assert c == py and len(c[0][13]) == 4096 and c[0][0] == Op.WRITE_MIDDLE and c[1] == []
    c, py = _second_packet(shadow=lambda mr, va, n: memoryview(b"\x07" * n))
    assert c == py and c[1] == [(4096, 4096)] and c[0][13] == b"\x07" * 4096
    c, py = _second_packet(shrink=True)
    assert c == py and c[0] == "VerbsError" and "outside MR" in c[1]


def test_other_packets_change_nothing_in_c():
    """Packets outside the C's case come back NotImplemented with the state untouched:
    replayed from a recorded transfer one at a time; the requester's when it has nothing
    in flight or is held by an RNR NAK."""
    pr = Pair(5 * 4096, RcConfig(), seed=3)
    pr.write(1, 0, 5 * 4096)
    rs = pr.eb.responder = Responder(pr.b, RcConfig())
    seen = []
    on_packet = pr.eb.on_packet
    pr.eb.on_packet = lambda p, now: seen.append(p) or on_packet(p, now)
    pr.run()
    for p in seen + [dataclasses.replace(seen[2], psn=seen[2].psn + 1),
                     dataclasses.replace(seen[2], dqpn=1), dataclasses.replace(seen[2], pkey=1)]:
        before = (dict(vars(rs)), dataclasses.asdict(rs.counters))
        assert C_WRITE(rs, p) is NotImplemented  # the message is done: nothing is in order
        assert (dict(vars(rs)), dataclasses.asdict(rs.counters)) == before
    first = dataclasses.replace(seen[0], psn=rs.epsn)  # a WRITE FIRST now in order
    assert first.opcode == Op.WRITE_FIRST
    pr.b.access, access = 0, pr.b.access  # the QP grants no remote write
    unchanged(C_WRITE, rs, [first])
    pr.b.access = access
    unchanged(C_WRITE, rs, [dataclasses.replace(first, rkey=0xBAD),
                            dataclasses.replace(first, va=pr.mrb.addr + 4096),  # past the MR
                            dataclasses.replace(first, va=(1 << 64) - 1),  # beyond C's long long
                            dataclasses.replace(first, dlen=1 << 64),
                            dataclasses.replace(first, dlen=None),
                            dataclasses.replace(first, dlen=4096),  # a FIRST that is all
                            dataclasses.replace(first, opcode=Op.WRITE_ONLY),  # sizes disagree
                            dataclasses.replace(first, payload=first.payload[:100])])
    assert C_WRITE(rs, first) is not NotImplemented  # the same packet without a fault
    rq = pr.ea.requester
    for hold in (False, True):  # all sent and acknowledged; an RNR hold
        rq.rnr_hold = hold
        before = (dict(vars(rq)), dataclasses.asdict(rq.counters))
        assert C_NEXT(rq, 1.0) is NotImplemented
        assert (dict(vars(rq)), dataclasses.asdict(rq.counters)) == before


def unchanged(fn, obj, pkts, *now):
    """Each of `pkts` is NotImplemented for `fn` and leaves `obj` as it was."""
    for p in pkts:
        before = (dict(vars(obj)), dataclasses.asdict(obj.counters))
        assert fn(obj, p, *now) is NotImplemented, p
        assert (dict(vars(obj)), dataclasses.asdict(obj.counters)) == before, p


def test_sends_the_c_does_not_take_change_nothing():
    """An in-order SEND with no receive posted (RNR), too long for the posted buffer, a
    FIRST shorter than the MTU, a MIDDLE with no FIRST, a SEND inside a WRITE: NotImplemented,
    the responder and its receive queue untouched; then the same SEND with room is C's."""
    pr = Pair(4 * 4096, seed=7)
    rs = pr.eb.responder = Responder(pr.b, RcConfig())
    pr.a.post_send(WR(1, WROpcode.SEND, pr.mra.addr, 2 * 4096, pr.mra.lkey, 0, 0))
    first = pr.ea.next_packet(0.0)
    assert first.opcode == Op.SEND_FIRST and first.psn == pr.b.rq_psn

    def refused(pkts):
        rq = list(pr.b.rq)
        unchanged(C_SEND, rs, pkts)
        assert list(pr.b.rq) == rq

    refused([first])  # nothing posted: the Python's RNR NAK
    pr.b.post_recv(9, pr.mrb.addr, 4096 - 1, pr.mrb.lkey)
    refused([first])  # too long for it
    pr.b.post_recv(10, pr.mrb.addr + 4096, 2 * 4096, pr.mrb.lkey)
    pr.b.take_recv()
    refused([dataclasses.replace(first, payload=first.payload[:100]),
             dataclasses.replace(first, opcode=Op.SEND_MIDDLE),
             dataclasses.replace(first, opcode=Op.WRITE_FIRST)])  # not a SEND opcode
    rs._msg = (pr.mrb, pr.mrb.addr, 4096, 2 * 4096)  # inside a WRITE
    refused([first])
    rs._msg = None
    assert C_SEND(rs, first) == [] and not pr.b.rq and rs._recv[2] == 4096


def test_acks_the_c_does_not_take_change_nothing():
    """The requester's C takes only an ACK of PSNs in flight: NAKs, RNR NAKs, a reserved
    or too-wide syndrome, another QP's, a stale one or one for a PSN never sent, one before
    the first packet or in ERROR come back NotImplemented with the state untouched."""
    pr = Pair(5 * 4096, RcConfig(ackreq_every=1), seed=4)
    rq = pr.ea.requester = Requester(pr.a, RcConfig(ackreq_every=1))
    pr.write(1, 0, 5 * 4096)
    acks = [pr.eb.on_packet(pr.ea.next_packet(0.0), 0.0)[0] for _ in range(3)]
    ack = acks[1]
    unchanged(C_ACK, rq, [dataclasses.replace(ack, syndrome=NAK_PSN_SEQ),
                          dataclasses.replace(ack, syndrome=0x20 | 12),  # RNR NAK
                          dataclasses.replace(ack, syndrome=0x40),  # reserved kind
                          dataclasses.replace(ack, syndrome=0x100),
                          dataclasses.replace(ack, syndrome=1 << 70),
                          dataclasses.replace(ack, syndrome=None),
                          dataclasses.replace(ack, dqpn=ack.dqpn ^ 1),
                          dataclasses.replace(ack, opcode=Op.WRITE_ONLY),
                          dataclasses.replace(ack, psn=rq.max_sent)], 0.0)  # never sent
    assert C_ACK(rq, ack, 0.0) is None and rq.una == (ack.psn + 1) & PSN_MASK
    unchanged(C_ACK, rq, [acks[0], ack], 0.0)  # stale now
    pr.a.to_error()
    unchanged(C_ACK, rq, [acks[2]], 0.0)
    fresh = Pair(10, seed=4)
    unchanged(C_ACK, fresh.ea.requester, [dataclasses.replace(ack, dqpn=fresh.a.qpn)], 0.0)


def test_the_datapath_is_chosen_explicitly(monkeypatch):
    assert fast.in_order_write("python") is None
    assert fast.in_order_write("auto") is C_WRITE
    on = os.environ.get(datapath.ENV) != "python"
    assert (fast.IN_ORDER_WRITE is C_WRITE) if on else fast.IN_ORDER_WRITE is None
    pr = Pair(100)
    assert type(pr.eb.responder).__name__ == ("FastResponder" if on else "Responder")
    assert type(pr.ea.requester).__name__ == ("FastRequester" if on else "Requester")
    assert (fast.NEXT_WRITE is C_NEXT) if on else fast.NEXT_WRITE is None
    assert (fast.ON_ACK is C_ACK) if on else fast.ON_ACK is None
    assert endpoint.IN_ORDER_WRITE is fast.IN_ORDER_WRITE
    monkeypatch.setattr(datapath.cbuild, "is_current", lambda name: False)
    with pytest.raises(datapath.NotBuilt, match="run ./setup.sh"):
        fast.in_order_write("fast")


SANITIZED_CHILD = """
from tests.unit import test_fast_rc as t
assert t.C_WRITE is mod.in_order_write, "the sanitized build is not the one in use"
for seed in range(12):
    assert (t.transfer(seed, t.CResponder, t.CRequester)
            == t.transfer(seed, t.Responder, t.Requester)), seed
t.test_other_packets_change_nothing_in_c()
t.test_acks_the_c_does_not_take_change_nothing()
t.test_sends_the_c_does_not_take_change_nothing()
assert t.sends(t.CResponder, t.CRequester) == t.sends(t.Responder, t.Requester)
t.test_a_clean_write_is_c_but_for_its_first_packet(1000)
print("sanitized ok", t.CResponder.taken, t.CRequester.taken, t.CRequester.acked,
      dict(t.CResponder.ops))
"""


def test_sanitized(asan_dir):
    """The differential transfers against an ASan + UBSan build, in a child Python."""
    run_sanitized(fast.MODULE, SANITIZED_CHILD, asan_dir)


#: emucore/csrc/slots.h's ROCE_PKT_FIELDS: emucore.wire.ib.RocePkt's fields, in order
ROCE_PKT_FIELDS = ("opcode", "dqpn", "psn", "ackreq", "becn", "fecn", "pkey", "va", "rkey",
                   "dlen", "syndrome", "msn", "imm", "payload", "src", "dst")
ROCE_PKT_CHILD = """
import dataclasses
import emucore.wire.ib as ib
{imports}
@dataclasses.dataclass(slots={slots})
class RocePkt:
{fields}
ib.RocePkt = RocePkt
try:
    {call}
except ImportError as e:
    print(e)
else:
    print("no error")
"""


def with_roce_pkt(names, slots, imports, call):
    """What line `call` of a child Python says (its ImportError, or "no error") when
    emucore.wire.ib.RocePkt is a dataclass of `names` (each None by default; slotted or
    not) of the child's __main__, after `imports` ran with the real one."""
    fields = "\n".join(f"    {n}: object = None" for n in names)
    code = ROCE_PKT_CHILD.format(imports=imports, slots=slots, fields=fields, call=call)
    r = subprocess.run([sys.executable, "-c", code], cwd=cbuild.ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout.strip()


#: (the child's RocePkt fields, slotted, what the C module says of it)
WRONG_ROCE_PKT = [
    (ROCE_PKT_FIELDS, True, "no error"),
    (ROCE_PKT_FIELDS[:-2] + ("dst", "src"), True,
     "{who}: <class '__main__.RocePkt'>'s dataclass fields are not the 16 it fills, in that order"),
    (ROCE_PKT_FIELDS + ("extra",), True,
     "{who}: <class '__main__.RocePkt'>'s dataclass fields are not the 16 it fills, in that order"),
    (ROCE_PKT_FIELDS[:6] + ROCE_PKT_FIELDS[7:], True,
     "{who}: <class '__main__.RocePkt'>.pkey is not a slot"),
    (ROCE_PKT_FIELDS, False, "{who}: <class '__main__.RocePkt'>.opcode is not a slot"),
]


@pytest.mark.parametrize("names, slots, said", WRONG_ROCE_PKT)
def test_a_roce_pkt_the_c_does_not_fill_is_an_import_error(names, slots, said):
    """next_write fills RocePkt's slots by slots.h's field list: importing _rc checks that
    list against the class (each a slot, the dataclass's fields exactly, in order)."""
    assert with_roce_pkt(names, slots, "", "import traffic.fast._rc") == said.format(who="_rc")
