"""Network-namespace plumbing shared by the fabric builder and `emu clean` (thin I/O).

Every namespace a run makes is named ``emu-<tag>-<node>`` (bind-mounted under
/run/netns like `ip netns add` does, so `ip netns exec` and pyroute2 can reach it), and
the run's state lives in /run/emu/<tag>/. `clean` removes exactly what a run left, also
after a `kill -9` of `emu run` in any phase (issue 14): the processes in its namespaces
and those marked with its tag wherever they live (EMU_RUN=<tag>, `emucore.runmark`; the
worker zygote lives in the root namespace), then its namespaces, its shared memory
(/dev/shm/emu-<tag>-*) and its state directory with the control sockets in it. It only
ever touches namespaces whose names match the pattern and processes and segments
`emu.realise.leftovers` attributes to the run, never the cleaner or what it runs under.
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
from collections.abc import Callable
from pathlib import Path

from emu.realise import leftovers
from emu.realise.leftovers import PROC_DIR, STATE_DIR, Places, ns_id
from emucore.netns import NETNS_DIR, enter, setns
from emucore.runmark import TAG_PATTERN

log = logging.getLogger("emu.realise.nsutil")

NS_PATTERN = re.compile(rf"^emu-({TAG_PATTERN})-([A-Za-z0-9_]+)$")
KILL_ROUNDS = 3  #: select-and-end passes per run (a process may fork while we end it)


def ns_name(tag: str, node: str) -> str:
    """The namespace name of a node in run `tag`."""
    return f"emu-{tag}-{node}"


def new_tag(places: Places = Places()) -> str:
    """A fresh 4-hex-digit run tag not used by a present namespace, run state, marked
    process or shared-memory segment."""
    used = ({NS_PATTERN.match(n).group(1) for n in emu_namespaces(netns_dir=places.netns)}
            | set(run_states(places.state)) | set(leftovers.marked_pids(places.proc))
            | set(leftovers.shm_segments(places.shm)))
    while True:
        t = secrets.token_hex(2)
        if t not in used:
            return t


def emu_namespaces(tag: str | None = None, netns_dir: Path = NETNS_DIR) -> list[str]:
    """Names of emu namespaces present (of one run, or all)."""
    if not netns_dir.is_dir():
        return []
    out = []
    for p in sorted(netns_dir.iterdir()):
        m = NS_PATTERN.match(p.name)
        if m and (tag is None or m.group(1) == tag):
            out.append(p.name)
    return out


def attach(name: str, pid: int) -> None:
    """Give the network namespace of `pid` a name (bind mount under /run/netns)."""
    from pyroute2 import netns as pr_netns  # slow to import: only when a run builds

    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    pr_netns.attach(name, pid)


def remove(name: str, netns_dir: Path = NETNS_DIR) -> None:
    """Unmount and remove a named namespace (only emu's, by pattern)."""
    if not NS_PATTERN.match(name):
        raise ValueError(f"refusing to remove non-emu namespace {name!r}")
    from pyroute2 import netns as pr_netns  # slow to import: only when something is removed

    try:
        pr_netns.remove(str(netns_dir / name))
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


def pids_in(names: list[str], netns_dir: Path = NETNS_DIR, proc: Path = PROC_DIR) -> list[int]:
    """Processes whose network namespace is one of `names`."""
    return leftovers.ns_pids({ns_id(netns_dir / n) for n in names} - {None}, proc)


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


def alive(pid: int, proc: Path = PROC_DIR) -> bool:
    """True if the process exists and is not a zombie."""
    st = leftovers.proc_stat(pid, proc) if pid > 0 else None
    return st is not None and st[0] not in ("Z", "X")  # a zombie child is gone


def write_state(tag: str, state: dict) -> Path:
    """Record a run's state (/run/emu/<tag>/state.json)."""
    d = STATE_DIR / tag
    d.mkdir(parents=True, exist_ok=True)
    path = d / "state.json"
    path.write_text(json.dumps(state, indent=1))
    return path


def run_states(state_dir: Path = STATE_DIR) -> dict[str, dict]:
    """tag -> recorded state of every run known under /run/emu."""
    out = {}
    if state_dir.is_dir():
        for d in state_dir.iterdir():
            f = d / "state.json"
            if re.fullmatch(TAG_PATTERN, d.name) and f.is_file():
                try:
                    out[d.name] = json.loads(f.read_text())
                except ValueError:
                    out[d.name] = {}
    return out


KINDS = ("namespaces", "processes", "shm", "sockets")  #: what `clean` counts per run


def clean(tag: str | None = None, include_live: bool = False, places: Places = Places(),
          end: Callable[[list[int]], None] | None = None) -> dict:
    """Remove what emu runs left behind (run `tag`, or every run found); returns what was
    removed: {"runs", "skipped", "namespaces", "processes", "shm" (segment names),
    "sockets" (count), "by_run": {tag: {kind: count}}}.

    A run is found by its namespaces, its state directory, the processes marked with its
    tag and its shared-memory segments; its processes are ended first (`end`, default
    `kill_pids`), then its namespaces, segments and state are removed. Runs whose
    orchestrator is still alive are skipped unless `include_live`.
    """
    end = kill_pids if end is None else end
    me = os.getpid()
    states = run_states(places.state)
    found = ({NS_PATTERN.match(n).group(1) for n in emu_namespaces(netns_dir=places.netns)}
             | set(states) | set(leftovers.marked_pids(places.proc))
             | set(leftovers.shm_segments(places.shm)))
    owners = {t: st.get("pid") for t, st in states.items()
              if isinstance(st.get("pid"), int) and alive(st["pid"], places.proc)}
    # never the cleaner, what it runs under, or a live run's orchestrator
    keep = leftovers.lineage(me, places.proc) | set(owners.values())
    removed: dict = {"runs": [], "skipped": [], "namespaces": [], "processes": [], "shm": [],
                     "sockets": 0, "by_run": {}}
    for t in sorted(found if tag is None else found & {tag}):
        if t in owners and owners[t] != me and not include_live:
            removed["skipped"].append(t)
            continue
        names = emu_namespaces(t, places.netns)
        ids = {ns_id(places.netns / n) for n in names} - {None}
        pids: list[int] = []
        for _ in range(KILL_ROUNDS):
            batch = [p for p in leftovers.run_pids(t, ids, places.proc) if p not in keep]
            if not batch:
                break
            end(batch)
            pids += [p for p in batch if p not in pids]
        for n in names:
            remove(n, places.netns)
        segments = []
        for name in leftovers.shm_segments(places.shm).get(t, []):
            with contextlib.suppress(FileNotFoundError):
                (places.shm / name).unlink()
                segments.append(name)
        sockets = leftovers.remove_state(places.state / t)
        removed["runs"].append(t)
        removed["namespaces"] += names
        removed["processes"] += pids
        removed["shm"] += segments
        removed["sockets"] += sockets
        removed["by_run"][t] = dict(zip(KINDS, (len(names), len(pids), len(segments), sockets)))
        log.info("cleaned run %s: %s", t, removed["by_run"][t])
    return removed
