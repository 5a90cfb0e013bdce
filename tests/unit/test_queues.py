"""Egress queues and strict + DWRR scheduling (switch_agent.queues), book ch.11 Example 11-3."""

import random

import pytest

from emucore.qos.classify import ecn_bits
from emucore.qos.qosconfig import QosConfig
from emucore.qos.queuing import QueueConfig, Queuing
from emucore.qos.wred import Wred, WredVerdict
from switch_agent.forward import ipv4_checksum
from switch_agent.queues import PortQueues

FORWARD, MARK, DROP = WredVerdict.FORWARD, WredVerdict.MARK, WredVerdict.DROP
BOOK_BANDWIDTH = (50, 0, 0, 50, 0, 0, 0, 0)

SIZES = [64, 256, 1024, 1500, 4096, 9000]
FRAMES = {n: bytes(n) for n in SIZES}  # shared objects: no memory per queued frame


def ip_frame(size, tos=0x62):
    """Ethernet + IPv4 (valid checksum) padded to `size` bytes."""
    hdr = bytearray(b"\x45" + bytes([tos]) + (size - 14).to_bytes(2, "big") + bytes(4)
                    + b"\x40\x11\0\0" + bytes([10, 0, 1, 1, 10, 0, 1, 3]))
    hdr[10:12] = ipv4_checksum(bytes(hdr)).to_bytes(2, "big")
    return bytes(12) + b"\x08\x00" + bytes(hdr) + bytes(size - 34)


def fill(pq, q, n, rng, sizes=SIZES):
    for _ in range(n):
        assert pq.enqueue(q, FRAMES[rng.choice(sizes)]) == FORWARD


def shares(pq, n):
    served = {}
    for _ in range(n):
        q, frame, _ingress, _t, _prio = pq.dequeue(0)
        served[q] = served.get(q, 0) + len(frame)
    total = sum(served.values())
    return {q: b / total for q, b in served.items()}


def queuing(bw=BOOK_BANDWIDTH, strict=(7,), limit=10**9, wred3=None):
    """8 queues: `strict` ones strict, the others weighted by `bw`; WRED on queue 3 only."""
    return Queuing("T", tuple(QueueConfig(strict=q in strict,
                                          bandwidth_percent=0 if q in strict else bw[q],
                                          wred=wred3 if q == 3 else None, limit_bytes=limit)
                              for q in range(8)))


def no_wred(bw=BOOK_BANDWIDTH, strict=(7,)):
    return queuing(bw, strict)


def test_strict_priority_always_first():
    pq = PortQueues(no_wred())
    rng = random.Random(1)
    fill(pq, 0, 50, rng)
    fill(pq, 3, 50, rng)
    for i in range(20):
        pq.enqueue(7, FRAMES[64], ingress=i)
        q, _f, tag, _t, _prio = pq.dequeue()
        assert (q, tag) == (7, i)
    assert pq.dequeue()[0] in (0, 3)


@pytest.mark.parametrize("bw, sizes", [
    ((50, 0, 0, 50, 0, 0, 0, 0), {0: [64, 256, 1500], 3: [4096, 9000]}),  # the book
    ((20, 0, 0, 50, 0, 30, 0, 0), {0: SIZES, 3: [9000], 5: [64, 1024]}),
    ((10, 0, 0, 90, 0, 0, 0, 0), {0: SIZES, 3: SIZES}),
])
def test_dwrr_byte_shares(bw, sizes):
    pq = PortQueues(no_wred(bw))
    rng = random.Random(2)
    for q, sz in sizes.items():
        fill(pq, q, 10_000, rng, sz)  # every queue stays backlogged
    got = shares(pq, 10_000)
    total = sum(bw[q] for q in sizes)
    for q in sizes:
        assert got[q] == pytest.approx(bw[q] / total, abs=0.02), (q, got)


