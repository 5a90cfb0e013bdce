"""The fidelity guard's pure part: lag accounting, percentiles, merging, the verdict and
the suggested TDF (emucore/fidelity.py)."""

import math

import pytest

from emucore.fidelity import (BUCKET_EDGES, HIST_LEN, LagMeter, lag_bound_model_s, merge, nice_up, percentile, suggest_tdf, verdict)
from emucore.rawsock import TIMER_SLACK_NS, tighten_timer_slack
from emucore.timedil import TimeDilation

TD = TimeDilation(5000)


def test_the_bound_is_one_mtu_at_the_model_rate():
    assert lag_bound_model_s(9216, 200e9) == pytest.approx(0.36864e-6)
    assert lag_bound_model_s(4096, 400e9) == pytest.approx(81.92e-9)
    with pytest.raises(ValueError):
        lag_bound_model_s(0, 200e9)


def test_lag_is_model_time():
    m = LagMeter(TD)
    assert m.record(10.0, 10.005, "eth1 tx") == pytest.approx(1e-6)  # 5 ms lab = 1 us model
    assert m.record(10.0, 9.0) == 0.0  # early counts as on time
    s = m.snapshot()
    assert s["count"] == 2 and s["max_lag_model_s"] == pytest.approx(1e-6)
    assert s["worst"] == "eth1 tx" and sum(s["hist"]) == 2 and s["hist"][0] == 1
    assert len(s["hist"]) == HIST_LEN


def test_reset_starts_a_new_window():
    m = LagMeter(TD)
    m.record(0.0, 1.0, "eth1 tx")
    m.reset()
    assert m.snapshot() == LagMeter(TD).snapshot()
    assert m.record(0.0, 0.005) == pytest.approx(1e-6) and m.snapshot()["count"] == 1


def test_timer_slack_is_tightened():
    if not tighten_timer_slack():
        pytest.skip("prctl(PR_SET_TIMERSLACK) not available here")
    with open("/proc/self/timerslack_ns") as f:  # the main thread's, which runs pytest
        assert int(f.read()) == TIMER_SLACK_NS


class StallingClock:
    """Lab time that advances `step` per action and stalls `stall` once at action `at`."""

    def __init__(self, step, stall=0.0, at=-1):
        self.t, self.step, self.stall, self.at, self.n = 0.0, step, stall, at, 0

    def action(self):
        due = self.n * self.step
        self.n += 1
        self.t = max(self.t, due) + (self.stall if self.n - 1 == self.at else 0.0)
        return due, self.t


@pytest.mark.parametrize("stall_at, stall, n, kept_up", [
    (-1, 0.0, 1000, True),       # never late
    (500, 0.5, 1000, True),      # one 0.5 s stall (100 us model): 1 action in 1000 late
    (0, 1000.0, 1000, False),    # a stall longer than the run: every action late
])
def test_a_clock_that_stalls(stall_at, stall, n, kept_up):
    clock = StallingClock(step=1.0, stall=stall, at=stall_at)  # 1 action per lab second
    m = LagMeter(TD)
    for _ in range(n):
        due, done = clock.action()
        m.record(due, done, "timer")
    v = verdict({"rail1": m.snapshot()}, lag_bound_model_s(9216, 200e9))
    assert v.kept_up is kept_up
    assert v.actions == n
    if stall:
        assert v.max_lag_model_s == pytest.approx(TD.model_time(stall))
        assert v.worst == "rail1 (timer)"


def test_percentile_edges():
    hist = [0] * HIST_LEN
    assert percentile(hist, 0.99) == 0.0
    hist[0] = 99
    hist[1 + 10] = 1  # one lag in bucket 10
    assert percentile(hist, 0.99) == 0.0  # 99 of 100 on time
    assert percentile(hist, 1.0) == BUCKET_EDGES[10]
    hist[-1] = 5  # beyond the top edge
    assert percentile(hist, 1.0) == math.inf


def test_merge_is_exact():
    a, b = LagMeter(TD), LagMeter(TD)
    for i in range(100):
        a.record(0.0, i * 1e-3)
        b.record(0.0, i * 2e-3, "pacer")
    both = LagMeter(TD)
    for i in range(100):
        both.record(0.0, i * 1e-3)
        both.record(0.0, i * 2e-3, "pacer")
    m = merge([a.snapshot(), b.snapshot()])
    assert m["hist"] == both.snapshot()["hist"] and m["count"] == 200
    assert m["p99_lag_model_s"] == both.snapshot()["p99_lag_model_s"]
    assert m["max_lag_model_s"] == b.snapshot()["max_lag_model_s"] and m["worst"] == "pacer"


def test_verdict_names_the_worst_process():
    late, fine = LagMeter(TD), LagMeter(TD)
    for _ in range(10):
        late.record(0.0, 0.1, "eth3 shaper")  # 20 us model late
        fine.record(0.0, 0.0)
    v = verdict({"rail1": fine.snapshot(), "nic-h1g1": late.snapshot()}, 0.37e-6)
    assert not v.kept_up and v.worst == "nic-h1g1 (eth3 shaper)"
    d = v.to_dict()
    assert d["kept_up"] is False and d["max_lag_model_us"] == pytest.approx(20.0)
    assert set(d) == {"kept_up", "p99_lag_model_us", "max_lag_model_us", "bound_model_us",
                      "worst", "actions"}


@pytest.mark.parametrize("tdf, used, cores, want", [
    (2000, 2.0, 2, 5000),    # saturated: 2 / 1.4 = 1.43x, but at least 2x = 4000 -> 5000
    (2000, 1.0, 2, 5000),    # under the target load and lost anyway: 2x -> 5000
    (5000, 4.0, 2, 15000),   # 4 / 1.4 = 2.86x = 14286 -> 15000
    (300, 2.0, 2, 700),      # 2x = 600 -> 700
])
def test_suggest_tdf(tdf, used, cores, want):
    assert suggest_tdf(tdf, used, cores) == pytest.approx(want)


@pytest.mark.parametrize("x, want", [(1, 1), (1.2, 1.5), (4000, 5000), (5000, 5000),
                                     (14286, 15000), (600, 700), (8000, 10000), (0.03, 0.03)])
def test_nice_up(x, want):
    assert nice_up(x) == pytest.approx(want)
