"""Network-namespace plumbing shared by the fabric builder and `emu clean` (thin I/O).

Every namespace a run makes is named ``emu-<tag>-<node>`` (bind-mounted under
/run/netns like `ip netns add` does, so `ip netns exec` and pyroute2 can reach it), and
the run's state lives in /run/emu/<tag>/. `clean` removes exactly those: it only ever
touches namespaces whose names match the pattern, and only processes living inside them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import signal
import time
from pathlib import Path

from fabric.netns import NETNS_DIR, enter, setns

log = logging.getLogger("emu.nsutil")

STATE_DIR = Path("/run/emu")
NS_PATTERN = re.compile(r"^emu-([0-9a-f]{4})-([A-Za-z0-9_]+)$")


def ns_name(tag: str, node: str) -> str:
    """The namespace name of a node in run `tag`."""
    return f"emu-{tag}-{node}"


def new_tag() -> str:
    """A fresh 4-hex-digit run tag not used by a present namespace or run."""
    used = {NS_PATTERN.match(n).group(1) for n in emu_namespaces()} | set(run_states())
    while True:
        t = secrets.token_hex(2)
        if t not in used:
            return t


def emu_namespaces(tag: str | None = None) -> list[str]:
    """Names of emu namespaces present (of one run, or all)."""
    if not NETNS_DIR.is_dir():
        return []
    out = []
    for p in sorted(NETNS_DIR.iterdir()):
        m = NS_PATTERN.match(p.name)
        if m and (tag is None or m.group(1) == tag):
            out.append(p.name)
    return out


def attach(name: str, pid: int) -> None:
    """Give the network namespace of `pid` a name (bind mount under /run/netns)."""
    from pyroute2 import netns as pr_netns  # slow to import: only when a run builds

    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    pr_netns.attach(name, pid)


def remove(name: str) -> None:
    """Unmount and remove a named namespace (only emu's, by pattern)."""
    if not NS_PATTERN.match(name):
        raise ValueError(f"refusing to remove non-emu namespace {name!r}")
    from pyroute2 import netns as pr_netns  # slow to import: only when something is removed

    try:
        pr_netns.remove(name)
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def in_netns(name: str):
    """Run the calling thread inside namespace `name` (never creates one)."""
    saved = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        enter(NETNS_DIR / name)
        yield
    finally:
        setns(saved)
        os.close(saved)


def sysctl(key: str, value: str | int) -> None:
    """Write a sysctl of the current thread's namespace (call inside `in_netns`)."""
    Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")


def ns_inode(name: str) -> int | None:
    """Inode of a named namespace (identifies its processes)."""
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except FileNotFoundError:
        return None


def pids_in(names: list[str]) -> list[int]:
    """Processes whose network namespace is one of `names`."""
    inodes = {ns_inode(n) for n in names} - {None}
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.stat(d / "ns" / "net").st_ino in inodes:
                out.append(int(d.name))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return out


def kill_pids(pids: list[int], grace: float = 2.0) -> None:
    """SIGTERM, then SIGKILL whatever is left after `grace` seconds."""
    me = os.getpid()
    pids = [p for p in pids if p != me]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if alive(p)]
        time.sleep(0.05)
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child still "exists"; treat it as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def write_state(tag: str, state: dict) -> Path:
    """Record a run's state (/run/emu/<tag>/state.json)."""
    d = STATE_DIR / tag
    d.mkdir(parents=True, exist_ok=True)
    path = d / "state.json"
    path.write_text(json.dumps(state, indent=1))
    return path


def run_states() -> dict[str, dict]:
    """tag -> recorded state of every run known under /run/emu."""
    out = {}
    if STATE_DIR.is_dir():
        for d in STATE_DIR.iterdir():
            f = d / "state.json"
            if re.fullmatch(r"[0-9a-f]{4}", d.name) and f.is_file():
                try:
                    out[d.name] = json.loads(f.read_text())
                except ValueError:
                    out[d.name] = {}
    return out


def clean(tag: str | None = None, include_live: bool = False) -> dict[str, list]:
    """Remove emu's namespaces, their processes and run state; returns what was removed.

    Runs whose orchestrator is still alive are skipped unless `include_live`.
    """
    states = run_states()
    tags = {NS_PATTERN.match(n).group(1) for n in emu_namespaces(tag)} | (
        set(states) if tag is None else ({tag} & set(states)))
    removed: dict[str, list] = {"runs": [], "namespaces": [], "processes": [], "skipped": []}
    for t in sorted(tags):
        owner = states.get(t, {}).get("pid")
        if owner and owner != os.getpid() and alive(owner) and not include_live:
            removed["skipped"].append(t)
            continue
        names = emu_namespaces(t)
        pids = pids_in(names)
        kill_pids(pids)
        for n in names:
            remove(n)
        d = STATE_DIR / t
        if d.is_dir():
            for f in d.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            with contextlib.suppress(OSError):
                d.rmdir()
        removed["runs"].append(t)
        removed["namespaces"] += names
        removed["processes"] += pids
    return removed
