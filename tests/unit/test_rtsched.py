"""emucore.rtsched: the data path's scheduling - the modes, what `auto` resolves to for a
run with and without PyTorch workers, and `apply` in a process of its own (SCHED_RR at
PRIORITY as root, read back; `normal` undoing an inherited real-time policy), and emu's
run options and header going by it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emu.run.options import RunOptions, has_workers
from emucore import rtsched


def in_child(code: str, env: dict[str, str] | None = None) -> str:
    """What `code` prints in a fresh interpreter (the test process keeps its policy)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, timeout=60, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("asked,workers,got", [
    ("auto", False, "rr"), ("auto", True, "normal"), ("rr", True, "rr"),
    ("rr", False, "rr"), ("normal", False, "normal"), ("normal", True, "normal")])
def test_auto_is_rr_only_without_workers(asked, workers, got):
    assert rtsched.resolve(asked, workers) == got


def test_a_bad_mode_names_the_variable(monkeypatch):
    monkeypatch.setenv(rtsched.ENV, "fast")
    with pytest.raises(ValueError, match="EMU_SCHED: 'fast' is not one of auto, rr, normal"):
        rtsched.mode()
    monkeypatch.delenv(rtsched.ENV)
    assert rtsched.mode() == "auto"


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_RR needs CAP_SYS_NICE (root)")
def test_rr_is_applied_read_back_and_inherited_by_threads():
    code = ("import threading\nfrom emucore import rtsched\n"
            "got = rtsched.apply()\nseen = []\n"
            "t = threading.Thread(target=lambda: seen.append(rtsched.current()))\n"
            "t.start(); t.join(); print(got, '|', seen[0])")
    assert in_child(code, {rtsched.ENV: "rr"}) == f"rr {rtsched.PRIORITY} | rr {rtsched.PRIORITY}"


def test_normal_and_unresolved_auto_run_normal_even_under_an_rr_parent():
    """An agent started outside emu (auto, nothing resolved) is an ordinary process, and
    `normal` undoes a real-time policy inherited from its parent."""
    plain = "from emucore import rtsched\nprint(rtsched.apply())"
    assert in_child(plain, {rtsched.ENV: "auto"}) == "normal"
    if os.geteuid() == 0:
        code = ("import os\nfrom emucore import rtsched\n"
                "os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(5))\n"
                "before = rtsched.current()\nprint(before, '|', rtsched.apply('normal'))")
        assert in_child(code) == "rr 5 | normal"


def test_a_refused_rr_says_why():
    """Without CAP_SYS_NICE (a process that dropped it) the kernel refuses SCHED_RR: the
    process runs normal and its outcome names the reason."""
    code = ("import os\nfrom emucore import rtsched\n"
            "os.setgid(65534) if os.getuid() == 0 else None\n"
            "os.setuid(65534) if os.getuid() == 0 else None\n"
            "print(rtsched.apply('rr'))")
    got = in_child(code)
    assert got.startswith("normal (SCHED_RR refused: ") and "permitted" in got, got


def test_the_header_and_options_say_what_auto_chose():
    assert has_workers(RunOptions("rail2x4", workload="allreduce"))
    assert has_workers(RunOptions("rail2x4", script=("train.py",)))
    assert not has_workers(RunOptions("rail2x4", workload="incast"))
    assert RunOptions("rail2x4").sched == "auto"
    assert rtsched.header("auto", False).startswith(
        f"Scheduling: switch agents and NICs SCHED_RR priority {rtsched.PRIORITY} (auto: no")
    assert rtsched.header("auto", True) == (
        "Scheduling: switch agents and NICs as ordinary processes (auto: the run has PyTorch "
        "workers, which real-time agents and NICs starve)")
    assert rtsched.header("rr", True).startswith("Scheduling: switch agents and NICs SCHED_RR")
