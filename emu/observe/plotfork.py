"""A run's plots drawn on every core: `emu.observe.plots.make_all`'s jobs shared out
over forked children, one per core, the calling process drawing its own share (issue 30:
a run spent 2.6-4.2 s on its plots, nearly all of it matplotlib laying out and rendering
text, one figure after the other on one core while the other idled).

The children are forked after matplotlib is imported and the run's files are read, so
each starts drawing at once; every process takes the next plot from a shared queue when
done with one (the plots differ in cost, 0.2-0.6 s), and the children send their results
back as a JSON line on a pipe. Nothing is left behind: every child is waited for, also when the
caller's own share raises or Ctrl-C comes (the children are then ended by pid first).
A child's error is raised in the caller with its traceback (`PlotFailed`), as the same
plot's error would be raised when drawn in the caller. With threads running (a fork
copies only the calling one, and whatever lock another held stays held in the child) or
one core, the jobs are run in the caller, one after the other.

The source: POSIX fork(2) and _exit(2) (a child leaves without running the parent's
exit handlers or flushing its buffers), waitpid(2); Python's `os` module documentation.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import traceback
from collections.abc import Callable, Sequence

from emu.observe.procstat import machine_cores as cores  # the default share (tests set it)

Job = tuple[str, Callable[[], bool]]  # (name, draw: True when it wrote its file)


class PlotFailed(RuntimeError):
    """A plot raised in a child process: its name and the child's traceback."""


def others_running() -> bool:
    """Another thread runs in this process (a fork copies only the calling one)."""
    return threading.active_count() > 1


_fork = os.fork if hasattr(os, "fork") else None  #: fork(2) (tests note the children here)


def take(queue: int) -> int | None:
    """The next job index from the shared queue (a pipe of one byte per job, its write
    end closed: a 1-byte read(2) of a pipe is atomic, each index goes to one process);
    None when it is empty."""
    b = os.read(queue, 1)
    return b[0] if b else None


def drain(jobs: Sequence[Job], queue: int, note: Callable[[str], None]) -> dict[int, bool]:
    """Draw jobs from the queue until it is empty: {i: drew it}; `note(name)` before
    each (a child names the plot that failed)."""
    done = {}
    while (i := take(queue)) is not None:
        note(jobs[i][0])
        done[i] = bool(jobs[i][1]())
    return done


def _child(jobs: Sequence[Job], queue: int, wfd: int) -> None:
    """A child's life: draw from the queue, report on the pipe, _exit (never returns)."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # not the caller's handlers (emu.cli's
        signal.signal(sig, signal.SIG_DFL)  # raise KeyboardInterrupt): ended, it just ends
    code, name = 0, ["?"]
    try:
        out: dict = {"done": {str(i): ok for i, ok in
                              drain(jobs, queue, lambda n: name.__setitem__(0, n)).items()}}
    except BaseException as exc:  # noqa: BLE001 - every error goes to the parent
        out, code = {"error": f"plot {name[0]}: {type(exc).__name__}: {exc} (in plot child "
                              f"{os.getpid()})", "traceback": traceback.format_exc()}, 1
    try:
        with os.fdopen(wfd, "w") as fh:
            fh.write(json.dumps(out))
    finally:
        os._exit(code)


def _reap(pids: list[int], kill: bool) -> dict[int, int]:
    """Wait for every child (ending it first if `kill`): pid -> its wait status."""
    status = {}
    for pid in pids:
        if kill:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        while True:
            try:
                status[pid] = os.waitpid(pid, 0)[1]
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                status[pid] = 0
                break
    return status


def run(jobs: Sequence[Job], workers: int | None = None) -> list[bool]:
    """Run every job, shared over `workers` processes (default: the cores, at most one
    per job), each taking the next job when it is done with one; returns each job's
    result in the order of `jobs`."""
    workers = min(workers or cores(), len(jobs))
    if workers <= 1 or others_running() or _fork is None or len(jobs) > 255:
        return [bool(fn()) for _, fn in jobs]
    queue, w = os.pipe()
    os.write(w, bytes(range(len(jobs))))
    os.close(w)
    pids, reads = [], []
    try:
        for _ in range(workers - 1):
            r, w = os.pipe()
            pid = _fork()
            if pid == 0:  # the child
                os.close(r)
                _child(jobs, queue, w)
            os.close(w)
            pids.append(pid)
            reads.append(os.fdopen(r))
        got = drain(jobs, queue, lambda _name: None)
        reports = [fh.read() for fh in reads]
    except BaseException:
        _reap(pids, kill=True)
        raise
    finally:
        os.close(queue)
        for fh in reads:
            fh.close()
    status = _reap(pids, kill=False)
    for pid, text in zip(pids, reports):
        rep = json.loads(text) if text else {
            "error": f"plot child {pid} ended without a report (wait status {status[pid]})"}
        if "error" in rep:
            raise PlotFailed(rep["error"] + ("\n" + rep["traceback"] if "traceback" in rep
                                             else ""))
        got.update({int(i): ok for i, ok in rep["done"].items()})
    return [got[i] for i in range(len(jobs))]
