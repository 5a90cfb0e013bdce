"""Product processes inside the namespaces (switch agents, NICs, LLDP speakers, load
generators): started as `python -m MODULE` from the checkout, awaited on their control
socket, stopped by pid (never by name, docs/CONVENTIONS.md).

A child's cwd is the checkout, not the caller's: every path handed to one must be
absolute.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from emu.realise import spawner
from emucore.runmark import marked_env

#: the checkout: every product process runs with it as cwd
REPO = Path(__file__).resolve().parents[2]
#: seconds the agents (or the NICs) of a fabric get to answer after they start
START_TIMEOUT_S = 20.0
START_TIMEOUT_ENV = "EMU_START_TIMEOUT"


class StartFailed(RuntimeError):
    """A product process exited before it answered (a refused configuration, say)."""


class StartTimedOut(TimeoutError):
    """A product process did not answer within its start timeout."""


START_ERRORS = (StartFailed, StartTimedOut)


def start_timeout() -> float:
    """How long processes may take to start: EMU_START_TIMEOUT (seconds) if set - a
    machine that emulates its CPU (a VM without KVM, docs/VM.md) imports Python ~20x
    slower - else START_TIMEOUT_S."""
    raw = os.environ.get(START_TIMEOUT_ENV)
    if raw is None or raw == "":
        return START_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{START_TIMEOUT_ENV}: seconds > 0, got {raw!r}")
    return value


def slowness() -> float:
    """How much slower than a plain machine this one is taken to be: EMU_START_TIMEOUT over
    its default, at least 1. A machine that needs longer to start its processes also
    forwards frames slower in lab time (the VM under software emulation of docs/VM.md:
    EMU_START_TIMEOUT=300, a ping's reply through three agents took over the 2 s a ping
    waits), so lab-time waits that are not part of the model stretch by this factor."""
    return max(1.0, start_timeout() / START_TIMEOUT_S)


def run_module(node, module: str, args: list[str | Path], **popen_kw):
    """Start `python -m module ARGS` inside a Mininet node's namespace; paths in `args`
    are given as `Path`s and must be absolute (ValueError otherwise). Forked from the
    node's fork server (its `spawner`, emu.realise.spawner) where it has one and the child
    inherits its standard streams, else a `python -m` of its own (Mininet's popen)."""
    for a in args:
        if isinstance(a, Path) and not a.is_absolute():
            raise ValueError(f"{module}: relative path {str(a)!r} handed to a child process "
                             f"(its cwd is {REPO})")
    server = getattr(node, "spawner", None)
    if (server is not None and module in spawner.MODULES
            and all(v is None for v in popen_kw.values())):
        return server.spawn(module, list(map(str, args)), marked_env(node.tag, os.environ),
                            netns_pid=node.pid, cwd=REPO)
    return node.popen([sys.executable, "-m", module, *map(str, args)], cwd=str(REPO),
                      **popen_kw)


def stop_procs(procs: list) -> None:
    """SIGTERM every process still running, then wait for each (they end side by side)."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    for p in running:
        p.wait()


def wait_ready(what: str, proc, ping, deadline: float, timeout: float, errors=(),
               hint: str = "") -> None:
    """Poll `ping()` until it answers ok; RuntimeError if `proc` exits first (`hint`
    appended), TimeoutError after `deadline` (`timeout` only names it)."""
    while True:
        if proc.poll() is not None:
            raise StartFailed(f"{what} exited with {proc.returncode}{hint}")
        try:
            if ping().get("ok"):
                return
        except (FileNotFoundError, ConnectionRefusedError, socket.timeout, *errors):
            pass
        if time.monotonic() > deadline:
            raise StartTimedOut(f"{what} not ready after {timeout:.0f} s{hint} (a slow machine "
                               f"may need more: {START_TIMEOUT_ENV}=SECONDS)")
        time.sleep(0.05)
