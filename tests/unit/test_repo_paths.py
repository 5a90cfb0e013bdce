"""The modules that find the checkout from their own file find it (a module moved one
level deeper once kept pointing one level short: emu/realise/procs.py, emu/cluster/remote.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectives import runners
from emu.cluster import remote
from emu.lab import command, schema
from emu.realise import procs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", [procs.REPO, remote.REPO, runners.REPO],
                         ids=["procs", "remote", "runners"])
def test_repo_constants_name_the_checkout(path):
    assert path == ROOT and (path / "setup.py").is_file()


def test_lab_paths_are_inside_the_checkout():
    assert schema.LAB_DIR == ROOT / "labs" and command.RESULTS == ROOT / "docs" / "LAB_RESULTS.md"


def test_start_timeout_comes_from_the_environment(monkeypatch):
    from emu.realise import procs
    monkeypatch.delenv(procs.START_TIMEOUT_ENV, raising=False)
    assert procs.start_timeout() == procs.START_TIMEOUT_S == 20.0
    monkeypatch.setenv(procs.START_TIMEOUT_ENV, "240")
    assert procs.start_timeout() == 240.0
    for bad in ("0", "-3", "soon", "inf", "nan"):
        monkeypatch.setenv(procs.START_TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=f"EMU_START_TIMEOUT: seconds > 0, got '{bad}'"):
            procs.start_timeout()


@pytest.mark.parametrize("raw, factor", [(None, 1.0), ("20", 1.0), ("10", 1.0), ("300", 15.0)])
def test_slowness_is_the_start_timeout_over_its_default_at_least_one(monkeypatch, raw, factor):
    from emu.realise import procs
    monkeypatch.delenv(procs.START_TIMEOUT_ENV, raising=False)
    if raw is not None:
        monkeypatch.setenv(procs.START_TIMEOUT_ENV, raw)
    assert procs.slowness() == factor


def test_a_process_not_ready_names_the_knob():
    from emu.realise import procs

    class Alive:
        def poll(self):
            return None

    with pytest.raises(TimeoutError, match=r"switch agent rail1 not ready after 0 s; see x "
                                           r"\(a slow machine may need more: EMU_START_TIMEOUT"):
        procs.wait_ready("switch agent rail1", Alive(), lambda: {}, 0.0, 0.0, hint="; see x")
