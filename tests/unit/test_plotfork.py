"""emu.observe.plotfork: the plots shared out over forked children - results in the
jobs' order, a child's error raised with its traceback, no child left behind, the same
files byte for byte as drawn one after the other, and serial with a thread running."""

import os
import threading
import time

import pytest

from emu.observe import plotfork, plots

from .test_qp_plots import run_dir


@pytest.fixture
def forked(monkeypatch):
    """The plot children's pids, forked whatever else runs in this process (pytest-xdist's
    worker has a thread of its own, and children of other tests)."""
    pids = []

    def fork():
        pid = os.fork()
        if pid:
            pids.append(pid)
        return pid
    monkeypatch.setattr(plotfork, "others_running", lambda: False)
    monkeypatch.setattr(plotfork, "_fork", fork)
    return pids


def reaped(pids) -> bool:
    """Every one of `pids` was forked and has been waited for (none is left behind)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return bool(pids)


def pid_jobs(tmp_path, n):
    """n jobs that note which process ran them; job i draws when i is even."""
    def job(i):
        (tmp_path / f"{i}.pid").write_text(str(os.getpid()))
        return i % 2 == 0
    return [(f"j{i}", lambda i=i: job(i)) for i in range(n)]


def meet(tmp_path, i, n):
    """Job i of the first n: mark it taken, then wait until all n are taken (by then
    each of n processes holds one: none can take a second while it waits here)."""
    (tmp_path / f"{i}.pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"{k}.pid").exists() for k in range(n)):
        assert time.monotonic() < deadline, "the jobs were not shared out"
        time.sleep(0.005)
    return True


def test_results_in_order_each_job_drawn_once_by_the_caller_or_a_child(tmp_path, forked):
    jobs = [(f"j{i}", lambda i=i: meet(tmp_path, i, 2)) for i in range(2)] + pid_jobs(
        tmp_path, 5)[2:]
    assert plotfork.run(jobs, workers=2) == [True, True, True, False, True]
    pids = [int((tmp_path / f"{i}.pid").read_text()) for i in range(5)]
    me = os.getpid()
    assert me in pids[:2] and pids[0] != pids[1]  # the first two: the caller's and a child's
    assert set(pids) == set(pids[:2]) and reaped(forked)
    assert forked == [p for p in pids[:2] if p != me]  # the one child, waited for


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


def split(tmp_path, in_caller, in_child):
    """Two jobs, one to each process (`meet`), each then doing what its process does."""
    me = os.getpid()

    def job(i):
        meet(tmp_path, i, 2)
        return in_caller() if os.getpid() == me else in_child()
    return [(f"j{i}", lambda i=i: job(i)) for i in range(2)]


def test_a_childs_error_is_raised_with_its_traceback(tmp_path, forked):
    with pytest.raises(plotfork.PlotFailed, match=r"plot j[01]: ValueError: no such column") as ei:
        plotfork.run(split(tmp_path, lambda: True, boom), workers=2)
    assert "in boom" in str(ei.value) and reaped(forked)


def test_the_callers_error_ends_and_reaps_the_children(tmp_path, forked):
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="no such column"):
        plotfork.run(split(tmp_path, boom, lambda: threading.Event().wait(30)), workers=2)
    assert reaped(forked) and time.monotonic() - t0 < 20  # ended, not waited for


def test_the_same_files_as_drawn_one_after_the_other(tmp_path, monkeypatch, forked):
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
    assert reaped(forked) and len(forked) == 1


def test_warm_imports_in_a_thread_that_pyplot_joins():
    plots.warm()
    assert [t.name for t in plots._warming] == ["emu-plots-warm"]
    t = plots._warming[0]
    assert plots.pyplot().get_backend().lower() == "agg"
    assert plots._warming == [] and not t.is_alive()
