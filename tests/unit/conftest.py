"""The unit tests' shared fixtures."""

from __future__ import annotations

import os
import sys
import time
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
    pair, its event log), and every `switch_agent.agent.Agent`'s event log: nothing left
    to the garbage collector, which reported each as a ResourceWarning in some other
    test. Only once their modules are imported: importing them here would fix
    EMU_DATAPATH's reading before a test sets it."""
    made: list = []
    for name, cls in (("traffic.nic.datapath", "Nic"), ("switch_agent.agent", "Agent")):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        klass = getattr(mod, cls)
        monkeypatch.setattr(klass, "__init__", recording(klass.__init__, made))
    yield
    for obj in made:
        if hasattr(obj, "wake_w"):  # a Nic whose __init__ got as far as the socket pair
            obj.close()
        elif getattr(obj, "log", None) is not None:  # an Agent: its event log
            obj.log.close(time.monotonic())


def recording(init, made: list):
    """`init` that first notes the object it initialises in `made`."""
    def wrapped(self, *args, **kwargs):
        made.append(self)
        init(self, *args, **kwargs)
    return wrapped