def test_work_conserving_idle_share_goes_to_others():
    pq = PortQueues(no_wred((20, 0, 0, 50, 0, 30, 0, 0)))
    rng = random.Random(3)
    fill(pq, 0, 3000, rng)
    fill(pq, 5, 3000, rng)  # q3 (50 %) idle: q0 and q5 split 20:30
    got = shares(pq, 3000)
    assert got[0] == pytest.approx(0.4, abs=0.02) and got[5] == pytest.approx(0.6, abs=0.02)


def test_zero_percent_queue_only_when_weighted_queues_idle():
    pq = PortQueues(no_wred())  # book: q1 has 0 %
    pq.enqueue(1, FRAMES[64], ingress="low")
    for i in range(5):
        pq.enqueue(0, FRAMES[1500], ingress=i)
    assert [pq.dequeue()[2] for _ in range(6)] == [0, 1, 2, 3, 4, "low"]
    assert pq.dequeue() is None


def test_paused_queue_is_skipped_and_resumes_in_order():
    pq = PortQueues(no_wred())
    for i in range(10):
        pq.enqueue(3, FRAMES[1500], ingress=("q3", i))
    for i in range(4):
        pq.enqueue(0, FRAMES[1500], ingress=("q0", i))
    paused = 1 << 3
    out = [pq.dequeue(paused) for _ in range(4)]
    assert [t for _q, _f, t, _at, _prio in out] == [("q0", i) for i in range(4)]
    assert pq.dequeue(paused) is None  # only paused frames left
    assert pq.packets == 10
    assert [pq.dequeue(0)[2] for _ in range(10)] == [("q3", i) for i in range(10)]


def test_pause_does_not_bank_credit():
    pq = PortQueues(no_wred())
    rng = random.Random(4)
    fill(pq, 0, 4000, rng, [1500])
    fill(pq, 3, 4000, rng, [1500])
    for _ in range(500):
        assert pq.dequeue(1 << 3)[0] == 0
    got = shares(pq, 2000)  # after resume: back to 50/50, no catch-up burst
    assert got[3] == pytest.approx(0.5, abs=0.02)


def test_strict_queue_can_be_paused_too():
    pq = PortQueues(no_wred())
    pq.enqueue(7, FRAMES[64], ingress="cnp")
    pq.enqueue(0, FRAMES[64], ingress="data")
    assert pq.dequeue(1 << 7)[2] == "data"
    assert pq.dequeue(1 << 7) is None
    assert pq.dequeue(0)[2] == "cnp"


def test_wred_marks_and_drops_on_queue_3():
    cfg = queuing(limit=40_000, wred3=Wred(10_000, 20_000, 50.0, 0, True))
    pq = PortQueues(cfg, rng=lambda: 0.99)  # dice never mark in the linear region
    f_ect = ip_frame(1000, 0x62)
    verdicts = [pq.enqueue(3, f_ect, tos=0x62) for _ in range(45)]
    assert verdicts[:20] == [FORWARD] * 20  # depth < 20 000 with rand 0.99 > p
    assert verdicts[20:40] == [MARK] * 20  # at/above max: every ECT packet
    assert verdicts[40:] == [DROP] * 5  # the buffer limit
    c = pq.counters()[3]
    assert c["ecn_marked"] == 20 and c["drops"] == {"queue_full": 5}
    assert c["depth_bytes"] == 40_000 == c["max_depth_bytes"]
    frames = [pq.dequeue()[1] for _ in range(40)]
    assert all(ecn_bits(f[15]) == 0b10 for f in frames[:20])
    for f in frames[20:]:
        assert ecn_bits(f[15]) == 0b11
        assert ipv4_checksum(f[14:34]) == 0  # still a valid header


def test_wred_drops_not_ect_where_ect_is_marked():
    cfg = queuing(limit=40_000, wred3=Wred(10_000, 20_000, 50.0, 0, True))
    pq = PortQueues(cfg, rng=lambda: 0.99)
    f_ect, f_not = ip_frame(1000, 0x62), ip_frame(1000, 0x60)
    for _ in range(25):
        pq.enqueue(3, f_ect, tos=0x62)
    assert pq.enqueue(3, f_not, tos=0x60) == DROP
    assert pq.enqueue(3, f_ect, tos=0x62) == MARK
    assert pq.counters()[3]["drops"] == {"wred": 1}


