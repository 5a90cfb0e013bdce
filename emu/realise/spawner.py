"""The fabric's end of its fork server (emu.realise.forkserver): `Spawner` starts the server
(which imports the children's code once, while the namespaces are built) and forks product
processes from it; `Spawned` is such a process with the part of Popen's interface emu
uses (pid, poll, wait, terminate, kill, returncode), so `emu.realise.procs.run_module`
hands one out where it would a Popen (issue 30: a fabric's start-up).

EMU_FORKSERVER=0 starts every child as its own `python -m` again (Mininet's popen).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

#: "0": no fork server (every child its own interpreter)
ENV = "EMU_FORKSERVER"
#: the modules the server preloads: only these are forked (emu.realise.forkserver)
MODULES = ("switch_agent", "traffic.nic", "traffic.tools.lldp_host")


#: the exit code of a child that ended after its server (its parent, who alone saw it)
LOST = 255


def running(pid: int) -> bool:
    """Whether process `pid` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class SpawnError(RuntimeError):
    """The fork server did not start, or stopped answering."""


def enabled() -> bool:
    """Whether children are forked from a server (EMU_FORKSERVER, default on)."""
    return os.environ.get(ENV, "1") != "0"


class Spawner:
    """One fork server: started at once, awaited at the first spawn."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None, stdout=None,
                 timeout: float = 60.0, modules: tuple[str, ...] = MODULES) -> None:
        self.cwd, self.timeout, self.modules = Path(cwd), timeout, modules
        ours, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "emu.realise.forkserver", "--fd", str(theirs.fileno())],
                cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stdout,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        self._sock, self._rf = ours, ours.makefile("rb")
        self._lock = threading.Lock()
        self._ready = False

    def _reply(self, timeout: float) -> dict:
        """The server's next line; SpawnError for its error, its end or silence."""
        self._sock.settimeout(timeout)
        try:  # an empty line: it stopped
            reply = json.loads(self._rf.readline() or "null")
        except OSError as e:  # TimeoutError included
            reply = {"error": type(e).__name__}
        if reply is None or "error" in reply:
            why = reply["error"] if reply else f"stopped (exit {self.proc.poll()})"
            raise SpawnError(f"fork server {self.proc.pid}: {why}")
        return reply

    def _ask(self, req: dict) -> dict:
        with self._lock:
            if not self._ready:  # its imports ran while the caller built the namespaces
                self._reply(self.timeout)
                self._ready = True
            try:
                self._sock.sendall(json.dumps(req).encode() + b"\n")
            except OSError as e:
                raise SpawnError(f"fork server {self.proc.pid}: {e}") from None
            return self._reply(self.timeout)

    def spawn(self, module: str, args: list[str], env: dict[str, str],
              netns_pid: int | None = None, cwd: Path | None = None) -> "Spawned":
        """`python -m module ARGS` with exactly `env` in the network namespace of process
        `netns_pid` (None: the server's), forked from the server."""
        if module not in self.modules:
            raise ValueError(f"{module}: not one of the fork server's {', '.join(self.modules)}")
        pid = self._ask({"op": "spawn", "module": module, "argv": list(args), "env": env,
                         "cwd": str(cwd or self.cwd), "netns_pid": netns_pid})["pid"]
        return Spawned(self, pid, [module, *args])

    def status(self, pid: int) -> int | None:
        """The exit code of a child (negative: the signal), None while it runs."""
        return self._ask({"op": "status", "pid": pid})["code"]

    def close(self, timeout: float = 10.0) -> None:
        """Close the connection: the server exits (a child left runs on)."""
        self._rf.close()
        self._sock.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Spawned:
    """A child of the fork server, as emu uses a Popen. Its pid is the server's unreaped
    child until `returncode` is set, so signalling it by pid reaches no other process."""

    def __init__(self, spawner: Spawner, pid: int, args: list[str]) -> None:
        self.spawner, self.pid, self.args = spawner, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once it ended, else None. With the server gone (a child outlives
        it) the code is lost: a child that is gone then reports LOST."""
        if self.returncode is None:
            try:
                self.returncode = self.spawner.status(self.pid)
            except SpawnError:
                if not running(self.pid):
                    self.returncode = LOST
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end (subprocess.TimeoutExpired after `timeout` s); the exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the child if it still runs."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)
