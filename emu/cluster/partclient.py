"""The controller's end of one server's part (issue 17): `RemotePart` starts `python -m
emu.cluster.part` over SSH (emu.cluster.remote), waits for its report, sends it requests
over the session's pipes (the protocol is emu.cluster.part's), reads its clocks
(NTP-style: the sample with the shortest round trip), forwards its agents' and NICs'
control sockets here through one multiplexed SSH connection (ControlMaster, `ssh -L
local:remote`, OpenSSH's Unix-socket forwarding), and stops it by closing its stdin -
Mininet cluster mode's remote node shells, one long-lived process per server.

Every ssh client is marked with the run (`emu clean --run` finds it) and dies with this
process (PR_SET_PDEATHSIG): a kill -9 of emu leaves no session, and so no part, anywhere.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

from emu.cluster import remote
from emu.cluster.part import MARK, encode
from emu.cluster.servers import Server
from emu.realise.procs import START_TIMEOUT_ENV
from emucore.runmark import marked_env
from emucore import datapath, rtsched

log = logging.getLogger("emu.cluster.partclient")

PART_TIMEOUT_S = 180.0  #: a server's part must be up within this
#: the run's settings its processes read from the environment, handed to every part
FORWARDED_ENV = (datapath.ENV, rtsched.ENV, START_TIMEOUT_ENV)
FORWARD_TIMEOUT_S = 20.0
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _ssh_popen(argv: list[str], tag: str, **kw) -> subprocess.Popen:
    """An ssh client of run `tag`: marked EMU_RUN=<tag> (`emu clean --run` finds it)
    and sent SIGTERM when this process dies (PR_SET_PDEATHSIG), so a kill -9 of emu
    leaves no SSH session - and with it no part - on any server."""
    parent = os.getpid()

    def die_with_parent() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)

    return subprocess.Popen(argv, env=marked_env(tag), preexec_fn=die_with_parent, **kw)


class RemotePart:
    """The emu.cluster.part process of one server, reached over SSH."""

    def __init__(self, server: Server, tag: str, state_dir: Path, log_path: Path | None):
        self.run = tag  #: the run's tag here (marks our ssh clients)
        self.server = server
        self.remote = remote.Remote(server)
        self.control = state_dir / f"ssh-{server.name}"  # the multiplexed connection
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.forwarder: subprocess.Popen | None = None
        self.tag = ""  # the part's tag on its server
        self.sockets: dict[str, str] = {}
        self.files: dict[str, str] = {}  # its logs and event files, sent when it stopped
        self._lines: queue.Queue = queue.Queue()
        self._talk = threading.Lock()  # one request at a time over the session

    def ssh(self, options: tuple[str, ...] = ()) -> list[str]:
        """ssh through this server's master connection (once `forward` started it)."""
        return self.remote.ssh_argv([], ("-S", str(self.control), *options))

    def start(self, spec: dict) -> None:
        """Start the part (it builds while we go on); `ready` waits for it."""
        passed = [f"{k}={os.environ[k]}" for k in FORWARDED_ENV if os.environ.get(k)]
        cmd = ["env", "-C", str(remote.REPO), *passed,
               str(remote.REPO / ".venv" / "bin" / "python"), "-m", "emu.cluster.part"]
        err = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = _ssh_popen(self.remote.argv(cmd), self.run, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=err)
        if self.log_path:
            err.close()
        self.proc.stdin.write(encode(spec))
        self.proc.stdin.flush()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.decode(errors="replace"))
        self._lines.put(None)

    def ready(self, timeout: float = PART_TIMEOUT_S) -> None:
        """Wait for the part's report; RuntimeError naming the server otherwise."""
        deadline = time.monotonic() + timeout
        where = f"server {self.server.name} ({self.server.address})"
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{where}: its part of the fabric was not up in "
                                   f"{timeout:g} s" + self._see()) from None
            if line is None:
                raise RuntimeError(f"{where}: its part ended before it was up "
                                   f"(exit {self.proc.wait()})" + self._see())
            if line.startswith(MARK):
                msg = json.loads(line[len(MARK):])
                if "error" in msg:
                    raise RuntimeError(f"{where}: {msg['error']}")
                self.tag, self.sockets = msg["tag"], msg["sockets"]
                return

    def request(self, req: dict, timeout: float = 120.0) -> dict:
        """One request to the part (emu.cluster.part.answer); RuntimeError naming the server
        when it fails."""
        with self._talk:
            self.proc.stdin.write(encode(req))
            self.proc.stdin.flush()
            line = self._lines.get(timeout=timeout)
        if line is None or not line.startswith(MARK):
            raise RuntimeError(f"server {self.server.name}: its part stopped answering"
                               + self._see())
        reply = json.loads(line[len(MARK):])
        if "error" in reply:
            raise RuntimeError(f"server {self.server.name}: {req['cmd']}: {reply['error']}")
        return reply

    def forwards(self, op: str, pairs: list[tuple[str, str]]) -> None:
        """Add (`op` "forward") or remove ("cancel") socket forwardings local <- remote
        on the master connection."""
        if not pairs:
            return
        fwd = [x for local, far in pairs for x in ("-L", f"{local}:{far}")]
        r = subprocess.run(self.remote.ssh_argv([], ("-S", str(self.control), "-O", op, *fwd)),
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if r.returncode != 0 and op == "forward":
            raise RuntimeError(f"server {self.server.name}: forwarding sockets failed: "
                               f"{r.stderr.strip()}")

    def clock_offset(self, samples: int = 20) -> tuple[float, float, float]:
        """(seconds the server's clock is ahead of ours, the uncertainty, the same for
        CLOCK_MONOTONIC - the event logs' axis): the part's clocks asked over its
        session `samples` times (as NTP: of the sample with the shortest round trip, the
        middle is taken as the moment the server read its clocks; the uncertainty is
        half that trip)."""
        best = None
        for _ in range(samples):
            with self._talk:
                t0, m0 = time.time(), time.monotonic()
                self.proc.stdin.write(b"clock\n")
                self.proc.stdin.flush()
                line = self._lines.get(timeout=10)
                t1, m1 = time.time(), time.monotonic()
            if line is None or not line.startswith(MARK):
                raise RuntimeError(f"server {self.server.name}: its part did not tell its "
                                   "clock" + self._see())
            theirs = json.loads(line[len(MARK):])
            if best is None or t1 - t0 < best[1]:
                best = (theirs["clock"] - (t0 + t1) / 2, t1 - t0,
                        theirs["mono"] - (m0 + m1) / 2)
        assert best is not None
        return best[0], best[1] / 2, best[2]

    def _see(self) -> str:
        return f"; see {self.log_path}" if self.log_path else ""

    def forward(self, local_dir: Path) -> None:
        """The master SSH connection, forwarding each agent socket to `local_dir`."""
        fwd = []
        for sw, path in self.sockets.items():
            fwd += ["-L", f"{local_dir / (sw + '.sock')}:{path}"]
        self.forwarder = _ssh_popen(
            self.remote.ssh_argv(["-N"], ("-M", "-S", str(self.control), "-o",
                                          "ExitOnForwardFailure=yes", "-o",
                                          "StreamLocalBindUnlink=yes", *fwd)),
            self.run, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        deadline = time.monotonic() + FORWARD_TIMEOUT_S
        want = [local_dir / f"{sw}.sock" for sw in self.sockets] + [self.control]
        while not all(p.exists() for p in want):
            if self.forwarder.poll() is not None or time.monotonic() > deadline:
                why = (self.forwarder.stderr.read().decode(errors="replace").strip()
                       if self.forwarder.poll() is not None else "timed out")
                raise RuntimeError(f"server {self.server.name}: forwarding its agents' "
                                   f"control sockets failed: {why}")
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        """Close the part's stdin (it tears down), wait; then the master connection."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("server %s: its part did not stop in %g s", self.server.name,
                            timeout)
                self.proc.terminate()
                self.proc.wait(10)
            while True:  # its last words: the files it kept (emu.cluster.part)
                try:
                    line = self._lines.get(timeout=5)
                except queue.Empty:
                    break
                if line is None:
                    break
                if line.startswith(MARK) and '"files"' in line[:30]:
                    self.files = json.loads(line[len(MARK):])["files"]
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.terminate()
            try:
                self.forwarder.wait(10)
            except subprocess.TimeoutExpired:
                self.forwarder.kill()
                self.forwarder.wait()

