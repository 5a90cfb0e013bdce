"""The unit tests' shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def asan_dir(tmp_path_factory) -> Path:
    """One directory for the run's ASan + UBSan builds (`emucore.cbuild.build(...,
    sanitize=True, out_dir=asan_dir)`), shared by the xdist workers of one run (their base
    temp's parent), so a module several tests load sanitized is compiled once; cbuild
    serialises builds into it per module and skips one whose stamp matches."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "asan"
    out.mkdir(exist_ok=True)
    return out


@pytest.fixture(autouse=True)
def closes_nics():
    """The NICs tests/unit/test_nic.py's `_pair` made during a test are closed after it
    (their wake-up socket pairs: nothing left to the garbage collector)."""
    yield
    import sys
    mod = sys.modules.get("tests.unit.test_nic")
    made = getattr(mod, "MADE", None) if mod is not None else None
    while made:
        made.pop().close()
