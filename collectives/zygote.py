"""The worker zygote: one process per job imports torch and the emu backend once and
forks every PyTorch worker from it (issue 11, item 5 "Memory").

Why: a job ran one `python -m collectives.worker` per emulated GPU, each importing torch
itself: on rail8x4 32 imports of 2-3 CPU-seconds and ~250 MB resident each, on two
cores. Forked children share the imported pages copy-on-write (gc.freeze keeps the
collector from writing to them) and start in milliseconds.

    python -m collectives.zygote --fd N     (N: its end of a socketpair; runners.Zygote)

Protocol, one JSON line each way. {"op": "spawn", "netns": path | null, "cwd", "env",
"argv" (collectives.worker's arguments), "log"} -> {"pid"}; {"op": "status"} ->
{"status": {pid: exit code | null}} (negative: killed by that signal, as Popen);
{"op": "terminate", "grace": s} -> SIGTERM, SIGKILL after `grace` s, -> {"status"}.
The zygote exits when the connection closes or on SIGTERM, after terminating its
children the same way: by pid, its own and unreaped only (a pid is not reused before).

A child: own session (setsid); SIGTERM if the zygote dies (PR_SET_PDEATHSIG);
stdout and stderr appended to `log` (line-buffered, written through), stdin /dev/null;
the host's network namespace (emucore.netns); `cwd`; exactly `env` as os.environ;
signal handlers as the zygote found them; then `collectives.worker.main(argv)`. It leaves
as a fresh interpreter does - an uncaught exception printed (status 1), SystemExit's
status, non-daemon threads joined, atexit handlers run, stdio flushed - but without the
interpreter's teardown (`leave`): the fork unwinds the server's frames, and main() ends
the child with os._exit.

What a child inherits that a fresh `python -m collectives.worker` would make itself:
* torch's default CPU generator: torch seeds it from /dev/urandom at import, so every
  child would draw the zygote's numbers; the child reseeds it from os.urandom (a script
  calling manual_seed overrides that, as usual). `random` reseeds itself at fork (the
  stdlib's at-fork hook); numpy's global generator is reseeded here.
* what is read from the environment at interpreter start or at torch's import: PYTHON*
  (and the str hash seed, which all children share), OMP_* / MKL_* (libgomp reads them
  when loaded), TORCH_CPP_LOG_LEVEL. The launcher gives the zygote every variable all
  ranks share, so these have the workers' values.
* no threads: fork copies only the calling thread, so the zygote refuses to start, and
  to fork, with more than one (numpy's OpenBLAS starts one at import unless
  OMP_NUM_THREADS=1: launch.WORKER_THREADS_ENV). torch's OpenMP pool does not exist
  yet; torch's own at-fork hook (get_num_threads) sets OpenMP up in the child.
* torch._dynamo and torch.profiler already imported (WARM), for a script or a training
  workload: DDP and torch.optim import them on first use, ~800 modules (sympy, onnx, ...)
  and 1.6-2.7 s of CPU that every rank repeated after the fork.
* sys.path, the imported modules, and the zygote's mount namespace: Mininet's popen
  also entered the host's, whose /sys shows that host's interfaces; here /sys/class/net
  is the root namespace's (nothing of emu reads it; getifaddrs and netlink are right).
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import io
import json
import os
import signal
import socket
import sys
import threading
import time
import weakref
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Callable, NoReturn

import torch

from collectives import backend, worker as run
from emucore import netns

GRACE = 10.0  #: seconds between SIGTERM and SIGKILL
PR_SET_PDEATHSIG = 1
#: what a rank that trains imports on its first DDP / optimizer step (torch.distributed's
#: DDP and torch.optim import torch._dynamo, which brings sympy, torch.onnx, ...: ~800
#: modules, 1.6-2.7 s of CPU, paid by every rank); imported once in the zygote instead
WARM = ("torch._dynamo", "torch.profiler")
#: the workload modules that train (DDP, optimizers); the others never import WARM
TRAINS = ("collectives.workloads.train", "collectives.workloads.overlap",
          "collectives.workloads.models")
_libc = ctypes.CDLL(None, use_errno=True)


class _Forked(BaseException):
    """Raised in a fresh child: unwinds the server's frames, carrying the request."""

    def __init__(self, req: dict, zygote: int) -> None:
        super().__init__()
        self.req, self.zygote = req, zygote


