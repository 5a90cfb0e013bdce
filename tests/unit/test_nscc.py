"""NSCC (traffic/uet/nscc.py) against uet-htsim's rules, window values computed by hand.

Set-up of every test unless said: 100 Gbps, MTU 4096, base RTT 12 us, trimming, so
BDP = 12 us x 100 Gbps / 8 = 150000 B = the reference BDP: a = 1, max_wnd = 225000,
target t = 0.75 x 12 = 9 us, b = t / 12 us = 0.75, alpha = 4 x 4096 x a x b / t
= 12288 / 9 us, fi = 5 x 4096 = 20480, eta = 0.15 x 4096 = 614.4, fast = 0.25 x a,
increases applied past 8 MTU = 32768 B acknowledged or a base RTT. The window starts at
the BDP, 150000. ACKs at 5 us (less than a base RTT after the last adjustment at 0).
"""

import pytest

from traffic.uet.nscc import Nscc, NsccConfig

BASE = 12e-6
NOW = 5e-6
MTU = 4096
NINE = 9 * MTU   # 36864 B: past the 8-MTU adjustment threshold


def nscc(link=100e9, **kw):
    return Nscc(link, MTU, NsccConfig(base_rtt_s=BASE, trimming=True, **kw))


def ack(n, delay_us, ecn, acked=NINE, now=NOW, inflight=None):
    return n.on_ack(now, acked, BASE + delay_us * 1e-6, ecn, inflight)


def exact(x):
    return pytest.approx(x, rel=1e-12, abs=1e-9)


def test_constants():
    n = nscc()
    assert (n.bdp, n.max_wnd, n.target) == (150000, 225000, exact(9e-6))
    assert n.alpha == exact(12288 / 9e-6) and n.fi == 20480 and n.eta == exact(614.4)
    assert n.fast == 0.25 and n.adjust_bytes == 32768
    assert nscc(link=400e9).fast == 1.0          # 0.25 x a, a = 600000 / 150000 = 4


@pytest.mark.parametrize("ecn, delay_us, avg_us, action, cwnd", [
    # no ECN, delay 3 < t 9: proportional; 9 MTU acked > 8 MTU so the increase applies:
    # cwnd + alpha x 36864 x (9 - 3) us / cwnd = 150000 + 12288 x 36864 x 2/3 / 150000
    (False, 3.0, 0.0, "proportional", 150000 + 301989888 / 150000),        # 152013.26592
    # no ECN, delay 12 >= t: fair: 150000 + fi x 36864 / 150000 = 150000 + 754974720 / 150000
    (False, 12.0, 0.0, "fair", 150000 + 754974720 / 150000),               # 155033.1648
    # ECN, delay 12 >= t, average 15 us -> 15 + 0.0125 x (12 - 15) = 14.9625 us > t:
    # cwnd x max(1 - 0.8 x (14.9625 - 9) / 14.9625, 0.5) = 150000 x (1 - 4.77 / 14.9625)
    (True, 12.0, 15.0, "decrease", 150000 * (1 - 4.77 / 14.9625)),         # 102180.4511
    # ECN, delay 3 < t: only the path changes
    (True, 3.0, 15.0, "path_change", 150000),
])
def test_four_cases_change_the_window_exactly(ecn, delay_us, avg_us, action, cwnd):
    n = nscc()
    n.avg_delay = avg_us * 1e-6
    assert ack(n, delay_us, ecn) == action
    assert n.cwnd == exact(cwnd)


def test_b_is_target_over_12us_or_configured():
    # b = 0.75 (above): 152013.26592; b = 1: alpha = 16384 / 9 us,
    # 150000 + 16384 x 36864 x 2/3 / 150000 = 150000 + 402653184 / 150000
    n = nscc(b=1.0)
    ack(n, 3.0, False)
    assert n.cwnd == exact(150000 + 402653184 / 150000)   # 152684.35456


