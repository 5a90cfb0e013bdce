"""What a whole-run test may ask of `emu run`'s exit: its checks passed.

The fidelity guard may find that a loaded machine fell behind the model (exit 3,
verdict "fidelity_lost", checks_passed kept): that verdict is a measurement of the
machine, tested on its own in tests/netns/test_guard.py. The tests here check what a run
does - bytes, paths, files, frames - so they accept it, and nothing else.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from emu.run.report import EXIT_FIDELITY_LOST, EXIT_PASS


def assert_checks_passed(r: subprocess.CompletedProcess, out: Path | None = None) -> dict:
    """Exit 0, or 3 with every check passed; returns summary.json when `out` is given."""
    tail = r.stdout[-4000:] + r.stderr[-4000:]
    assert r.returncode in (EXIT_PASS, EXIT_FIDELITY_LOST), tail
    summary = json.loads((Path(out) / "summary.json").read_text()) if out is not None else {}
    if r.returncode == EXIT_FIDELITY_LOST:
        assert "Fidelity: LOST" in r.stdout, tail
        if summary:
            assert summary["verdict"] == "fidelity_lost" and summary["checks_passed"], tail
    return summary


def passed(summary: dict) -> bool:
    """The run's checks passed, whatever the guard said."""
    return summary["verdict"] == "pass" or (summary["verdict"] == "fidelity_lost"
                                            and summary["checks_passed"])
