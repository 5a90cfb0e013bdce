"""SEND on both transports (issue 16: "RUD ... for WRITE and SEND"): a SEND lands in the
buffer of the receiver's oldest posted receive, which completes RECV with the length
(and the immediate); with no receive posted the receiver says not-ready (RoCE: RNR NAK,
UET: NACK NO_RESOURCE) and the sender tries again after the RNR delay, a bounded number
of times; a SEND longer than the posted buffer fails on both sides. RoCE over the
in-memory pair of test_rc (go-back-N under loss); UET over the fake fabric of
test_uet_transport (reordering, loss, duplicates, trimming), where a one-packet message
takes the medium or small SES header."""

import random

import pytest
from scapy.layers.l2 import Ether

from emucore.wire.ib import AckKind, Op, RocePkt, decode_syndrome
from emucore.wire.uet import NextHdr, SesOpcode
from emucore.wire.uet_codec import parse
from traffic.rc.segment import segments
from traffic.uet.uetconfig import UetConfig
from traffic.verbs import MIN_RNR_TIMER_S, QPState, VerbsError
from traffic.workreq import WR, WCOpcode, WCStatus, WROpcode
from emucore.wire.roce import BTH
from tests.unit.test_nic import connected
from tests.unit.test_nic_uet import TRIM, pump
from tests.unit.test_rc import MTU, Pair
from tests.unit.test_uet_transport import Fabric, fill


# ------------------------------------------------------------------------- RoCE
@pytest.mark.parametrize("length, imm, ops", [
    (0, False, [Op.SEND_ONLY]),
    (MTU, True, [Op.SEND_ONLY_IMM]),
    (MTU + 1, False, [Op.SEND_FIRST, Op.SEND_LAST]),
    (3 * MTU, True, [Op.SEND_FIRST, Op.SEND_MIDDLE, Op.SEND_LAST_IMM])])
def test_send_segmentation_ignores_write_only(length, imm, ops):
    for write_only in (False, True):
        assert [s.opcode for s in segments(length, MTU, write_only, imm, send=True)] == ops


def send(pr: Pair, wr_id: int, off: int, length: int, imm: int | None = None) -> None:
    op = WROpcode.SEND if imm is None else WROpcode.SEND_WITH_IMM
    pr.a.post_send(WR(wr_id, op, pr.mra.addr + off, length, pr.mra.lkey, 0, 0, True, imm))


def recv(pr: Pair, wr_id: int, off: int, length: int) -> None:
    pr.b.post_recv(wr_id, pr.mrb.addr + off, length, pr.mrb.lkey)


def test_roce_sends_land_in_posted_buffers_in_order_with_writes_between():
    pr = Pair(8 * MTU)
    recv(pr, 10, 0, 3 * MTU)                 # larger than the message: byte_len says how much
    recv(pr, 11, 4 * MTU, MTU)
    send(pr, 1, 0, 2 * MTU + 5, imm=0xABC)
    pr.write(2, 6 * MTU, MTU)
    send(pr, 3, 4 * MTU, 0)
    pr.run()
    assert pr.dst[:2 * MTU + 5] == pr.src[:2 * MTU + 5] and not any(pr.dst[2 * MTU + 5:3 * MTU])
    assert pr.dst[6 * MTU:7 * MTU] == pr.src[6 * MTU:7 * MTU]
    assert [(w.wr_id, w.opcode, w.byte_len, w.imm) for w in pr.b.recv_cq.poll(5)] == [
        (10, WCOpcode.RECV, 2 * MTU + 5, 0xABC), (11, WCOpcode.RECV, 0, None)]
    assert [(w.wr_id, w.opcode, w.status) for w in pr.a.send_cq.poll(5)] == [
        (1, WCOpcode.SEND, WCStatus.SUCCESS), (2, WCOpcode.RDMA_WRITE, WCStatus.SUCCESS),
        (3, WCOpcode.SEND, WCStatus.SUCCESS)]


def test_roce_send_byte_exact_through_random_loss():
    n = 256 * MTU - 17
    pr = Pair(256 * MTU)
    recv(pr, 7, 0, 256 * MTU)
    send(pr, 1, 0, n)
    rng = random.Random(4)
    pr.run(drop=lambda p: rng.random() < 0.03)
    assert pr.dst[:n] == pr.src[:n]
    assert pr.ea.requester.counters.retransmitted > 0
    (wc,) = pr.b.recv_cq.poll(5)
    assert (wc.wr_id, wc.status, wc.byte_len) == (7, WCStatus.SUCCESS, n)


