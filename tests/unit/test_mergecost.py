"""emu.bench.mergecost: the deadline schedule (pure, exact), the layouts, one short run."""

import pytest

from emu.bench import mergecost as M


def test_the_schedule_pops_every_stream_due_and_reschedules_it_one_period_later():
    s = M.Schedule([0.3, 0.1, 0.2], period=1.0)
    assert s.wake_at() == 0.1
    assert s.due(0.05) == []
    assert s.due(0.25) == [(1, 0.1), (2, 0.2)]
    assert s.wake_at() == 0.3
    assert s.due(1.15) == [(0, 0.3), (1, 1.1)]  # stream 1 again, one period on
    assert sorted(s.heap) == [(1.2, 2), (1.3, 0), (2.1, 1)]


@pytest.mark.parametrize("t, grid, want", [
    (0.30, 0.0, 0.30),   # no grid: the deadline itself
    (0.30, 0.25, 0.50),  # the first grid point at or after it
    (0.50, 0.25, 0.50),  # on a grid point: that point
    (0.01, 0.25, 0.25),
])
def test_wake_at_rounds_up_to_the_grid(t, grid, want):
    assert M.Schedule([t], period=1.0).wake_at(grid) == pytest.approx(want)


def test_a_grid_point_serves_every_stream_due_by_it():
    s = M.Schedule([0.01, 0.02, 0.3], period=1.0)
    now = s.wake_at(0.1)
    assert now == pytest.approx(0.1) and [i for i, _ in s.due(now)] == [0, 1]


def test_the_schedule_refuses_a_period_that_is_not_positive():
    with pytest.raises(ValueError, match="period"):
        M.Schedule([0.0], period=0.0)


def test_layouts_one_each_per_host_and_all_in_one():
    assert M.layouts(8, 2) == [(8, 1), (4, 2), (1, 8)]
    assert M.layouts(8, 1) == [(8, 1), (1, 8)]
    with pytest.raises(ValueError, match="--per"):
        M.layouts(8, 3)


def test_a_short_run_counts_events_wakes_and_cpu():
    res, cpu = M.run(2, 2, period=0.002, grid=0.0, duration=0.05, seed=1)
    # 4 streams due every 2 ms from a phase in [0, 2 ms) for 50 ms: 25 deadlines each
    assert res.events == 4 * 25, res
    assert 0 < res.wakes <= res.events and res.wait_s >= 0 and cpu > 0


def test_bad_arguments_name_the_option(capsys):
    with pytest.raises(SystemExit):
        M.main(["--streams", "8", "--per", "3"])
    assert "--per" in capsys.readouterr().err
