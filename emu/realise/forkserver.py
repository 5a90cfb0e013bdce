"""The fabric's fork server: one process per fabric imports the children's code once - the
switch agent (Scapy for LLDP/DCBX and credit frames, pyroute2, the pipeline: ~0.7 s of
CPU), the hosts' LLDP speaker (Scapy, ~0.5 s) and the RDMA NIC (~0.25 s) - and forks every
agent, speaker and NIC of the fabric from it, each into its node's network namespace
(issue 30: on rail2x4 those imports were ~5 CPU-seconds of every fabric's start on 2
cores). The pattern is the worker zygote's (collectives.zygote, issue 11 "Memory");
`emu.realise.spawner` is the fabric's end.

    python -m emu.realise.forkserver --fd N     (N: its end of a socketpair)

Protocol, one JSON line each way: first {"ready": pid}; then {"op": "spawn", "module",
"argv", "env", "cwd", "netns_pid" (a process in the namespace to enter, or null)} ->
{"pid"}; {"op": "status", "pid"} -> {"code": exit code or null} (negative: killed by that
signal, as Popen's returncode). It exits when the connection closes; its children live
on, as the `python -m` children of Mininet's popen did: after a `kill -9` of `emu run`
they are `emu clean`'s to end (issue 14, tests/netns/test_kill9.py; the server's
environment carries the run's EMU_RUN mark, and so do theirs).

A child is what `python -m MODULE ARGV` in the node's namespace would be: own session
(Mininet's `mnexec -d`), the node's network namespace (emucore.netns; Mininet's nodes
share the root mount namespace, and nothing of a child reads /sys), `cwd`, exactly `env`,
the server's stdin/stdout/stderr (those of `emu`), default signal handlers, then the module
run as __main__ (runpy), leaving as a fresh interpreter does. It inherits the imported
modules, sys.path and the str hash seed (`random` reseeds itself at fork); what a module
reads from the environment at import (switch_agent.fastagent.RINGS: EMU_FAST_RINGS) is
the server's environment, the fabric's at its start, as its children's is.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import socket
import sys
import threading

import switch_agent.__main__  # noqa: F401  (preloaded for the children: the agent,
import traffic.nic.main  # noqa: F401  the RDMA NIC,
import traffic.tools.lldp_host  # noqa: F401  the hosts' LLDP/DCBX speaker)
from emucore import netns

class _Forked(BaseException):
    """Raised in a child just forked: unwinds the server's frames, carrying the request."""

    def __init__(self, req: dict) -> None:
        super().__init__()
        self.req = req


def serve(conn: socket.socket) -> dict | None:
    """Answer requests until the connection closes; None in the server, the request in a
    child just forked."""
    rf = conn.makefile("rb")
    children: dict[int, int | None] = {}  # pid -> exit code, None while unreaped

    def send(obj: dict) -> None:
        conn.sendall(json.dumps(obj).encode() + b"\n")

    try:
        send({"ready": os.getpid()})
        for line in rf:
            req = json.loads(line)
            reap(children)
            try:
                if req["op"] == "spawn":
                    pid = fork(req)
                    children[pid] = None
                    send({"pid": pid})
                elif req["op"] == "status":
                    send({"code": children[int(req["pid"])]})
                else:
                    send({"error": f"unknown op {req['op']!r}"})
            except (KeyError, ValueError, OSError) as e:
                send({"error": f"{type(e).__name__}: {e}"})
    except _Forked as f:
        rf.close()
        conn.close()
        return f.req
    except OSError:  # the fabric's end went away
        pass
    return None


def reap(children: dict[int, int | None]) -> None:
    """Record the exit codes of the children that ended."""
    for pid, code in children.items():
        if code is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children[pid] = os.waitstatus_to_exitcode(status)


def fork(req: dict) -> int:
    """Fork the child of `req`; its pid (in the child: raises _Forked)."""
    if threading.active_count() != 1:
        raise OSError(f"{threading.active_count()} threads: a forked child would have one")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        raise _Forked(req)
    return pid


def child(req: dict) -> None:
    """Become `python -m MODULE ARGV` of `req` in its namespace and run it (its SystemExit
    leaves the interpreter)."""
    os.setsid()
    with open("/proc/self/comm", "w") as comm:  # ps's name: its module's, not the server's
        comm.write(req["module"].rsplit(".", 1)[-1][:15])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    gc.enable()
    if req.get("netns_pid") is not None:
        fd = os.open(f"/proc/{int(req['netns_pid'])}/ns/net", os.O_RDONLY)
        try:
            netns.setns(fd)
        finally:
            os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [req["module"], *req["argv"]]
    forget_preloaded(req["module"])
    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)


def forget_preloaded(module: str) -> None:
    """Drop from sys.modules the module that runpy is about to run as __main__ (a
    package's `__main__`), which the server imported for its dependencies only: runpy
    executes it afresh either way, and finding it imported it warns on stderr ("found in
    sys.modules after import of package ..., but prior to execution") - once per child,
    into every run's output. Its dependencies stay imported."""
    mod = sys.modules.get(module)
    sys.modules.pop(f"{module}.__main__" if hasattr(mod, "__path__") else module, None)


def main(argv: list[str] | None = None) -> int:
    """Entry point: serve on the inherited socket; in a forked child, run its module."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--fd" or not args[1].isdigit():
        print(__doc__.strip())
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is emu's; it stops us
    gc.freeze()  # the imported objects are never collected: no writes to shared pages
    gc.disable()
    req = serve(socket.socket(fileno=int(args[1])))
    if req is None:
        return 0
    child(req)
    return 0


if __name__ == "__main__":
    sys.exit(main())