def test_roce_rnr_nak_then_the_receive_is_posted():
    pr = Pair(4 * MTU)
    seen = []

    def watch(p: RocePkt) -> bool:
        if p.opcode == Op.ACK and decode_syndrome(p.syndrome)[0] is AckKind.RNR_NAK:
            seen.append(p.psn)
            if len(seen) == 2:               # the receiver posts after the second RNR NAK
                recv(pr, 5, 0, 4 * MTU)
        return False

    send(pr, 1, 0, 3 * MTU)
    t = pr.run(drop=watch)
    assert len(seen) == 2 and len(set(seen)) == 1   # the same PSN, the SEND's first
    assert t >= 2 * MIN_RNR_TIMER_S                  # each RNR NAK held the QP that long
    assert pr.dst[:3 * MTU] == pr.src[:3 * MTU]
    assert pr.ea.requester.counters.rnr_naks == 2 and pr.eb.responder.counters.rnr_nak == 2
    assert pr.a.send_cq.poll(5)[0].status is WCStatus.SUCCESS


def test_roce_rnr_retries_run_out():
    pr = Pair(MTU)
    pr.a.rnr_retry = 2
    send(pr, 1, 0, 100)
    send(pr, 2, 100, 100)
    pr.run()
    assert [(w.wr_id, w.status) for w in pr.a.send_cq.poll(5)] == [
        (1, WCStatus.RNR_RETRY_EXC_ERR), (2, WCStatus.WR_FLUSH_ERR)]
    assert pr.eb.responder.counters.rnr_nak == 3 and pr.a.state is QPState.ERROR


def test_roce_send_longer_than_the_buffer_fails_both_sides():
    pr = Pair(4 * MTU)
    recv(pr, 9, 0, MTU)
    send(pr, 1, 0, 2 * MTU)
    pr.run()
    assert [(w.wr_id, w.status) for w in pr.b.recv_cq.poll(5)] == [(9, WCStatus.LOC_LEN_ERR)]
    assert pr.a.send_cq.poll(5)[0].status is WCStatus.REM_INV_REQ_ERR
    assert pr.a.state is QPState.ERROR and pr.b.state is QPState.ERROR


def test_verbs_refuse_bad_send_and_recv_requests():
    pr = Pair(MTU)
    with pytest.raises(VerbsError, match="imm"):
        pr.a.post_send(WR(1, WROpcode.SEND_WITH_IMM, pr.mra.addr, 1, pr.mra.lkey, 0, 0))
    with pytest.raises(VerbsError, match="lkey"):
        pr.b.post_recv(1, pr.mrb.addr, MTU, pr.mrb.lkey ^ 1)
    with pytest.raises(VerbsError, match="lkey"):
        pr.b.post_recv(1, pr.mrb.addr + 1, MTU, pr.mrb.lkey)   # past the MR's end
    with pytest.raises(VerbsError, match="rnr_retry"):
        Pair(MTU).a.modify_to_rts(0, rnr_retry=8)


# -------------------------------------------------------------------------- UET
SENDS = [(1, 0, 100_000, 7), (2, 100_000, 1, None), (3, 200_000, 0, 9),
         (4, 300_000, 16383, None), (5, 400_000, 4096, 0x55)]


def usend(side, wr_id, off, length, imm=None):
    op = WROpcode.SEND if imm is None else WROpcode.SEND_WITH_IMM
    side.qp.post_send(WR(wr_id, op, side.mr.addr + off, length, side.mr.lkey, 0, 0, True, imm))


def urecv(side, wr_id, off, length):
    side.qp.post_recv(wr_id, side.mr.addr + off, length, side.mr.lkey)


def uet_sends(fab, sends=SENDS, room=100_000):
    """Post one receive per SEND (each a `room`-byte buffer at 500 KB + i * room), send,
    run; return {wr_id of the receive: (byte_len, imm, bytes received)}."""
    a, b = fab.a, fab.b
    fill(a, 9)
    for i, _s in enumerate(sends):
        urecv(b, 100 + i, 500_000 + i * room, room)
    for wr_id, off, n, imm in sends:
        usend(a, wr_id, off, n, imm)
    fab.run()
    sent = sorted((w.wr_id, w.opcode, w.status) for w in a.cq.poll(100))
    assert sent == [(s[0], WCOpcode.SEND, WCStatus.SUCCESS) for s in sends]
    got = {}
    for w in b.cq.poll(100):
        assert w.opcode is WCOpcode.RECV and w.status is WCStatus.SUCCESS
        at = 500_000 + (w.wr_id - 100) * room
        got[w.wr_id] = (w.byte_len, w.imm, bytes(b.buf[at:at + w.byte_len]))
    return got


