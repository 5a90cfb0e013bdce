"""The marks that tie a process or a shared-memory segment to the emu run that made it
(issue 14: after `kill -9` of `emu run`, `emu clean` removes exactly that run's
leftovers, by pid and by name, and nothing of anybody else's).

A run is named by its tag, 4 hex digits (`emu.realise.nsutil`: namespaces ``emu-<tag>-<node>``,
state in /run/emu/<tag>/). A namespace tells which processes live in it; two marks say
the rest, where a process may live outside the run's namespaces (the worker zygote) or
a segment outlive every process:

* processes: the environment entry ``EMU_RUN=<tag>``, given to everything a run starts
  (the Mininet shells and every process started in a node, `emu.realise.nodes`; the worker
  zygote and its workers, `collectives.launch`) and read back from
  /proc/<pid>/environ (the environment the process was started with);
* POSIX shared memory (/dev/shm): names ``emu-<tag>-<kind>-<unique>``: ``mr`` for the
  memory a worker or the orchestrator registers with a NIC (`traffic.nic.client`; the
  NIC's configuration names its run), ``ch`` for a same-host channel's landing memory
  (`collectives.channel`, named by the communicator).

Pure, stdlib only.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping

RUN_ENV = "EMU_RUN"  #: the environment variable carrying the run tag
TAG_PATTERN = "[0-9a-f]{4}"  #: a run tag (emu.realise.nsutil.new_tag draws them)
_TAG = re.compile(rf"{TAG_PATTERN}")
SHM_PATTERN = re.compile(rf"emu-({TAG_PATTERN})-[a-z]+-[A-Za-z0-9_.-]+")
_ENTRY = f"{RUN_ENV}=".encode()


def is_tag(text: object) -> bool:
    """True for a run tag (4 lower-case hex digits)."""
    return isinstance(text, str) and _TAG.fullmatch(text) is not None


def marked_env(tag: str, env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """A process environment carrying ``EMU_RUN=<tag>``: `env` (this process's when None)
    with the entry set; `env` unchanged when `tag` is not a run tag (no run to name)."""
    if not is_tag(tag):
        return None if env is None else dict(env)
    return {**(os.environ if env is None else env), RUN_ENV: tag}


def tag_of_environ(block: bytes) -> str | None:
    """The run tag of an /proc/<pid>/environ block (NUL-separated KEY=VALUE entries):
    the value of its EMU_RUN entry when that is a run tag, else None."""
    for entry in block.split(b"\0"):
        if entry.startswith(_ENTRY):
            value = entry[len(_ENTRY):].decode("ascii", "replace")
            return value if is_tag(value) else None
    return None


def shm_name(tag: str, kind: str, unique: str | None = None) -> str | None:
    """The shared-memory name ``emu-<tag>-<kind>-<unique>`` (`unique` random when None);
    None when `tag` is not a run tag (outside a run: Python names the segment)."""
    if not is_tag(tag):
        return None
    if not re.fullmatch(r"[a-z]+", kind):
        raise ValueError(f"kind: lower-case letters, got {kind!r}")
    name = f"emu-{tag}-{kind}-{secrets.token_hex(4) if unique is None else unique}"
    if SHM_PATTERN.fullmatch(name) is None:
        raise ValueError(f"unique: letters, digits, '_', '.', '-', got {unique!r}")
    return name


def shm_tag(name: str) -> str | None:
    """The run tag of a shared-memory name made by `shm_name`, None for any other name."""
    m = SHM_PATTERN.fullmatch(name)
    return m.group(1) if m else None
