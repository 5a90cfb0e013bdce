"""Atomic files: written to ``<path>.tmp`` and renamed over ``<path>``, so a reader
(`emu run` collecting the workers' results, a generated document) sees the whole file or
none of it."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["write_json_atomic", "write_text_atomic"]


def write_json_atomic(path: str, obj: Any) -> None:
    """Write `obj` as JSON to `path` in one rename (os.replace is atomic on POSIX)."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` in one rename (os.replace is atomic on POSIX)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