def test_wred_random_region_uses_rng():
    cfg = queuing(limit=1_000_000, wred3=Wred(0, 1_000_000, 100.0, 0, True))
    pq = PortQueues(cfg, rng=random.Random(5).random)
    f = ip_frame(1000)
    for _ in range(1000):  # depth goes 0 .. 1 MB: p rises 0 .. 1, mean ~ 0.5
        pq.enqueue(3, f, tos=0x62)
    # the same dice by hand: the i-th frame sees depth 1000 i, p = 1000 i / 1 MB
    dice = random.Random(5)
    want = sum(dice.random() < 1000 * i / 1_000_000 for i in range(1000))
    assert pq.counters()[3]["ecn_marked"] == want == pytest.approx(500, abs=60)


def test_a_wred_queue_holds_at_least_its_wred_max():
    pq = PortQueues(queuing(limit=5_000, wred3=Wred(1_000, 8_000, 0.0, 0, True)))
    assert pq.limit[3] == 8_000 and pq.limit[0] == 5_000
    assert [pq.enqueue(3, FRAMES[1500], tos=0x62) for _ in range(6)] == [FORWARD] * 5 + [DROP]
    assert pq.qbytes[3] == 7_500


def test_tail_drop_without_wred():
    pq = PortQueues(Queuing.plain(3000))
    assert [pq.enqueue(0, FRAMES[1500]) for _ in range(3)] == [FORWARD, FORWARD, DROP]
    assert pq.counters()[0]["drops"] == {"queue_full": 1}


def test_flush_returns_entries_and_keeps_scheduler_sane():
    pq = PortQueues(no_wred())
    for i in range(5):
        pq.enqueue(3, FRAMES[1500], ingress=i)
    pq.enqueue(0, FRAMES[64], ingress="a")
    pq.dequeue()  # q3 or q0 now mid-turn
    flushed = pq.flush(3, "pfc_watchdog")
    assert pq.backlog_mask() in (1 << 0, 0)
    assert pq.qbytes[3] == 0 and pq.counters()[3]["drops"]["pfc_watchdog"] == len(flushed)
    pq.enqueue(3, FRAMES[64], ingress="new")
    tags = []
    while (item := pq.dequeue()) is not None:
        tags.append(item[2])
    assert "new" in tags and pq.packets == 0 and pq.bytes == 0
    assert pq.flush(3, "x") == []


@pytest.mark.parametrize("make, field", [
    (lambda: Queuing("X", (QueueConfig(),)), "queues: need exactly 8"),
    (lambda: queuing(bw=(60, 0, 0, 50, 0, 0, 0, 0)), "bandwidth_percent: non-strict queues sum"),
    (lambda: QueueConfig(bandwidth_percent=101), "bandwidth_percent"),
    (lambda: QueueConfig(limit_bytes=0), "limit_bytes"),
    (lambda: QueueConfig(strict=1), "strict"),
    (lambda: PortQueues(mtu=10), "mtu"),
])
def test_validation_names_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


def test_runs_on_the_book_queuing():
    pq = PortQueues(QosConfig().queuing)
    assert pq.strict == (7,)
    assert [w is None for w in pq.wred] == [q != 3 for q in range(8)]
    assert pq.wred[3] == Wred.book() and pq.limit[3] == 24_000_000
    assert pq.weighted.quantum == [9216, 0, 0, 9216, 0, 0, 0, 0]
    assert pq.scavenger.quantum == [0, 9216, 9216, 0, 9216, 9216, 9216, 0]


def test_several_strict_queues_highest_first():
    pq = PortQueues(queuing(strict=(6, 7)))
    assert pq.strict == (7, 6)
    pq.enqueue(6, FRAMES[64], ingress="six")
    pq.enqueue(7, FRAMES[64], ingress="seven")
    assert [pq.dequeue()[2] for _ in range(2)] == ["seven", "six"]
