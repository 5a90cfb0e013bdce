"""How a job's workers are started and stopped (collectives.launch's runners): forked from a
zygote in the launcher's namespaces (`Forked`, through `Zygote`, the launcher's end of
collectives.zygote - issue 11 "Memory": torch is imported once per job, not once per
GPU), each its own `python -m collectives.worker` started in its host's namespaces by
Mininet's popen (`Popened`, EMU_ZYGOTE=0), or on another server over SSH (`Spawned`);
`Split` drives several at once. Each stops only what it started, by pid.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from emucore.netns import NETNS_DIR

REPO = Path(__file__).resolve().parent.parent

class Popened:
    """EMU_ZYGOTE=0: every rank its own `python -m collectives.worker`, started in its
    host's namespaces by Mininet's popen (mnexec)."""

    def __init__(self, fnet: Any) -> None:
        self.fnet = fnet
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, rank: int, host: str, target: list[str], env: dict, log: Path,
              cwd: Path = REPO) -> None:
        with open(log, "ab") as out:
            self.procs[rank] = self.fnet.host(host).popen(
                [sys.executable, "-m", "collectives.worker"] + target, cwd=str(cwd), env=env,
                stdout=out, stderr=subprocess.STDOUT)

    def poll(self) -> dict[int, int | None]:
        return {r: p.poll() for r, p in self.procs.items()}

    @staticmethod
    def _end(p: subprocess.Popen) -> None:
        p.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 10.0) -> dict[int, int | None]:
        for p in self.procs.values():
            if p.poll() is None:
                self._end(p)
        for p in self.procs.values():
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return self.poll()


class Spawned(Popened):
    """Ranks on another server (emu.cluster.proxies.RemoteNode): each started by its host's `spawn` (over
    SSH, with exactly its environment), its output streamed into its log here; stopped
    by closing the session's stdin (SIGTERM there)."""

    def start(self, rank: int, host: str, target: list[str], env: dict, log: Path,
              cwd: Path = REPO) -> None:
        with open(log, "ab") as out:
            self.procs[rank] = self.fnet.host(host).spawn(
                [sys.executable, "-m", "collectives.worker"] + target, env, str(cwd), out)

    @staticmethod
    def _end(p: subprocess.Popen) -> None:
        if p.stdin is not None:
            p.stdin.close()


class Split:
    """Ranks started by several runners (Forked/Popened here, Spawned elsewhere): rank
    -> its runner; poll and stop ask each runner once."""

    def __init__(self, by_rank: dict) -> None:
        self.by_rank = by_rank

    def _runners(self) -> list:
        out: list = []
        for w in self.by_rank.values():
            if not any(w is x for x in out):
                out.append(w)
        return out

    def start(self, rank: int, *args, **kw) -> None:
        self.by_rank[rank].start(rank, *args, **kw)

    def poll(self) -> dict[int, int | None]:
        return {r: c for w in self._runners() for r, c in w.poll().items()}

    def stop(self, grace: float = 10.0) -> dict[int, int | None]:
        return {r: c for w in self._runners() for r, c in w.stop(grace).items()}


def shared_env(envs: list[dict]) -> dict[str, str]:
    """What every rank's environment shares: a zygote's own, so that what torch and the
    interpreter read at start-up has the workers' values."""
    return {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}


