"""emu.observe.plotfork: the plots shared out over forked children - results in the
jobs' order, a child's error raised with its traceback, no child left behind, the same
files byte for byte as drawn one after the other, and serial with a thread running."""

import os
import threading

import pytest

from emu.observe import plotfork, plots

from .test_qp_plots import run_dir


def no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def pid_jobs(tmp_path, n):
    """n jobs that note which process ran them; job i draws when i is even."""
    def job(i):
        (tmp_path / f"{i}.pid").write_text(str(os.getpid()))
        return i % 2 == 0
    return [(f"j{i}", lambda i=i: job(i)) for i in range(n)]


def test_shares_are_round_robin_with_the_caller_first():
    assert plotfork.shares(5, 2) == [[0, 2, 4], [1, 3]]
    assert plotfork.shares(3, 3) == [[0], [1], [2]]


def test_results_in_order_drawn_by_the_caller_and_one_child(tmp_path):
    assert plotfork.run(pid_jobs(tmp_path, 5), workers=2) == [True, False, True, False, True]
    pids = [int((tmp_path / f"{i}.pid").read_text()) for i in range(5)]
    me = os.getpid()
    assert [p == me for p in pids] == [True, False, True, False, True]
    assert pids[1] == pids[3] and no_children_left()


def test_serial_with_one_worker_or_a_thread_running(tmp_path):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert plotfork.run(pid_jobs(tmp_path, 4), workers=2) == [True, False, True, False]
    finally:
        stop.set()
        t.join()
    assert {(tmp_path / f"{i}.pid").read_text() for i in range(4)} == {str(os.getpid())}


def boom():
    raise ValueError("no such column")


def test_a_childs_error_is_raised_with_its_traceback(tmp_path):
    jobs = [("fine", lambda: True), ("broken", boom)]
    with pytest.raises(plotfork.PlotFailed, match=r"plot broken: ValueError: no such column") as ei:
        plotfork.run(jobs, workers=2)
    assert "in boom" in str(ei.value) and no_children_left()


def test_the_callers_error_ends_and_reaps_the_children(tmp_path):
    jobs = [("broken", boom), ("slow", lambda: threading.Event().wait(30))]
    with pytest.raises(ValueError, match="no such column"):
        plotfork.run(jobs, workers=2)
    assert no_children_left()


def test_the_same_files_as_drawn_one_after_the_other(tmp_path, monkeypatch):
    serial, shared = tmp_path / "serial", tmp_path / "shared"
    serial.mkdir()
    shared.mkdir()
    monkeypatch.setattr(plotfork, "cores", lambda: 1)
    one = plots.make_all(run_dir(serial, "uet"))
    monkeypatch.setattr(plotfork, "cores", lambda: 2)
    two = plots.make_all(run_dir(shared, "uet"))
    assert [p.name for p in one] == [p.name for p in two] == ["qp_rates.png", "qp_windows.png"]
    for a, b in zip(one, two):
        assert a.read_bytes() == b.read_bytes()
    assert no_children_left()


def test_warm_imports_in_a_thread_that_pyplot_joins():
    plots.warm()
    assert [t.name for t in plots._warming] == ["emu-plots-warm"]
    t = plots._warming[0]
    assert plots.pyplot().get_backend().lower() == "agg"
    assert plots._warming == [] and not t.is_alive()
