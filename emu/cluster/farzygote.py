"""A job's workers on another server forked from one zygote there (issue 30), as the
ranks here are (collectives.runners.Forked, collectives.zygote): torch is imported once
per server, not once per rank.

Why: each rank on another server was its own `python -m collectives.worker` started over
SSH (collectives.runners.Spawned), each importing torch (~3 CPU-seconds), four at once on
the two cores of the tests' machine: rail2x4's ranks on server b printed their first
line 9.4-10.9 s after the job started, those forked here 2.8 s after
(tests/netns/test_cluster.py, the failing-worker test, 2026-11-28 16:48 UTC).

    python -m emu.cluster.farzygote     (on the other server, over its part's SSH connection)

`relay` (that command) starts `python -m collectives.zygote` on one end of a socketpair
- the zygote speaks over a socket, an SSH session's stdin and stdout are pipes - and
copies lines between the session and the zygote both ways. When the session's stdin
closes (the launcher closed it, or died and sshd closed the session) the relay closes
the zygote's connection: the zygote terminates its children and exits, then the relay.

`FarZygote` is the launcher's end: collectives.runners.Zygote whose connection is the ssh
client's stdin and stdout (one end of a socketpair here). `FarForked` is
collectives.runners.Forked over it, for the ranks of one server: the same environment per
rank, results written where they run (collectives.launch fetches them); each rank's log
is written there and streamed into its log here as it grows (`tail --pid=<rank> -F`
over the same SSH connection, ending once the rank has ended and all it wrote is here).
The relay and the zygote carry the part's run mark (EMU_RUN, emucore.runmark), so `emu
clean` there finds them; the ranks carry the job's environment as the ones here do.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from collectives.runners import REPO, Forked, Zygote, ZygoteError
from emu.cluster.partclient import _ssh_popen
from emucore.netns import NETNS_DIR
from emucore.runmark import RUN_ENV

TAIL_WAIT_S = 10.0  #: seconds a rank's log stream may take to end after the rank did
TAIL_POLL_S = 0.2   #: tail -s: how often it looks whether the rank has ended


def relay_argv(env: dict[str, str], part_tag: str) -> list[str]:
    """The command, run on the other server, that starts the relay with exactly `env`
    (the zygote's: what all its ranks share) but the part's run mark."""
    env = {**env, RUN_ENV: part_tag}
    return ["env", "-i", "-C", str(REPO), *(f"{k}={v}" for k, v in env.items()),
            sys.executable, "-m", "emu.cluster.farzygote"]


def tail_argv(pid: int, path: str) -> list[str]:
    """Stream `path` from its first byte until process `pid` has ended and all of the
    file is read (coreutils tail: --pid ends it only after a read that found nothing)."""
    return ["tail", "-c", "+1", "-s", f"{TAIL_POLL_S:g}", f"--pid={pid}", "-F", path]


class FarZygote(Zygote):
    """collectives.runners.Zygote on another server, reached through its part's SSH
    connection (`part`: emu.cluster.partclient.RemotePart)."""

    def __init__(self, part: Any, env: dict[str, str], log: Path) -> None:
        # pylint: disable=super-init-not-called
        # Started, not waited for (`wait`): its ssh client dies with the thread that
        # started it (PR_SET_PDEATHSIG is the thread's), so start it in the launcher's
        # thread and wait for it while the zygote here imports torch in another.
        ours, theirs = socket.socketpair()
        cmd = shlex.join(relay_argv(env, part.tag))
        with theirs, open(log, "ab") as out:
            self.proc = _ssh_popen(part.ssh() + ["--", cmd], part.run, stdin=theirs,
                                   stdout=theirs, stderr=out)
        self.pid, self.log = self.proc.pid, log
        self._sock, self._rf = ours, ours.makefile("rb")
        self.ready: dict = {}

    def wait(self, timeout: float = 600.0) -> None:
        """Until the zygote there has imported torch; ZygoteError (and closed) if not."""
        try:
            self.ready = self._reply(timeout)
        except ZygoteError:
            self.close()
            raise


class FarForked(Forked):
    """The ranks of one other server forked from its FarZygote; each rank's log there is
    `far_dir`/rank<R>.log, streamed into the launcher's log file for it."""

    def __init__(self, fnet: Any, part: Any, envs: list[dict], log: Path,
                 far_dir: str) -> None:  # pylint: disable=super-init-not-called
        shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
        self.fnet, self.part, self.far_dir = fnet, part, far_dir
        self.zygote = FarZygote(part, shared, log)  # started; `zygote.wait()` before `start`
        self.ranks: dict[int, int] = {}  # pid -> rank
        self.tails: list[subprocess.Popen] = []

    def start(self, rank: int, host: str, target: list[str], env: dict, log: Path,
              cwd: Path = REPO) -> None:
        far_log = f"{self.far_dir}/{Path(log).name}"
        ns = self.fnet.host(host).netns  # None: a test's stand-in
        pid = self.zygote.spawn(target, env, Path(far_log), cwd,
                                str(NETNS_DIR / ns) if ns else None)
        self.ranks[pid] = rank
        with open(log, "ab") as out:
            self.tails.append(_ssh_popen(
                self.part.ssh() + ["--", shlex.join(tail_argv(pid, far_log))], self.part.run,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL))

    def stop(self, grace: float = 10.0) -> dict[int, int | None]:
        try:
            return super().stop(grace)
        finally:  # every rank has ended: each stream ends after its last bytes
            for t in self.tails:
                try:
                    t.wait(TAIL_WAIT_S)
                except subprocess.TimeoutExpired:
                    t.terminate()  # ours, by its pid
                    t.wait()


def relay() -> int:
    """The other server's end: the zygote on a socketpair, lines copied both ways; its
    exit status once the session's stdin closed and the zygote ended."""
    ours, theirs = socket.socketpair()
    with theirs:  # the zygote's own output goes to our stderr (its log there)
        proc = subprocess.Popen([sys.executable, "-m", "collectives.zygote", "--fd",
                                 str(theirs.fileno())], cwd=str(REPO), stdin=subprocess.DEVNULL,
                                stdout=2, stderr=2, pass_fds=(theirs.fileno(),),
                                start_new_session=True)

    def back() -> None:  # the zygote's replies -> the session
        out = os.fdopen(1, "wb", buffering=0)
        try:
            for line in ours.makefile("rb"):
                out.write(line)
        except OSError:  # the session is gone
            pass

    t = threading.Thread(target=back, daemon=True)
    t.start()
    try:
        for line in sys.stdin.buffer:
            ours.sendall(line)
    except OSError:  # the zygote is gone
        pass
    finally:
        ours.shutdown(socket.SHUT_RDWR)  # the zygote sees its connection close
        code = proc.wait()
        t.join(5)
        ours.close()
    return code


if __name__ == "__main__":
    sys.exit(relay())
