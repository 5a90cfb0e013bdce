"""What an emu run left behind, found by its marks (thin I/O over /proc, /dev/shm and
the run's state directory; issue 14: `kill -9` of `emu run` in any phase, then
`emu clean`).

A process belongs to run `tag` when it lives in one of the run's namespaces (found by
the namespace's inode) or carries ``EMU_RUN=<tag>`` in the environment it was started
with (`emucore.runmark`: the Mininet shells and everything started in a node, the worker
zygote outside every host namespace, its workers). A shared-memory segment belongs to
it when its name is ``emu-<tag>-<kind>-...``. Nothing else is ever selected: a process
without the mark outside the run's namespaces, a segment named otherwise, another
run's. `emu.realise.nsutil.clean` ends and removes what these functions find.

Every function takes the directories it reads (`Places`), so the selection is tested
on directories of fake entries, without root (tests/unit/test_clean.py).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from emucore.netns import NETNS_DIR
from emucore.runmark import shm_tag, tag_of_environ

STATE_DIR = Path("/run/emu")  #: a run's state: /run/emu/<tag>/ (emu.realise.nsutil)
PROC_DIR = Path("/proc")
SHM_DIR = Path("/dev/shm")  #: POSIX shared memory: shm_open(3) names are files here


@dataclass(frozen=True)
class Places:
    """Where runs and their leftovers are looked for; the real places by default."""

    proc: Path = PROC_DIR
    shm: Path = SHM_DIR
    state: Path = STATE_DIR
    netns: Path = NETNS_DIR


def _pids(proc: Path) -> list[int]:
    try:
        return sorted(int(d.name) for d in proc.iterdir() if d.name.isdigit())
    except FileNotFoundError:
        return []


def ns_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a namespace file (a name under /run/netns, /proc/PID/ns/net),
    None if it is gone."""
    try:
        st = os.stat(path)
    except OSError:  # gone, a zombie's (no namespaces any more), not ours to see
        return None
    return st.st_dev, st.st_ino


def ns_pids(ids: set[tuple[int, int]], proc: Path = PROC_DIR) -> list[int]:
    """Processes whose network namespace is one of `ids` (`ns_id` of the names)."""
    out = []
    for pid in _pids(proc):
        if ids and ns_id(proc / str(pid) / "ns" / "net") in ids:
            out.append(pid)
    return out


def marked_pids(proc: Path = PROC_DIR) -> dict[str, list[int]]:
    """Run tag -> the processes started with EMU_RUN=<tag> (zombies and kernel threads
    have no environment, and processes that went meanwhile are skipped)."""
    out: dict[str, list[int]] = {}
    for pid in _pids(proc):
        try:
            block = (proc / str(pid) / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        tag = tag_of_environ(block)
        if tag is not None:
            out.setdefault(tag, []).append(pid)
    return out


def run_pids(tag: str, ids: set[tuple[int, int]], proc: Path = PROC_DIR) -> list[int]:
    """The processes of run `tag`: in its namespaces (`ids`) or marked with its tag."""
    return sorted(set(ns_pids(ids, proc)) | set(marked_pids(proc).get(tag, [])))


def proc_stat(pid: int, proc: Path = PROC_DIR) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process from /proc/PID/stat, None if it is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command may hold spaces and ')'
    return fields[0], int(fields[1])


def lineage(pid: int, proc: Path = PROC_DIR) -> set[int]:
    """`pid` and its ancestors: a cleaner never ends itself or what it runs under."""
    out = set()
    while pid > 0 and pid not in out:
        out.add(pid)
        st = proc_stat(pid, proc)
        if st is None:
            break
        pid = st[1]
    return out


def shm_segments(shm: Path = SHM_DIR) -> dict[str, list[str]]:
    """Run tag -> names of its shared-memory segments (``emu-<tag>-<kind>-...``)."""
    out: dict[str, list[str]] = {}
    try:
        names = sorted(p.name for p in shm.iterdir())
    except FileNotFoundError:
        return out
    for name in names:
        tag = shm_tag(name)
        if tag is not None:
            out.setdefault(tag, []).append(name)
    return out


def remove_state(directory: Path) -> int:
    """Remove a run's state directory and everything in it; the number of Unix sockets
    it held (agents' and NICs' control sockets)."""
    sockets = 0
    if not directory.is_dir() or directory.is_symlink():
        return sockets
    for root, dirs, files in os.walk(directory, topdown=False):
        for name in files:
            path = Path(root, name)
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    sockets += 1
                path.unlink()
            except FileNotFoundError:
                pass
        for name in dirs:
            path = Path(root, name)
            try:
                if path.is_symlink():
                    path.unlink()
                else:
                    path.rmdir()
            except FileNotFoundError:
                pass
    try:
        directory.rmdir()
    except FileNotFoundError:
        pass
    return sockets