class Forked:
    """Every rank forked from one zygote that imported torch. The zygote runs in the
    launcher's own namespaces, not in a host's (plain Popen, not Mininet's): each child
    enters its host's network namespace itself, the zygote needs no address, its
    socketpair end passes without mnexec in between, and it goes when the launcher does
    (its connection closes, even on SIGKILL; it then gives its workers up to its GRACE
    to stop). `emu clean` finds the workers by namespace and mark, the zygote and its
    shared-memory resource tracker by the EMU_RUN mark every rank shares."""

    def __init__(self, fnet: Any, envs: list[dict], log: Path, timeout: float) -> None:
        self.fnet = fnet
        self.env = shared_env(envs)  # the zygote's
        self.zygote = Zygote(self.env, log, timeout=timeout)
        self.ranks: dict[int, int] = {}  # pid -> rank

    def start(self, rank: int, host: str, target: list[str], env: dict, log: Path,
              cwd: Path = REPO) -> None:
        ns = getattr(self.fnet.host(host), "netns", None)  # None: a test's stand-in
        pid = self.zygote.spawn(target, env, log, cwd, str(NETNS_DIR / ns) if ns else None)
        self.ranks[pid] = rank

    def poll(self) -> dict[int, int | None]:
        status = self.zygote.status()
        return {r: status.get(pid) for pid, r in self.ranks.items()}

    def stop(self, grace: float = 10.0) -> dict[int, int | None]:
        try:
            status = self.zygote.terminate(grace)
        except ZygoteError:
            status = {}
        finally:
            self.zygote.close()
        return {r: status.get(pid) for pid, r in self.ranks.items()}


class ZygoteError(RuntimeError):
    """The zygote did not start, or stopped answering."""


class Zygote:
    """The launcher's end of a worker zygote (collectives.zygote, which imports torch:
    this module must not). `env`: the zygote's environment, with WORKER_THREADS_ENV."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path = REPO,
                 timeout: float = 600.0) -> None:
        ours, theirs = socket.socketpair()
        with theirs, open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "collectives.zygote", "--fd", str(theirs.fileno())],
                cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),), start_new_session=True)
        self.pid, self.log = self.proc.pid, log
        self._sock, self._rf = ours, ours.makefile("rb")
        try:
            self.ready = self._reply(timeout)  # it has imported torch
        except ZygoteError:
            self.close()
            raise

    def _reply(self, timeout: float) -> dict:
        self._sock.settimeout(timeout)
        try:
            line = self._rf.readline()
        except OSError as e:  # TimeoutError included
            line, why = b"", f"{type(e).__name__}"
        else:
            why = "stopped"
        if not line:
            raise ZygoteError(f"zygote {self.pid}: {why}; its log:\n{tail(self.log)}")
        reply = json.loads(line)
        if "error" in reply:
            raise ZygoteError(f"zygote {self.pid}: {reply['error']}")
        return reply

    def _ask(self, req: dict, timeout: float = 60.0) -> dict:
        try:
            self._sock.sendall(json.dumps(req).encode() + b"\n")
        except OSError as e:
            raise ZygoteError(f"zygote {self.pid}: {e}; its log:\n{tail(self.log)}") from e
        return self._reply(timeout)

    def spawn(self, argv: list[str], env: dict[str, str], log: Path, cwd: Path = REPO,
              netns: str | None = None) -> int:
        """Fork `python -m collectives.worker ARGV...` with exactly `env`, output appended to
        `log`, in the network namespace file `netns` (None: the zygote's); its pid."""
        return self._ask({"op": "spawn", "netns": netns, "cwd": str(cwd), "env": env,
                          "argv": list(argv), "log": str(log)})["pid"]

    def status(self) -> dict[int, int | None]:
        """pid -> exit code (negative: the signal), None while running."""
        return {int(k): v for k, v in self._ask({"op": "status"})["status"].items()}

    def terminate(self, grace: float = 10.0) -> dict[int, int | None]:
        """SIGTERM to the running children, SIGKILL after `grace` s; the final status."""
        reply = self._ask({"op": "terminate", "grace": grace}, timeout=2 * grace + 30)
        return {int(k): v for k, v in reply["status"].items()}

    def close(self, timeout: float = 30.0) -> int:
        """Close the connection: the zygote terminates what is left and exits; its code."""
        self._rf.close()
        self._sock.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # its children get SIGTERM (PR_SET_PDEATHSIG)
            return self.proc.wait()


def tail(path: Path, n: int = 15) -> str:
    """The last `n` lines of a log (a failed rank's, the zygote's)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"
