"""YAML files parsed once per process, with libyaml's C loader when PyYAML has it.

`load_file(path)` parses a file the first time it is asked for and again only when the
file changes (its mtime_ns, size or inode differ); every call returns a fresh copy, so a
caller may mutate what it gets without touching the cache or other callers. `Loader` is
PyYAML's `CSafeLoader` (libyaml, the same YAML 1.1 safe schema) or, without libyaml, the
pure-Python `SafeLoader` (PyYAML docs, "Installation": the LibYAML bindings).

Why: `emu lab list` built every lab variant's fabric and QoS, and each one re-read every
topology preset with the pure-Python loader (879 parses, issue 30). The copy (`thaw`)
costs a twentieth to a thirtieth of a C parse of the same file, about half of
`copy.deepcopy`; a read-only cached value would not do, as callers edit what they get.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

#: the safe loader, compiled when libyaml is there
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: path -> ((st_mtime_ns, st_size, st_ino), parsed value): one entry per file
_CACHE: dict[str, tuple[tuple[int, int, int], Any]] = {}


def parse(text: str) -> Any:
    """`yaml.safe_load(text)`, compiled when it can be."""
    return yaml.load(text, Loader=Loader)


def load_file(path: str | os.PathLike) -> Any:
    """The parsed content of a YAML file, as `yaml.safe_load(Path(path).read_text())`
    gives it, parsed at most once per version of the file. Raises what `stat`, the read
    or the parse raise (OSError, yaml.YAMLError); a failed parse is not remembered."""
    key = os.path.abspath(path)
    st = os.stat(key)
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _CACHE.get(key)
    if hit is None or hit[0] != stamp:
        hit = (stamp, parse(Path(key).read_text()))
        _CACHE[key] = hit
    return thaw(hit[1], {})


def thaw(value: Any, memo: dict[int, Any]) -> Any:
    """A copy of a parsed value: new dicts, lists and sets, the immutable scalars shared.
    A node reached twice (a YAML alias, ``*name``) is copied once, as in the parse."""
    kind = type(value)
    if kind not in (dict, list, set, tuple):
        return value                    # str, int, float, bool, None, bytes, date, datetime
    done = memo.get(id(value))
    if done is not None:
        return done
    if kind is dict:
        out = memo[id(value)] = {}
        for k, v in value.items():
            out[k] = thaw(v, memo)
        return out
    if kind is list:
        out = memo[id(value)] = []
        out.extend(thaw(v, memo) for v in value)
        return out
    if kind is tuple:                   # the (key, value) pairs of !!omap and !!pairs
        out = memo[id(value)] = tuple(thaw(v, memo) for v in value)
        return out
    out = memo[id(value)] = set(value)  # members are hashable, hence immutable scalars
    return out


def clear() -> None:
    """Forget every parsed file (tests)."""
    _CACHE.clear()
