"""`emu run` started from another directory than the checkout (root): the run directory
lands under the caller's directory and every process (agents, NICs, dumpcap) finds its
files, because every path handed to a child process is absolute."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emu.observe.summary import validate_summary

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def emu_run(cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    """A short run (no workload, GPU NIC captures kept small) with `cwd` as directory."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-m", "emu", "run", "rail2x4", "--quiet",
                           "--pcap", "hosts", "--pcap-limit", "1", *extra],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def check_run_dir(d: Path, r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((d / "summary.json").read_text())
    validate_summary(summary)
    assert summary["verdict"] == "pass" and summary["reachable"] == 56
    for name in ("topology.json", "qos.json", "metrics.csv", "last_counters.json",
                 "agent-rail1.log", "agent-spine2.log", "pcaps/h1-nic1.pcap"):
        assert (d / name).is_file(), name
    assert "Verdict: PASS" in r.stdout


def test_default_run_dir_under_the_callers_directory(tmp_path):
    r = emu_run(tmp_path)
    runs = list((tmp_path / "runs").glob("rail2x4-*"))
    assert len(runs) == 1, r.stdout[-2000:] + r.stderr[-2000:]
    check_run_dir(runs[0], r)
    assert not list((ROOT / "runs").glob(f"*{runs[0].name}"))  # not in the checkout
    assert f"Run directory: runs/{runs[0].name}" in r.stdout


def test_relative_out_under_the_callers_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    r = emu_run(tmp_path / "sub", "--out", "../mine")
    check_run_dir(tmp_path / "mine", r)
