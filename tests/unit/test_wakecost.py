"""emu.bench.wakecost (issue 30): the table's arithmetic per wake-up, the configurations
it alternates, and that every wait primitive sleeps until its deadline - never wakes
before it (the kernel's hrtimers end no earlier than asked; the timeouts are rounded up).
No timing assertion on the costs."""

import time

import pytest

from emu.bench import wakecost as wc


def test_percentile_is_nearest_rank():
    xs = list(range(1, 101))
    assert wc.percentile(xs, 99) == 99
    assert wc.percentile(xs, 100) == 100
    assert wc.percentile([5.0], 99) == 5.0
    assert wc.percentile([], 99) == 0.0


def test_per_wake_divides_the_sums_and_subtracts_the_zero_sleep_call():
    s = wc.Sample(n=4, cpu_s=400e-6, utime_s=300e-6, stime_s=100e-6, nvcsw=4, nivcsw=1,
                  work_s=80e-6, work2_s=40e-6, late_s=[1e-6, 2e-6, 3e-6, 10e-6])
    zero = wc.Sample(n=10, cpu_s=300e-6)
    r = wc.per_wake(s, zero)
    assert r["wakes"] == 4
    assert r["cpu_us"] == pytest.approx(100.0)
    assert r["over0_us"] == pytest.approx(100.0 - 30.0)
    assert (r["user_us"], r["sys_us"]) == (pytest.approx(75.0), pytest.approx(25.0))
    assert (r["vcsw"], r["ivcsw"]) == (1.0, 0.25)
    assert (r["work_us"], r["work2_us"]) == (pytest.approx(20.0), pytest.approx(10.0))
    assert r["late_mean_us"] == pytest.approx(4.0)
    assert r["late_p99_us"] == pytest.approx(10.0)
    assert wc.per_wake(s, None)["over0_us"] is None


def test_samples_add_up_over_rounds():
    a = wc.Sample(n=2, cpu_s=1.0, late_s=[1.0])
    a.add(wc.Sample(n=3, cpu_s=2.0, nvcsw=3, late_s=[2.0]))
    assert (a.n, a.cpu_s, a.nvcsw, a.late_s) == (5, 3.0, 3, [1.0, 2.0])


def test_configs_give_every_kind_a_zero_sleep_and_slacks_only_where_they_apply():
    cfgs = wc.configs(["select", "timerfd"], [300.0, 50.0], [1000, 1])
    assert cfgs == [("select", us, ns) for ns in (1000, 1) for us in (0.0, 50.0, 300.0)] + \
        [("timerfd", us, 1000) for us in (0.0, 50.0, 300.0)]
    res = {c: wc.Sample(n=1, cpu_s=1e-6) for c in cfgs}
    rows = wc.rows(res)
    assert [r[3]["over0_us"] for r in rows[:3]] == [None, 0.0, 0.0]


def test_count_for_fills_the_chunk_and_has_a_floor():
    assert wc.count_for(1000.0, 0.1) == 100
    assert wc.count_for(0.0, 0.1) == wc.count_for(20.0, 0.1) == 5000
    assert wc.count_for(1e6, 0.1) == 20


def test_timespec_rounds_up_and_never_goes_negative():
    assert wc.timespec(1.5) == (1, 500_000_000)
    assert wc.timespec(1e-9 / 3) == (0, 1)
    assert wc.timespec(-1.0) == (0, 0)


def test_unknown_primitive_is_refused():
    with pytest.raises(ValueError, match="unknown wait primitive"):
        wc.Waiter("spin")


@pytest.mark.parametrize("kind", wc.PRIMITIVES)
def test_each_primitive_sleeps_until_its_deadline(kind):
    w = wc.Waiter(kind)
    try:
        for dt in (0.0, 200e-6, 1.5e-3):
            deadline = time.monotonic() + dt
            w.wait(deadline)
            assert time.monotonic() >= deadline
    finally:
        w.close()


def test_a_chunk_counts_its_wake_ups():
    s = wc.chunk("select", 100e-6, 1000, 5)
    assert s.n == 5 and len(s.late_s) == 5 and s.cpu_s > 0
    assert all(x >= 0 for x in s.late_s)
