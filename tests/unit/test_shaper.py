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


#: 1 byte/us with a 2 ms catch-up window (burst_s)
def slow() -> Shaper:
    return Shaper(8e6, burst_s=0.002, mtu=1)


@pytest.mark.parametrize("free, eligible, now, start, model", [
    # on time (the wire busy until after now): from free_at
    (5.0, 0.0, 4.0, 5.0, 5.0),
    # idle wire, the frame eligible from now: from now
    (1.0, 4.0, 4.0, 4.0, 4.0),
    # eligible not yet passed (a pause's expiry ahead): from now, as before
    (1.0, 4.5, 4.0, 4.0, 4.0),
    # woken 1 ms late after the frame became eligible at 3 s: caught up from 3 s
    (1.0, 3.0, 3.001, 3.0, 3.0),
    # woken late with free_at after the eligibility: caught up from free_at
    (3.0, 2.0, 3.0015, 3.0, 3.0),
    # exactly the window (2 ms) late: still caught up
    (1.0, 3.0, 3.002, 3.0, 3.0),
    # more than the window late: from now; the model start stays the ideal one
    (1.0, 3.0, 3.003, 3.003, 3.0),
    (3.0, 2.0, 3.5, 3.5, 3.0),
])
def test_book_late_within_the_window_starts_at_the_ideal_start(free, eligible, now, start,
                                                                  model):
    sh = slow()
    sh.free_at = free
    assert sh.book(1000, now, eligible) == (start, model)
    assert sh.free_at == start + 1000 / sh.rate_Bps
    # only a booking from now loses wire time: from the model start to now
    assert sh.lost_s == pytest.approx(start - model)


def test_lost_service_adds_up_over_late_bookings():
    """Two bookings 3 ms and 4 ms behind free_at (past the 2 ms window) lose 7 ms of
    wire time; one within the window loses none."""
    sh = slow()
    sh.free_at = 1.0
    sh.book(1000, 1.003, 0.0)                         # free_at 1.004
    sh.book(1000, 1.008, 0.0)                         # free_at 1.009
    sh.book(1000, 1.0105, 0.0)                        # 1.5 ms behind: caught up
    assert sh.lost_s == pytest.approx(0.007)


def test_caught_up_frames_go_back_to_back_from_the_ideal_start():
    """Woken 1.5 ms after the frame became eligible (within the 2 ms window): frame k
    (1000 B, 1 ms each) ends at 3 s + k ms; the first is already due (it leaves at the
    next flush), the rest follow on their slots."""
    sh = slow()
    now = 3.0015
    ends = []
    while sh.can_send(now):
        ends.append(sh.depart(1000, now, 3.0))
    assert ends == pytest.approx([3.0 + k * 1e-3 for k in range(1, len(ends) + 1)], rel=1e-12)
    assert ends[0] < now < ends[1]
    assert len(ends) == 4  # booked up to burst_s (2 ms) past now: ends 3.001 .. 3.004


def test_beyond_the_window_books_back_to_back_from_now():
    sh = slow()
    now = 3.0025  # 2.5 ms after eligibility: beyond the 2 ms window
    ends = [sh.depart(1000, now, 3.0) for _ in range(3)]
    assert ends == pytest.approx([now + k * 1e-3 for k in range(1, 4)], rel=1e-12)


def test_a_lone_late_frame_does_not_pull_the_next_booking_back():
    """A frame booked late from its ideal start leaves free_at where a punctual loop
    would: the next frame, eligible only later, starts at its own eligibility."""
    sh = slow()
    assert sh.book(1000, 3.0015, 3.0) == (3.0, 3.0)  # free_at 3.001
    assert sh.book(1000, 4.0005, 4.0) == (4.0, 4.0)
    assert sh.free_at == pytest.approx(4.001, rel=1e-12)
