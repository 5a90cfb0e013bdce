"""RC transport (traffic/rc/endpoint.py, rc_segment, requester, responder; PSN and AETH of
emucore/wire/ib.py): segmentation, PSN wrap, responder table, go-back-N, spraying."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Callable

import pytest

from emucore.wire.ib import (NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, PSN_HALF, AckKind, Op,
                            RocePkt, decode_syndrome, encode_ack, encode_nak, psn_add, psn_diff,
                            psn_lt)
from traffic.nic.nicconfig import NicConfig
from traffic.rc.endpoint import RcEndpoint
from traffic.rc.rcconfig import RcConfig
from traffic.rc.segment import packet_count, segment_at, segments
from traffic.verbs import Access, Context, QPState
from traffic.workreq import WR, WCOpcode, WCStatus, WROpcode

MTU = 4096
PKEY = 0x8012


# ---------------------------------------------------------------- segmentation
@pytest.mark.parametrize("length, ops", [
    (0, [Op.WRITE_ONLY]),
    (1, [Op.WRITE_ONLY]),
    (MTU, [Op.WRITE_ONLY]),
    (MTU + 1, [Op.WRITE_FIRST, Op.WRITE_LAST]),
    (2 * MTU, [Op.WRITE_FIRST, Op.WRITE_LAST]),
    (2 * MTU + 1, [Op.WRITE_FIRST, Op.WRITE_MIDDLE, Op.WRITE_LAST]),
])
def test_segmentation_boundaries(length: int, ops: list[Op]) -> None:
    segs = list(segments(length, MTU))
    assert [s.opcode for s in segs] == ops
    assert sum(s.size for s in segs) == length
    assert [s.offset for s in segs] == [i * MTU for i in range(len(ops))]


def test_segmentation_64mb_without_building_it() -> None:
    n = 64 << 20
    assert packet_count(n, MTU) == 16384
    ops = [s.opcode for s in segments(n, MTU)]
    assert ops[0] == Op.WRITE_FIRST and ops[-1] == Op.WRITE_LAST
    assert ops.count(Op.WRITE_MIDDLE) == 16382
    assert segment_at(16383, n, MTU).size == MTU


@pytest.mark.parametrize("write_only, imm, ops", [
    (False, True, [Op.WRITE_FIRST, Op.WRITE_MIDDLE, Op.WRITE_LAST_IMM]),
    (True, False, [Op.WRITE_ONLY] * 3),
    (True, True, [Op.WRITE_ONLY, Op.WRITE_ONLY, Op.WRITE_ONLY_IMM]),
])
def test_segmentation_modes(write_only: bool, imm: bool, ops: list[Op]) -> None:
    assert [s.opcode for s in segments(2 * MTU + 5, MTU, write_only, imm)] == ops


# ---------------------------------------------------------------- PSN / AETH
@pytest.mark.parametrize("a, b, diff", [
    (5, 3, 2), (3, 5, -2), (0, 0xFFFFFF, 1), (0xFFFFFF, 0, -1), (0x7FFFFF, 0, 0x7FFFFF),
    (0x800000, 0, -0x800000),
])
def test_psn_diff_wraps(a: int, b: int, diff: int) -> None:
    assert psn_diff(a, b) == diff
    assert psn_lt(a, b) == (diff < 0)


def test_psn_add_wraps() -> None:
    assert psn_add(0xFFFFFF, 1) == 0 and psn_add(0, -1) == 0xFFFFFF


@pytest.mark.parametrize("syndrome, kind, value", [
    (0x1F, AckKind.ACK, -1), (0x00, AckKind.ACK, 0), (0x05, AckKind.ACK, 6),
    (0x1E, AckKind.ACK, 32768), (0x60, AckKind.NAK, 0), (0x61, AckKind.NAK, 1),
    (0x62, AckKind.NAK, 2), (0x63, AckKind.NAK, 3), (0x2E, AckKind.RNR_NAK, 0x0E),
])
def test_aeth_decode(syndrome: int, kind: AckKind, value: int) -> None:
    assert decode_syndrome(syndrome) == (kind, value)


def test_aeth_encode() -> None:
    assert encode_ack() == 0x1F and encode_ack(0) == 0 and encode_ack(7) == 0x05
    assert encode_ack(100000) == 0x1E
    assert [encode_nak(c) for c in range(4)] == [NAK_PSN_SEQ, NAK_INV_REQ, NAK_REM_ACCESS, 0x63]
    with pytest.raises(ValueError, match="code"):
        encode_nak(5)
    with pytest.raises(ValueError, match="reserved"):
        decode_syndrome(0x40)


# ---------------------------------------------------------------- harness
class Pair:
    """Requester QP 'a' (client) and responder QP 'b' (server), connected in memory."""

    def __init__(self, size: int, cfg: RcConfig | None = None, a_psn: int = 0x000ABC,
                 b_psn: int = 0x123, retry_cnt: int = 7, seed: int = 1,
                 rx_access: Access = Access.REMOTE_WRITE | Access.LOCAL_WRITE) -> None:
        rng = random.Random(seed)
        self.ca, self.cb = Context(random.Random(rng.random())), Context(random.Random(rng.random()))
        pa, pb = self.ca.alloc_pd(), self.cb.alloc_pd()
        self.src = bytearray(rng.randbytes(size))
        self.dst = bytearray(size)
        self.mra = pa.reg_mr(self.src, Access.LOCAL_WRITE)
        self.mrb = pb.reg_mr(self.dst, rx_access)
        self.a = pa.create_qp(self.ca.create_cq(), self.ca.create_cq())
        self.b = pb.create_qp(self.cb.create_cq(), self.cb.create_cq())
        for qp, peer, rq, sq in ((self.a, self.b, b_psn, a_psn), (self.b, self.a, a_psn, b_psn)):
            qp.modify_to_init(PKEY, Access.REMOTE_WRITE)
            qp.modify_to_rtr(peer.qpn, rq, 4096, remote_addr=f"ip-{peer.qpn}")
            qp.modify_to_rts(sq, timeout_s=1e-3, retry_cnt=retry_cnt)
        self.ea, self.eb = RcEndpoint(self.a, cfg), RcEndpoint(self.b, cfg)

    def write(self, wr_id: int, off: int, length: int, imm: int | None = None,
              signaled: bool = True, rkey: int | None = None) -> None:
        op = WROpcode.WRITE if imm is None else WROpcode.WRITE_WITH_IMM
        self.a.post_send(WR(wr_id, op, self.mra.addr + off, length, self.mra.lkey,
                            self.mrb.addr + off, self.mrb.rkey if rkey is None else rkey,
                            signaled, imm))

    def run(self, drop: Callable[[RocePkt], bool] = lambda p: False,
            shuffle: random.Random | None = None, burst: int = 64, max_steps: int = 100000) -> float:
        now = 0.0
        for _ in range(max_steps):
            if self.ea.requester.idle() or self.a.state is QPState.ERROR:
                return now
            batch = []
            while len(batch) < burst and (p := self.ea.next_packet(now)) is not None:
                batch.append(p)
            if shuffle is not None:
                shuffle.shuffle(batch)
            for p in batch:
                if drop(p):
                    continue
                for r in self.eb.on_packet(p, now):
                    if not drop(r):
                        self.ea.on_packet(r, now)
            now += 1e-6
            if not batch and self.ea.deadline is not None:
                now = max(now, self.ea.deadline)
            self.ea.on_timer(now)
        raise AssertionError("transfer did not finish")


# ---------------------------------------------------------------- loops
def test_clean_transfer_byte_exact_and_descriptor_fields() -> None:
    pr2 = Pair(3 * MTU + 100)
    assert pr2.ea.next_packet(0.0) is None  # nothing posted yet
    pr2.write(7, 0, 3 * MTU + 100)
    p = pr2.ea.next_packet(0.0)
    assert p is not None
    assert (p.opcode, p.dqpn, p.psn, p.pkey) == (Op.WRITE_FIRST, pr2.b.qpn, 0x000ABC, PKEY)
    assert (p.va, p.rkey, p.dlen, len(p.payload)) == (pr2.mrb.addr, pr2.mrb.rkey, 3 * MTU + 100, MTU)
    assert p.dst == f"ip-{pr2.b.qpn}"
    pr2.eb.on_packet(p, 0.0)
    pr2.run()
    assert pr2.dst == pr2.src
    wcs = pr2.a.send_cq.poll(10)
    assert [(w.wr_id, w.status, w.byte_len) for w in wcs] == [(7, WCStatus.SUCCESS, 3 * MTU + 100)]
    assert pr2.ea.requester.counters.retransmitted == 0


def test_only_signaled_wrs_complete_in_order() -> None:
    pr = Pair(8 * MTU)
    for i in range(4):
        pr.write(i, 2 * i * MTU, 2 * MTU, signaled=i != 2)
    pr.run()
    assert [w.wr_id for w in pr.a.send_cq.poll(10)] == [0, 1, 3]
    assert pr.dst == pr.src


def test_psn_wrap_message_straddles_2_24() -> None:
    pr = Pair(5 * MTU, a_psn=0xFFFFFE, b_psn=0xFFFFFF)
    pr.write(1, 0, 5 * MTU)
    psns = []
    orig = pr.ea.next_packet

    def spy(now: float) -> RocePkt | None:
        p = orig(now)
        if p is not None:
            psns.append(p.psn)
        return p
    pr.ea.next_packet = spy  # type: ignore[method-assign]
    pr.run()
    assert psns == [0xFFFFFE, 0xFFFFFF, 0, 1, 2]
    assert pr.dst == pr.src and pr.a.send_cq.poll()[0].status is WCStatus.SUCCESS


def test_go_back_n_after_one_drop() -> None:
    """All 20 packets leave in one burst (no window below the PSN bound); PSN 5 is lost,
    so the responder NAKs once at PSN 6 and discards 6..19; the requester goes back to 5
    and sends 5..19 again: exactly 15 retransmissions, no timeout."""
    pr = Pair(20 * MTU)
    pr.write(1, 0, 20 * MTU)
    dropped = []

    def drop(p: RocePkt) -> bool:
        if p.opcode != Op.ACK and p.psn == psn_add(0x000ABC, 5) and not dropped:
            dropped.append(p.psn)
            return True
        return False
    pr.run(drop)
    assert dropped == [psn_add(0x000ABC, 5)] and pr.dst == pr.src
    c, r = pr.ea.requester.counters, pr.eb.responder.counters
    assert (c.retransmitted, c.packets, c.naks, c.timeouts) == (15, 20 + 15, 1, 0)
    assert r.nak_seq == 1  # one NAK per gap, not one per packet
    assert (r.out_of_order, r.duplicates, r.bytes_placed) == (14, 0, 20 * MTU)
    assert pr.a.send_cq.poll()[0].status is WCStatus.SUCCESS


def test_random_loss_1pct_completes_byte_exact() -> None:
    """Seeded loss, so the run is exact: 6 data packets and no ACK/NAK are lost (PSN
    offsets 18, 73, 199, 216, 222 and a resent 251); 216 and 222 leave in the same burst,
    so one NAK and its go-back-N recover both: 5 NAKs, no timeout."""
    loss = random.Random(42)
    lost: list[RocePkt] = []

    def drop(p: RocePkt) -> bool:
        if loss.random() < 0.01:
            lost.append(p)
            return True
        return False
    pr = Pair(1 << 20, cfg=RcConfig(window=64))
    for i in range(8):
        pr.write(i, i << 17, 1 << 17)
    pr.run(drop)
    assert pr.dst == pr.src
    assert [w.status for w in pr.a.send_cq.poll(20)] == [WCStatus.SUCCESS] * 8
    c, r = pr.ea.requester.counters, pr.eb.responder.counters
    assert [p.opcode == Op.ACK for p in lost] == [False] * 6
    assert (c.retransmitted, c.naks, c.timeouts) == (102, 6 - 1, 0)
    assert c.packets == (1 << 20) // MTU + c.retransmitted
    assert r.packets == c.packets - len(lost) and r.nak_seq == c.naks


def test_lost_acks_recovered_by_timeout() -> None:
    pr = Pair(4 * MTU)
    pr.write(1, 0, 4 * MTU)
    acks = []

    def drop(p: RocePkt) -> bool:
        if p.opcode == Op.ACK and len(acks) < 1:
            acks.append(p)
            return True
        return False
    pr.run(drop)
    c, r = pr.ea.requester.counters, pr.eb.responder.counters
    # the only AckReq (end of message) lost: one timeout, the 4 packets again, all duplicates
    assert (c.timeouts, c.retransmitted, r.duplicates) == (1, 4, 4) and pr.dst == pr.src
    # re-ACKed at the first duplicate and at the duplicate carrying the AckReq
    assert (r.acks, c.acks) == (1 + 2, 2)


def test_write_only_shuffled_delivery_lands_byte_exact() -> None:
    cfg = RcConfig(write_only=True, window=128, reorder_window=256)
    pr = Pair(64 * MTU + 17, cfg)
    pr.write(1, 0, 32 * MTU, imm=0xAB)
    pr.write(2, 32 * MTU, 32 * MTU + 17, imm=0xCD)
    arrived: list[int] = []
    on_packet = pr.eb.on_packet

    def spy(p: RocePkt, now: float) -> list[RocePkt]:
        if p.opcode != Op.ACK:
            arrived.append(psn_diff(p.psn, 0x000ABC))
        return on_packet(p, now)
    pr.eb.on_packet = spy  # type: ignore[method-assign]
    pr.run(shuffle=random.Random(3))
    assert pr.dst == pr.src
    # out of order = arrived while an earlier PSN was still missing
    ahead = [i for i, psn in enumerate(arrived) if any(q not in arrived[:i] for q in range(psn))]
    assert sorted(arrived) == list(range(65))  # 65 packets, one window: no loss, no resend
    assert pr.eb.responder.counters.out_of_order == len(ahead) == 60
    assert pr.eb.responder.counters.nak_seq == 0
    assert [w.imm for w in pr.b.recv_cq.poll(5)] == [0xAB, 0xCD]


def test_write_only_packets_each_carry_reth() -> None:
    pr = Pair(3 * MTU, RcConfig(write_only=True))
    pr.write(1, 0, 3 * MTU)
    pkts = [pr.ea.next_packet(0.0) for _ in range(3)]
    assert [(p.opcode, p.va, p.dlen) for p in pkts if p] == [
        (Op.WRITE_ONLY, pr.mrb.addr + i * MTU, MTU) for i in range(3)]


def test_write_only_shuffle_with_loss() -> None:
    cfg = RcConfig(write_only=True, window=64, reorder_window=64)
    loss = random.Random(9)
    pr = Pair(256 * MTU, cfg)
    pr.write(1, 0, 256 * MTU)
    pr.run(lambda p: loss.random() < 0.02, shuffle=random.Random(4))
    assert pr.dst == pr.src and pr.a.send_cq.poll()[0].status is WCStatus.SUCCESS


def test_write_with_imm_completes_receive() -> None:
    pr = Pair(2 * MTU + 3)
    pr.b.post_recv(99)
    pr.write(1, 0, 2 * MTU + 3, imm=0x1234)
    pr.run()
    (wc,) = pr.b.recv_cq.poll(5)
    assert (wc.wr_id, wc.opcode, wc.imm, wc.byte_len) == (99, WCOpcode.RECV_RDMA_WITH_IMM, 0x1234, 2 * MTU + 3)


def test_retry_exceeded() -> None:
    pr = Pair(2 * MTU, retry_cnt=2)
    pr.write(1, 0, MTU)
    pr.write(2, MTU, MTU)
    pr.run(drop=lambda p: True)
    assert pr.ea.requester.counters.timeouts == 3
    assert [(w.wr_id, w.status) for w in pr.a.send_cq.poll(5)] == [
        (1, WCStatus.RETRY_EXC_ERR), (2, WCStatus.WR_FLUSH_ERR)]
    assert pr.a.state is QPState.ERROR


def test_remote_access_error_completes_wr_and_errors_qp() -> None:
    pr = Pair(4 * MTU)
    pr.write(1, 0, MTU)
    pr.write(2, MTU, 2 * MTU, rkey=pr.mrb.rkey ^ 1)
    pr.write(3, 3 * MTU, MTU)
    pr.run()
    assert [(w.wr_id, w.status) for w in pr.a.send_cq.poll(5)] == [
        (1, WCStatus.SUCCESS), (2, WCStatus.REM_ACCESS_ERR), (3, WCStatus.WR_FLUSH_ERR)]
    assert pr.a.state is QPState.ERROR and pr.b.state is QPState.ERROR
    assert pr.dst[:MTU] == pr.src[:MTU] and not any(pr.dst[MTU:])


def test_bad_lkey_is_local_protection_error() -> None:
    pr = Pair(MTU)
    pr.a.post_send(WR(5, WROpcode.WRITE, pr.mra.addr, MTU, pr.mra.lkey ^ 1, pr.mrb.addr, pr.mrb.rkey))
    assert pr.ea.next_packet(0.0) is None
    assert pr.a.send_cq.poll()[0].status is WCStatus.LOC_PROT_ERR


def test_window_limits_inflight() -> None:
    pr = Pair(100 * MTU, RcConfig(window=8))
    pr.write(1, 0, 100 * MTU)
    pkts = [p for _ in range(20) if (p := pr.ea.next_packet(0.0)) is not None]
    assert len(pkts) == 8 and pkts[-1].ackreq
    assert pr.ea.requester.outstanding() == 8


def test_ackreq_every_n_and_at_message_end() -> None:
    pr = Pair(10 * MTU, RcConfig(ackreq_every=4))
    pr.write(1, 0, 10 * MTU)
    flags = [p.ackreq for _ in range(10) if (p := pr.ea.next_packet(0.0)) is not None]
    assert flags == [False, False, False, True, False, False, False, True, False, True]


# ---------------------------------------------------------------- responder table
def _rsp(**kw: object) -> tuple[Pair, RcEndpoint]:
    pr = Pair(4 * MTU, **kw)  # type: ignore[arg-type]
    return pr, pr.eb


def _pkt(pr: Pair, op: Op, psn_off: int, size: int, **kw: object) -> RocePkt:
    base = dict(opcode=op, dqpn=pr.b.qpn, psn=psn_add(0x000ABC, psn_off), pkey=PKEY,
                payload=b"\x5a" * size, ackreq=True)
    if op in (Op.WRITE_FIRST, Op.WRITE_ONLY, Op.WRITE_ONLY_IMM):
        base.update(va=pr.mrb.addr, rkey=pr.mrb.rkey, dlen=size)
    base.update(kw)
    return RocePkt(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("name, mutate, reply, placed, state", [
    ("in order", {}, 0x1F, True, QPState.RTS),
    ("gap", {"psn_off": 2}, NAK_PSN_SEQ, False, QPState.RTS),
    ("bad rkey", {"rkey": 0xDEAD}, NAK_REM_ACCESS, False, QPState.ERROR),
    ("out of bounds", {"va_off": 4 * MTU - 10}, NAK_REM_ACCESS, False, QPState.ERROR),
    ("va below MR", {"va_off": -1}, NAK_REM_ACCESS, False, QPState.ERROR),
    ("wrong pkey", {"pkey": 0x8013}, None, False, QPState.RTS),
    ("wrong qpn", {"dqpn_xor": 1}, None, False, QPState.RTS),
    ("no remote write on MR", {"rx_access": Access.LOCAL_WRITE | Access.REMOTE_READ},
     NAK_REM_ACCESS, False, QPState.ERROR),
    ("payload larger than MTU", {"size": MTU + 1}, NAK_INV_REQ, False, QPState.ERROR),
    ("middle without first", {"op": Op.WRITE_MIDDLE}, NAK_INV_REQ, False, QPState.ERROR),
])
def test_responder_table(name: str, mutate: dict, reply: int | None, placed: bool,
                         state: QPState) -> None:
    m = dict(mutate)
    pr = Pair(4 * MTU, rx_access=m.pop("rx_access", Access.REMOTE_WRITE | Access.LOCAL_WRITE))
    size = m.pop("size", 100)
    p = _pkt(pr, m.pop("op", Op.WRITE_ONLY), m.pop("psn_off", 0), size)
    if "va_off" in m:
        p.va = pr.mrb.addr + m.pop("va_off")
    if "dqpn_xor" in m:
        p.dqpn ^= m.pop("dqpn_xor")
    for k, v in m.items():
        setattr(p, k, v)
    out = pr.eb.on_packet(p, 0.0)
    assert [r.syndrome for r in out] == ([] if reply is None else [reply]), name
    assert any(pr.dst) == placed, name
    assert pr.b.state is state, name
    if out:
        assert out[0].opcode == Op.ACK and out[0].dqpn == pr.a.qpn


def test_responder_duplicate_reacks_without_placement() -> None:
    pr = Pair(4 * MTU)
    assert pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 0, 10), 0.0)[0].syndrome == 0x1F
    pr.dst[:] = bytes(len(pr.dst))
    (ack,) = pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 0, 10), 0.0)
    assert ack.syndrome == 0x1F and ack.psn == 0x000ABC and not any(pr.dst)
    assert pr.eb.responder.counters.duplicates == 1


def test_responder_gap_naks_once_then_resumes() -> None:
    pr = Pair(4 * MTU)
    r1 = pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 1, 10), 0.0)
    r2 = pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 2, 10), 0.0)
    assert [(r.syndrome, r.psn) for r in r1] == [(NAK_PSN_SEQ, 0x000ABC)] and r2 == []
    (ok,) = pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 0, 10), 0.0)
    assert (ok.syndrome, ok.psn, ok.msn) == (0x1F, 0x000ABC, 1)


def test_multi_packet_out_of_bounds_places_nothing() -> None:
    pr = Pair(4 * MTU)
    first = _pkt(pr, Op.WRITE_FIRST, 0, MTU, dlen=4 * MTU + 1)
    (nak,) = pr.eb.on_packet(first, 0.0)
    assert nak.syndrome == NAK_REM_ACCESS and not any(pr.dst)
    assert pr.eb.on_packet(_pkt(pr, Op.WRITE_LAST, 1, 1), 0.0) == []  # QP in error: dropped


def test_ack_coalescing_every_k() -> None:
    pr = Pair(8 * MTU, RcConfig(ack_every=3))
    out = [pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, i, 8, ackreq=False), 0.0) for i in range(7)]
    assert [len(o) for o in out] == [0, 0, 1, 0, 0, 1, 0]
    assert out[5][0].psn == psn_add(0x000ABC, 5) and out[5][0].msn == 6


def test_write_only_responder_acks_cumulative() -> None:
    pr = Pair(4 * MTU, RcConfig(write_only=True))
    last = _pkt(pr, Op.WRITE_ONLY, 2, 8, va=pr.mrb.addr + 16)
    assert pr.eb.on_packet(last, 0.0) == []  # AckReq seen but PSN 0, 1 still missing
    assert pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 1, 8, ackreq=False, va=pr.mrb.addr + 8), 0.0) == []
    (ack,) = pr.eb.on_packet(_pkt(pr, Op.WRITE_ONLY, 0, 8, ackreq=False), 0.0)
    assert ack.psn == psn_add(0x000ABC, 2) and bytes(pr.dst[:24]) == b"\x5a" * 24


def test_config_errors_name_field() -> None:
    with pytest.raises(ValueError, match="window"):
        RcConfig(window=0)
    with pytest.raises(ValueError, match="ackreq_every"):
        RcConfig(ackreq_every=-1)
    with pytest.raises(ValueError, match="reorder_window"):
        RcConfig(write_only=True, window=2048, reorder_window=1024)
    assert replace(RcConfig(), mtu=1024).mtu == 1024


def test_requester_64mb_descriptors_are_zero_copy_slices() -> None:
    """With the default window (the IBA PSN bound, as RNICs have no smaller one for
    WRITEs) a 64 MB write leaves whole: 16384 packets in flight, none held back."""
    n = 64 << 20
    pr = Pair(16, RcConfig())
    assert RcConfig().window == NicConfig.__dataclass_fields__["window"].default == PSN_HALF - 1
    big = bytearray(n)
    mr = pr.a.pd.reg_mr(big, Access.LOCAL_WRITE)
    pr.a.post_send(WR(1, WROpcode.WRITE, mr.addr, n, mr.lkey, 0x1000, 0x55))
    ops: dict[Op, int] = {}
    total = 0
    while (p := pr.ea.next_packet(0.0)) is not None:
        ops[Op(p.opcode)] = ops.get(Op(p.opcode), 0) + 1
        total += len(p.payload)
        assert isinstance(p.payload, memoryview)
    assert ops == {Op.WRITE_FIRST: 1, Op.WRITE_MIDDLE: 16382, Op.WRITE_LAST: 1}
    assert total == n and pr.ea.requester.counters.bytes == n
    assert pr.ea.requester.outstanding() == n // MTU == 16384


def test_requester_ignores_garbage_acks() -> None:
    pr = Pair(MTU)
    pr.write(1, 0, MTU)
    p = pr.ea.next_packet(0.0)
    assert p is not None
    bad = [RocePkt(Op.ACK, pr.a.qpn, p.psn, syndrome=0x40, msn=1),        # reserved kind
           RocePkt(Op.ACK, pr.a.qpn ^ 1, p.psn, syndrome=0x1F, msn=1),    # other QP
           RocePkt(Op.ACK, pr.a.qpn, psn_add(p.psn, 1), syndrome=0x1F)]   # never sent
    for r in bad:
        pr.ea.on_packet(r, 0.0)
    assert pr.ea.requester.outstanding() == 1 and not pr.a.send_cq.poll()
    pr.ea.on_packet(RocePkt(Op.ACK, pr.a.qpn, p.psn, syndrome=0x1F, msn=1), 0.0)
    assert pr.a.send_cq.poll()[0].status is WCStatus.SUCCESS
