"""The field checks every part of a lab file shares (emu.lab.schema, emu.lab.variant):
a ValueError names the field, `flows[2].start: ...` (docs/CONVENTIONS.md)."""

from __future__ import annotations

import copy
from typing import Any


def need(cond: bool, where: str, msg: str) -> None:
    """ValueError "where: msg" unless `cond`."""
    if not cond:
        raise ValueError(f"{where}: {msg}")


def str_list(v: Any, where: str) -> list[str]:
    """A string or a list of strings as a list (None: empty)."""
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    need(isinstance(v, list) and all(isinstance(x, str) for x in v), where,
         f"a list of strings, got {v!r}")
    return list(v)


def merge(base: dict, over: dict) -> dict:
    """`over` merged into a copy of `base` (mappings recursively; keys compared as text)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        key = next((b for b in out if str(b) == str(k)), k)
        if isinstance(v, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], v)
        else:
            out[key] = copy.deepcopy(v)
    return out