@pytest.mark.parametrize("kw, cwnd", [
    ({}, 150000 + 4096 * 0.25),                      # 0.25 x a x acked: 151024
    ({"fast_scale": 0.5}, 150000 + 4096 * 0.5),      # emu's former 0.5 x acked: 152048
])
def test_fast_increase_is_a_quarter_a_per_acked_byte(kw, cwnd):
    n = nscc(**kw)
    n.increasing = True                              # the delay stayed under 1 us a window
    assert ack(n, 0.5, False, acked=MTU) == "fast"
    assert n.cwnd == exact(cwnd)


def test_fast_increase_starts_after_a_window_under_1us():
    n = nscc()
    assert ack(n, 0.5, False, acked=MTU) == "proportional"   # fi_count 4096 < 150000
    n.fi_count = 150000
    assert ack(n, 0.5, False, acked=MTU) == "fast"           # fi_count 154096 > cwnd
    assert n.cwnd == exact(150000 + 1024)


@pytest.mark.parametrize("md_delay, avg_us, cwnd", [
    # average 15 -> 15 + 0.0125 x (20 - 15) = 15.0625 us: 150000 x (1 - 0.8 x 6.0625 / 15.0625)
    ("avg", 15.0, 150000 * (1 - 4.85 / 15.0625)),   # 101701.2448
    # average 0 -> 0.25 us < t: no decrease on the average, though the sample is 20 us
    ("avg", 0.0, 150000),
    # emu's former rule, max(average, sample) = 20 us: 150000 x (1 - 0.8 x 11 / 20) = 84000
    ("max", 0.0, 84000),
])
def test_decrease_on_the_average_delay(md_delay, avg_us, cwnd):
    n = nscc(md_delay=md_delay)
    n.avg_delay = avg_us * 1e-6
    assert ack(n, 20.0, True, acked=MTU) == "decrease"
    assert n.cwnd == exact(cwnd)


def test_decrease_at_most_once_per_base_rtt():
    n = nscc()
    n.last_adjust = 1.0                              # no increase (nor eta) applied here
    n.avg_delay = 15e-6
    ack(n, 12.0, True, acked=MTU)                    # 150000 x (1 - 4.77 / 14.9625)
    first = 150000 * (1 - 4.77 / 14.9625)
    assert n.cwnd == exact(first)
    ack(n, 12.0, True, acked=MTU, now=NOW + 10e-6)   # 10 us later: no second decrease
    assert n.cwnd == exact(first)
    avg = n.avg_delay                                # 14.9625 -> 14.925390625 us
    assert avg == exact(14.9625e-6 + 0.0125 * (12e-6 - 14.9625e-6))
    avg += 0.0125 * (12e-6 - avg)                    # the third sample
    ack(n, 12.0, True, acked=MTU, now=NOW + 13e-6)   # 13 us > base RTT: decreases again
    assert n.cwnd == exact(first * (1 - 0.8 * (avg - 9e-6) / avg))


@pytest.mark.parametrize("gate, achieved, action, cwnd", [
    (3, 16384, "quick_adapt", 16384),       # 16384 < max_wnd / 8 = 28125: window := achieved
    (3, 32768, "fair", 150000),             # 32768 >= 28125: no QuickAdapt; fair, not applied
    (0, 32768, "quick_adapt", 32768),       # gate 0: below max_wnd 225000 is enough
])
def test_quick_adapt_only_below_an_eighth_of_max_wnd(gate, achieved, action, cwnd):
    n = nscc(qa_gate=gate)
    n.qa_end = 0.0                          # a QuickAdapt window has just ended
    # delay 40 us > 4 t = 36 us triggers it (32768 B acked is not past 8 MTU)
    assert ack(n, 40.0, False, acked=achieved) == action
    assert n.cwnd == exact(cwnd)
    assert n.qa_end == exact(NOW + BASE + 9e-6)   # the next window: base RTT + t