class _Stop(BaseException):
    """SIGTERM reached the zygote."""


def threads() -> list[str]:
    """The names of this process's threads (kernel view: also those Python did not start)."""
    return [Path(f"/proc/self/task/{t}/comm").read_text().strip()
            for t in os.listdir("/proc/self/task")]


class Server:
    """Forks children on request, reaps them and terminates them (the zygote's loop)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.rf = conn, conn.makefile("rb")
        self.pid = os.getpid()
        self.children: dict[int, int | None] = {}  # pid -> exit code, None while unreaped
        self.sigterm = signal.signal(signal.SIGTERM, self._stop)
        # an inherited SIG_IGN would reap the children before we could
        self.sigchld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    @staticmethod
    def _stop(*_: object) -> None:
        raise _Stop

    def serve(self) -> tuple[dict, int] | None:
        """Answer requests until the connection closes or SIGTERM; returns None in the
        zygote, (request, zygote pid) in a child just forked."""
        try:
            self._send({"ready": self.pid, "torch": torch.__version__})
            for line in self.rf:
                try:
                    self._send(self._answer(json.loads(line)))
                except (ValueError, KeyError, TypeError, OSError) as e:  # fork, kill
                    self._send({"error": f"{type(e).__name__}: {e}"})
        except _Forked as f:
            self.rf.close()
            self.conn.close()
            return f.req, f.zygote
        except (_Stop, OSError):
            pass
        finally:
            if os.getpid() == self.pid:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                self.terminate(GRACE)
        return None

    def _send(self, obj: dict) -> None:
        self.conn.sendall(json.dumps(obj).encode() + b"\n")

    def _answer(self, req: dict) -> dict:
        self._reap()
        if req["op"] == "spawn":
            return self._spawn(req)
        if req["op"] == "status":
            return {"status": self.children}
        if req["op"] == "terminate":
            return {"status": self.terminate(float(req.get("grace", GRACE)))}
        return {"error": f"unknown op {req['op']!r}"}

    def _spawn(self, req: dict) -> dict:
        warm(list(req["argv"]))
        names = threads()
        if len(names) > 1:
            return {"error": f"the zygote runs {len(names)} threads ({', '.join(names)}); "
                             "a forked child would have only one"}
        sys.stdout.flush()
        sys.stderr.flush()
        _libc.fflush(None)
        gc.freeze()  # the objects so far are never collected: no writes to their pages
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, self.sigterm)
            signal.signal(signal.SIGCHLD, self.sigchld)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            raise _Forked(req, self.pid)
        self.children[pid] = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return {"pid": pid}

    def _reap(self, block: bool = False) -> None:
        while None in self.children.values():
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children[pid] = os.waitstatus_to_exitcode(status)

    def terminate(self, grace: float) -> dict[int, int | None]:
        """SIGTERM to the live children, SIGKILL to those left after `grace` s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid, code in self.children.items():
                if code is None:  # unreaped: the pid is still this child's
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while None in self.children.values() and time.monotonic() < deadline:
                time.sleep(0.02)
                self._reap()
        self._reap(block=True)
        return self.children


def warms(argv: list[str]) -> bool:
    """Whether a rank of `argv` may train: a script (unknown: it may) or a training
    workload module; a workload module that does not train (allreduce, pipeline, tensor,
    ...) never imports WARM, which would cost its job ~1.7 s of CPU for nothing."""
    return not (argv[:1] == ["--module"] and len(argv) > 1
                and argv[1].startswith("collectives.workloads.") and argv[1] not in TRAINS)


def warm(argv: list[str]) -> None:
    """Import WARM before forking a rank of `argv` that may train (once per zygote).
    Importing starts no thread; the fork's thread check holds that."""
    if warms(argv):
        for name in WARM:
            importlib.import_module(name)


