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