@pytest.mark.parametrize("ignore, cwnd", [
    (True, 16384),                                   # marked ACKs for 20000 B ignored
    (False, 16384 * (1 - 4.85 / 15.0625)),          # decrease as usual: 11108.4879
])
def test_quick_adapt_ignores_the_marks_of_what_was_in_flight(ignore, cwnd):
    n = nscc(qa_ignore=ignore)
    n.qa_end = 0.0
    assert ack(n, 40.0, False, acked=16384, inflight=20000) == "quick_adapt"
    n.avg_delay = 15e-6
    got = ack(n, 20.0, True, acked=MTU, now=NOW + 1e-6)   # 4096 of 20000 ignored
    assert got == ("ignored" if ignore else "decrease") and n.cwnd == exact(cwnd)


def test_the_ignore_window_ends_with_the_bytes_then_in_flight():
    n = nscc()
    n.qa_end = 0.0
    ack(n, 40.0, False, acked=16384, inflight=12000)
    assert [ack(n, 3.0, True, acked=MTU, now=NOW + i * 1e-7) for i in (1, 2, 3)] == [
        "ignored", "ignored", "path_change"]        # 4096, 8192 < 12000; 12288 is not
    assert n.counters["ignored"] == 2
    assert n.on_nack(NOW + 5e-7, MTU) == "nack" and n.cwnd == exact(16384 - MTU)


@pytest.mark.parametrize("mtus, acks, cwnd", [
    # 8 MTU (32768, not more than 8 MTU): nothing applied yet
    (8, [32768], 150000),
    # then 4096 more: 36864 > 32768: 150000 + 12288 x 36864 x 2/3 / 150000
    (8, [32768, 4096], 150000 + 301989888 / 150000),
    # emu's former rule, once per window: 36864 < 150000, nothing applied
    (0, [32768, 4096], 150000),
])
def test_increases_apply_every_8_mtu(mtus, acks, cwnd):
    n = nscc(adjust_mtus=mtus)
    for a in acks:
        assert ack(n, 3.0, False, acked=a) == "proportional"
    assert n.cwnd == exact(cwnd)


def test_a_base_rtt_applies_the_increase_and_eta():
    n = nscc()
    ack(n, 3.0, False, acked=MTU, now=13e-6)  # 13 us since the last adjustment (0) > 12 us
    # 150000 + 12288 x 4096 x 2/3 / 150000 + eta = 150000 + 33554432 / 150000 + 614.4
    assert n.cwnd == exact(150000 + 33554432 / 150000 + 614.4)
    assert n.last_adjust == 13e-6


def test_delay_average():
    n = nscc()
    ack(n, 12.0, False, acked=MTU)   # unmarked, over t: enters as base RTT / 4 = 3 us
    assert n.avg_delay == exact(0.0125 * 3e-6)
    m = nscc()
    ack(m, 12.0, True, acked=MTU)    # marked: the sample itself
    assert m.avg_delay == exact(0.0125 * 12e-6)


def test_nack_takes_its_bytes_and_samples_a_base_rtt():
    n = nscc()
    assert n.on_nack(NOW, MTU) == "nack"
    assert n.cwnd == 150000 - 4096 and n.avg_delay == exact(0.0125 * 12e-6)
    assert n.qa_trigger                              # armed for the next window's end
    m = nscc()
    m.qa_end = 0.0                                   # a window ended, nothing achieved
    assert m.on_nack(NOW, MTU) == "quick_adapt" and m.cwnd == MTU   # max(0, one MTU)


def test_a_timeout_takes_its_bytes_and_nothing_else():
    """uet-htsim `mark_packet_for_retransmission`: cwnd = max(cwnd - size, mtu); no delay
    sample, QuickAdapt not armed."""
    n = nscc()
    n.on_timeout(MTU)
    assert n.cwnd == 150000 - 4096 and n.avg_delay == 0.0 and not n.qa_trigger
    assert n.counters["timeouts"] == 1
    n.cwnd = 6000.0
    n.on_timeout(MTU)
    assert n.cwnd == MTU                             # max(6000 - 4096 = 1904, one MTU)


@pytest.mark.parametrize("field, value", [("b", 0.0), ("fast_scale", -1.0), ("md_delay", "min"),
                                          ("qa_gate", -1), ("adjust_mtus", 1.5),
                                          ("ref_rtt_s", 0.0)])
def test_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        NsccConfig(**{field: value})