def child(req: dict, zygote: int) -> int:
    """Become the worker of `req` and run it; returns its exit status."""
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != zygote:  # the zygote died before the line above
        os._exit(1)
    gc.enable()
    redirect(req["log"])
    if req.get("netns"):
        netns.enter(req["netns"])
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    torch.default_generator.manual_seed(int.from_bytes(os.urandom(8), "little"))
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    return run.main(list(req["argv"]))


def exit_status(code: object) -> int:
    """The exit status of SystemExit(code), as the interpreter and the kernel make it:
    None 0, an int its low 8 bits, anything else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def leave(work: Callable[[], int | None]) -> NoReturn:
    """Run a child's `work` and end the process as the interpreter's exit would -
    uncaught exception printed (status 1), SystemExit's status, non-daemon threads joined,
    atexit handlers run (torch.library's finalizers excepted), stdio flushed - then
    os._exit, skipping the teardown.

    The teardown deallocates what is still alive, the imported torch above all, and in a
    forked child each deallocation writes to a page it shares with the zygote and copies
    it: ~0.3 s of CPU per rank at exit (0.34 s a child against 0.06 s with os._exit after
    the atexit handlers; docs/PERFORMANCE.md "The workers' CPU in an AllReduce"). Python
    does not promise __del__ for objects that still exist when the interpreter exits
    (language reference, "Data model", object.__del__); what a job relies on at exit -
    logging's flush (an atexit handler), destroyed process groups
    (collectives.worker.settle), files closed by `with` - is done before. What this drops:
    the buffer of a file the script left open in an object still alive at exit, which
    the teardown flushed when it deallocated it. torch.library's finalizers only
    deregister operators from torch's dispatcher, which goes with the process."""
    try:
        code = exit_status(work())
    except SystemExit as e:
        code = exit_status(e.code)
    except BaseException:  # pylint: disable=broad-except  # as the interpreter: print, 1
        sys.excepthook(*sys.exc_info())
        code = 1
    # what Py_FinalizeEx does first: threading's own exit hooks (concurrent.futures tells
    # its idle workers to stop there), then it joins every non-daemon thread
    threading._shutdown()  # type: ignore[attr-defined]
    for f, info in list(weakref.finalize._registry.items()):  # type: ignore[attr-defined]
        if getattr(info.func, "__module__", "") == "torch.library":
            f.atexit = False
    atexit._run_exitfuncs()  # type: ignore[attr-defined]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by the script
            pass
    _libc.fflush(None)
    os._exit(code)


def redirect(log: str) -> None:
    """stdout and stderr appended to `log` (line-buffered, written through), stdin /dev/null."""
    enc = sys.stdout.encoding
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((null, 0), (out, 1), (out, 2)):
        os.dup2(src, dst)
    os.close(out)
    os.close(null)
    sys.stdin = sys.__stdin__ = open(0, closefd=False, encoding=enc)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        open(1, "wb", buffering=0, closefd=False), encoding=enc, line_buffering=True,
        write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False), encoding=enc, errors="backslashreplace",
        line_buffering=True, write_through=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point: serve on the inherited socket; in a forked child, run the worker."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--fd" or not args[1].isdigit():
        print(__doc__.strip())
        return 2
    names = threads()
    if threading.active_count() != 1 or len(names) != 1:
        print(f"collectives.zygote: importing torch started threads ({', '.join(names)}); "
              "start it with OMP_NUM_THREADS=1 (launch.WORKER_THREADS_ENV)", file=sys.stderr)
        return 3
    backend.register(default_for_cpu=True)
    # one shared-memory resource tracker for the job: a child inherits the pipe to it,
    # where each would otherwise start its own tracker (a fresh interpreter, ~10 MB) on
    # its first SharedMemory; it is a process, so the zygote stays single-threaded
    resource_tracker.ensure_running()
    gc.disable()  # no collection frees holes into the pages the children will share
    forked = Server(socket.socket(fileno=int(args[1]))).serve()
    if forked is None:
        return 0
    leave(lambda: child(*forked))


if __name__ == "__main__":
    sys.exit(main())
