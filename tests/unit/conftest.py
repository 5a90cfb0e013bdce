"""The unit tests' shared fixtures."""

from __future__ import annotations

import os
import sys
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
def closes_nics(monkeypatch):
    """Every `traffic.nic.datapath.Nic` a test made is closed after it (its wake-up socket
    pair, its event log: nothing left to the garbage collector, which reported each as a
    ResourceWarning in some other test). Only once the module is imported: importing it
    here would fix EMU_DATAPATH's reading before a test sets it."""
    made = []
    mod = sys.modules.get("traffic.nic.datapath")
    if mod is not None:
        init = mod.Nic.__init__

        def recording(self, *args, **kwargs):
            made.append(self)
            init(self, *args, **kwargs)

        monkeypatch.setattr(mod.Nic, "__init__", recording)
    yield
    for n in made:
        if hasattr(n, "wake_w"):  # its __init__ got as far as the socket pair
            n.close()