def check_sends(got, fab, sends=SENDS):
    """Every SEND arrived whole in one receive (on RUD not necessarily the one posted
    for it: RUD does not order messages)."""
    want = sorted((n, imm, bytes(fab.a.buf[off:off + n])) for _w, off, n, imm in sends)
    assert sorted(got.values()) == want


def test_uet_sends_exact_on_a_clean_fabric_with_the_short_headers():
    fab = Fabric(1, size=1 << 20)
    hdrs = []
    out = fab.out

    def spy(side, tx):
        if side is fab.a:
            hdrs.append(tx.ses.hdr if tx.ses.opcode == SesOpcode.SEND else None)
        out(side, tx)

    fab.out = spy
    check_sends(uet_sends(fab), fab)
    # 100 KB: 25 standard; 1 B: small; 0 B with imm: medium (HD); 16383 B: 4 standard;
    # one MTU with imm: medium (HD)
    assert hdrs.count(NextHdr.REQ_SMALL) == 1 and hdrs.count(NextHdr.REQ_MEDIUM) == 2
    assert hdrs.count(NextHdr.REQ_STD) == 25 + 4


@pytest.mark.parametrize("seed", range(8))
def test_uet_sends_exact_under_reordering_loss_duplicates_and_trimming(seed):
    fab = Fabric(seed, loss=0.05, trim=0.08, lasthop=0.03, dup=0.03, jitter=6e-6, size=1 << 20)
    check_sends(uet_sends(fab), fab)
    assert fab.a.ep.requester.counters.retransmitted > 0


def test_uet_rod_sends_complete_in_their_receives_order():
    fab = Fabric(3, cfg=UetConfig(mode="rod", rto_s=50e-6), jitter=6e-6, size=1 << 20)
    got = uet_sends(fab)
    check_sends(got, fab)
    assert [got[100 + i][0] for i in range(len(SENDS))] == [s[2] for s in SENDS]


def test_uet_no_receive_is_nacked_then_resent_after_the_rnr_delay():
    fab = Fabric(2, cfg=UetConfig(rto_s=50e-6, rnr_s=30e-6), size=1 << 20)
    fill(fab.a, 3)
    usend(fab.a, 1, 0, 10_000)
    fab.run(until=50e-6)                      # no receive posted yet
    r, t = fab.a.ep.requester.counters, fab.b.ep.target.counters
    assert r.nack_no_resource >= 3 and t.no_recv == r.nack_no_resource
    assert r.timeouts == 0                    # the RNR delay, not the RTO, paces it
    urecv(fab.b, 8, 500_000, 10_000)
    fab.run(until=1e-3)
    assert fab.b.buf[500_000:510_000] == fab.a.buf[:10_000]
    assert [(w.wr_id, w.status) for w in fab.b.cq.poll(5)] == [(8, WCStatus.SUCCESS)]


def test_uet_rnr_retries_run_out():
    fab = Fabric(2, cfg=UetConfig(rto_s=50e-6, rnr_s=10e-6, rnr_retries=2), size=1 << 20)
    fill(fab.a, 3)
    usend(fab.a, 1, 0, 100)
    usend(fab.a, 2, 100, 100)
    fab.run(until=1e-3)
    assert [(w.wr_id, w.status) for w in fab.a.cq.poll(5)] == [
        (1, WCStatus.RNR_RETRY_EXC_ERR), (2, WCStatus.WR_FLUSH_ERR)]
    assert fab.a.qp.state is QPState.ERROR


