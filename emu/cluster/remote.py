"""Running commands on the servers of a servers file, and checking each one before a
fabric is spread over them (issue 17). Mininet's cluster mode reaches its servers the
same way (`mininet.examples.cluster.RemoteMixin`: `ssh -o BatchMode=yes ... sudo -E`);
emu needs root there too, so it logs in as root (or a user whose uid is 0).

`one_way_latency(server)`: half the smallest of 10 ping round trips from this machine
(a tunnel adds this to every frame of a link that crosses to that server; emu.realise.tunnel);
`latency_from(remote, address)`: the same, the pings sent by another server (emu.cluster.net
measures every pair of servers that a link joins, from one of the two).

`check(server)` answers before anything is built, each problem naming the server: it
can be reached over SSH without a password, the login is root, emu is installed at the
same place and is the same version (`python -m emu --version`, which names the git
commit), and the kernel makes VXLAN devices (tried in a throwaway namespace).
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from emu.cluster.servers import Server

__all__ = ["Remote", "check", "version", "one_way_latency", "latency_from", "parse_ping", "REPO"]

REPO = Path(__file__).resolve().parents[2]
CHECK_TIMEOUT_S = 30.0


def version(repo: Path = REPO) -> str:
    """`emu <package version> (<git commit>[+dirty])`, what `python -m emu --version` prints."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as pkg_version
    try:
        v = pkg_version("emu")
    except PackageNotFoundError:
        v = "unknown"
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit, dirty = "", ""
    return f"emu {v} ({commit or 'no git'}{'+dirty' if dirty else ''})"


@dataclass(frozen=True)
class Remote:
    """How to run a command on one server: directly when it is this machine, else
    over SSH (`ssh_options`: e.g. an identity file, a known-hosts file)."""

    server: Server
    ssh_options: tuple[str, ...] = ()

    def argv(self, cmd: list[str]) -> list[str]:
        """The command line that runs `cmd` on the server."""
        if self.server.local:
            return list(cmd)
        return self.ssh_argv(["--", shlex.join(cmd)])

    def ssh_argv(self, tail: list[str], options: tuple[str, ...] = ()) -> list[str]:
        """`ssh [our options] [options] user@address [tail]` for this server."""
        s = self.server
        opts = list(self.ssh_options) + list(options)
        if s.identity:
            opts += ["-i", s.identity, "-o", "IdentitiesOnly=yes"]
        if s.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={s.known_hosts}",
                     "-o", "StrictHostKeyChecking=accept-new"]
        return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o",
                "ConnectionAttempts=2", "-p", str(s.port),
                *opts, f"{s.user}@{s.address}", *tail]

    def run(self, cmd: list[str], timeout: float = CHECK_TIMEOUT_S) -> subprocess.CompletedProcess:
        """Run `cmd` there; never raises for a failed command (see returncode)."""
        try:
            return subprocess.run(self.argv(cmd), capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(cmd, 124, "", f"no answer in {timeout:g} s")


def _why(r: subprocess.CompletedProcess) -> str:
    lines = [x for x in (r.stderr or r.stdout or "").splitlines() if x.strip()]
    return lines[-1].strip() if lines else f"exit status {r.returncode}"


def check(remote: Remote, repo: Path = REPO, python: str | None = None) -> list[str]:
    """What keeps this server from running its part of a fabric (empty: nothing). The
    four questions (login, uid; emu there and here; VXLAN) are asked at once, one SSH
    session each: asked one after another they took 1.7-1.9 s of every `emu run
    --servers` start (issue 30); an unreachable server is named alone, as before."""
    from concurrent.futures import ThreadPoolExecutor

    s = remote.server
    who = f"server {s.name} ({s.user}@{s.address})"
    py = python or str(repo / ".venv" / "bin" / "python")
    with ThreadPoolExecutor(max_workers=4) as pool:
        uid = pool.submit(remote.run, ["id", "-u"])
        if not s.local:
            mine = pool.submit(version, repo)
            theirs = pool.submit(remote.run, ["env", "-C", str(repo), py, "-m", "emu",
                                              "--version"])
        vxlan = pool.submit(remote.run, ["unshare", "--net", "ip", "link", "add", "vxchk",
                                         "type", "vxlan", "id", "1", "dstport", "4789"])
    r = uid.result()
    if r.returncode != 0:
        return [f"{who}: unreachable over SSH: {_why(r)}"]
    out = []
    if r.stdout.strip() != "0":
        out.append(f"{who}: logged in as uid {r.stdout.strip()}, emu needs root there")
    if not s.local:
        r = theirs.result()
        if r.returncode != 0:
            out.append(f"{who}: no emu at {repo} ({_why(r)}): clone it there and run "
                       "./setup.sh")
        elif r.stdout.strip() != mine.result():
            out.append(f"{who}: {r.stdout.strip()}, here {mine.result()}: the servers must "
                       "run the same emu")
    r = vxlan.result()
    if r.returncode != 0:
        out.append(f"{who}: cannot make VXLAN devices ({_why(r)}): the kernel needs the "
                   "vxlan module")
    return out


def check_all(servers) -> list[str]:
    """`check` of every server at once (one thread each), their problems in the
    servers' order."""
    from concurrent.futures import ThreadPoolExecutor

    servers = list(servers)
    with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
        found = list(pool.map(lambda s: check(Remote(s)), servers))
    return [p for problems in found for p in problems]


def parse_ping(text: str) -> float | None:
    """The smallest round trip (seconds) of iputils ping's summary, None without one."""
    for line in text.splitlines():
        if "min/avg/max" in line and "=" in line:
            return float(line.split("=")[1].split("/")[0]) / 1e3
    return None


#: seconds between the latency pings: iputils' floor for an unprivileged user is 2 ms
#: (ping(8), -i; since iputils 20210202), root has none. 10 pings at ping's default
#: 0.2 s took 1.8 s of every `emu run --servers` start and `emu show --check`; the
#: smallest round trip of 10 does not depend on their spacing
PING_INTERVAL_S = 0.02


def ping_argv(address: str, count: int) -> list[str]:
    """The latency pings to `address` (a summary line, parse_ping reads it)."""
    return ["ping", "-n", "-q", "-c", str(count), "-i", f"{PING_INTERVAL_S:g}", "-W", "2",
            address]


def latency_from(src: Remote, address: str, count: int = 10) -> float | None:
    """Lab seconds a frame takes from server `src` to `address` one way (half the
    smallest of `count` ping round trips, the ping run on `src`); None without answer."""
    r = src.run(ping_argv(address, count), timeout=30 + count)
    rtt = parse_ping(r.stdout)
    return None if rtt is None else rtt / 2


def one_way_latency(server: Server, count: int = 10) -> float | None:
    """Lab seconds a frame takes from this machine to `server`, one way (half the
    smallest ping round trip); 0 for this machine, None when it does not answer."""
    if server.local:
        return 0.0
    try:
        r = subprocess.run(ping_argv(server.address, count), capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rtt = parse_ping(r.stdout)
    return None if rtt is None else rtt / 2
