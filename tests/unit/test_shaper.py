"""Token-bucket shaping (switch_agent.shaper) with a simulated clock."""

import math

import pytest

from switch_agent.shaper import Shaper


@pytest.mark.parametrize("rate, size", [(200e6, 9000), (400e6, 1500), (1e6, 64)])
def test_backlogged_rate_is_exact(rate, size):
    sh = Shaper(rate, mtu=9216)
    now, step = 0.0, 0.001  # the agent's poll granularity
    departures = []
    while now < 3.0:
        while sh.can_send(now):
            departures.append(sh.depart(size, now))
        now += step
    # frames reach the wire at their departure times: count those in [1 s, 2 s)
    n = sum(1 for t in departures if 1.0 <= t < 2.0)
    assert n * size * 8 == pytest.approx(rate, rel=0.01)
    assert all(b > a for a, b in zip(departures, departures[1:]))


def test_idle_link_does_not_bank_credit():
    sh = Shaper(8e6, burst_s=0.001, mtu=1000)  # 1 MB/s; burst floor = 2 frames
    sh.depart(1000, 0.0)
    # after 10 s idle, only about a burst's worth goes at once
    n = 0
    while sh.can_send(10.0):
        sh.depart(1000, 10.0)
        n += 1
    assert 2 <= n <= 3  # burst floor: two frames (+1 in flight)


def test_departure_time_is_serialisation():
    sh = Shaper(8e6, burst_s=0.0, mtu=1)  # 1 byte/us
    assert sh.depart(1000, 5.0) == pytest.approx(5.0 + 1e-3)
    assert sh.depart(1000, 5.0) == pytest.approx(5.0 + 2e-3)  # queued behind the first


def test_unshaped():
    sh = Shaper(math.inf)
    for _ in range(1000):
        assert sh.can_send(0.0)
        sh.depart(9000, 0.0)


def test_bad_rate():
    with pytest.raises(ValueError, match="rate_bps"):
        Shaper(0)