@pytest.mark.parametrize("length", [5000, 20_000])   # one packet (medium header) and several
def test_uet_send_longer_than_the_buffer_fails_both_sides(length):
    fab = Fabric(2, size=1 << 20)
    fill(fab.a, 3)
    urecv(fab.b, 8, 500_000, 4096)
    usend(fab.a, 1, 0, length)
    fab.run(until=1e-3)
    assert [(w.wr_id, w.status) for w in fab.b.cq.poll(5)] == [(8, WCStatus.LOC_LEN_ERR)]
    assert [(w.wr_id, w.status) for w in fab.a.cq.poll(5)] == [(1, WCStatus.REM_ACCESS_ERR)]
    assert not any(fab.b.buf[500_000:600_000])


def test_uet_one_packet_write_takes_the_medium_header():
    fab = Fabric(1, size=1 << 20)
    frames = []
    send_ = fab.send
    fab.send = lambda frm, frame, to: (frames.append(frame) if frm is fab.a else None,
                                       send_(frm, frame, to))
    fill(fab.a, 1)
    fab.a.qp.post_send(WR(1, WROpcode.WRITE, fab.a.mr.addr, 3000, fab.a.mr.lkey,
                          fab.b.mr.addr + 64, fab.b.mr.rkey))
    fab.run()
    (f,) = [parse(x) for x in frames]
    assert f.nh == NextHdr.REQ_MEDIUM and f.ses.buffer_offset == fab.b.mr.addr + 64
    assert fab.b.buf[64:3064] == fab.a.buf[:3000]



# --------------------------------------------------------------- the NIC, both transports
@pytest.mark.parametrize("transport", ["roce", "uet"])
def test_nic_send_into_a_posted_buffer(transport):
    size = 3 * 4096 + 99
    data = random.Random(6).randbytes(size)
    kw = {"transport": "uet", "trimmed_dscps": TRIM} if transport == "uet" else {}
    with connected(2 * size, data + bytes(size), **kw) as c:
        c.b.post_recv(c.qb.qpn, [{"wr_id": 4, "addr": c.mb["addr"] + size, "length": size,
                                  "lkey": c.mb["lkey"]}])
        c.a.post_send(c.qa.qpn, [{"wr_id": 1, "opcode": "send", "local_addr": c.ma["addr"],
                                  "length": size, "lkey": c.ma["lkey"], "imm": 77}])
        wc, _, sent = pump(c, 100.0)
        assert (wc.wr_id, wc.opcode, wc.status) == (1, WCOpcode.SEND, WCStatus.SUCCESS)
        assert bytes(c.sb.buf[size:2 * size]) == data and not any(c.sb.buf[:size])
        [rwc] = c.b.cqs[c.cb].poll(1)
        assert (rwc.wr_id, rwc.opcode, rwc.imm, rwc.byte_len) == (4, WCOpcode.RECV, 77, size)
        if transport == "roce":
            assert [Ether(f)[BTH].opcode for f in sent] == [
                Op.SEND_FIRST, Op.SEND_MIDDLE, Op.SEND_MIDDLE, Op.SEND_LAST_IMM]
        else:
            assert {parse(f).ses.opcode for f in sent} == {SesOpcode.SEND}


def test_nic_refuses_a_send_on_a_write_only_qp_and_a_bad_opcode():
    with connected(4096, bytes(4096), qa_kw={"write_only": True}) as c:
        w = {"wr_id": 1, "opcode": "send", "local_addr": c.ma["addr"], "length": 10,
             "lkey": c.ma["lkey"]}
        with pytest.raises(VerbsError, match="opcode: a SEND .* write-only"):
            c.a.post_send(c.qa.qpn, [w])
        with pytest.raises(VerbsError, match="opcode: write or send"):
            c.a.post_send(c.qa.qpn, [dict(w, opcode="read")])


def test_the_rnr_knobs_of_uet_are_validated_by_name():
    from traffic.nic.nicconfig import NicConfig
    base = dict(gpu="g", ifname="i", ip="10.0.0.1", mac="02:00:00:00:00:01",
                gateway_mac="02:00:00:00:00:02", control="/c", transport="uet")
    cfg = NicConfig(**base, uet={"rnr_s": "0.001", "rnr_retries": 3}).uet_config()
    assert (cfg.rnr_s, cfg.rnr_retries) == (0.001, 3)
    assert cfg.dilated(1000).rnr_s == pytest.approx(1.0)
    for knobs, word in (({"rnr_s": "soon"}, "rnr_s"), ({"rnr_s": 0}, "rnr_s"),
                        ({"rnr_retries": -1}, "rnr_retries")):
        with pytest.raises(ValueError, match=word):
            NicConfig(**base, uet=knobs)
