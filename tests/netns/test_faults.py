"""Faults in whole `emu run`s (root, issue 14): a ring AllReduce (int64, every hop
cross-rail) stays exact through a spine-link failure and its recovery, the agents'
FIBs settle within a bounded model time; a job whose peer's NIC goes down for good fails
in bounded time with a verdict naming the cause, and nothing is left behind; a short
`emu bench fuzz`."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emu.realise import nsutil
from emu.observe.summary import validate_summary
from emu.run.report import EXIT_FIDELITY_LOST
from emucore.timedil import TimeDilation
from traffic.nic.nicconfig import NicConfig
from tests.e2e.runcheck import assert_checks_passed, passed

pytestmark = [pytest.mark.netns, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
#: the agents re-read their kernel 50 ms lab after a netlink change (switch_agent.serve),
#: 5 us model at TDF 10000; pushing every switch's routes takes a few ms lab
SETTLE_BOUND_US = 50.0
#: the NICs' retransmission timeout for the dead-peer test: IB exponent 5 (4.096 us x 2^5),
#: still far above this fabric's round trip (a few us model), so its retries end in
#: 5.2 s lab at DEAD_PEER_TDF rather than the default exponent 8's 42 s
NIC_TIMEOUT_S = 4.096e-6 * 2 ** 5
#: the dead-peer test's TDF: the retries are its wall time (x TDF), and the C switch
#: agents keep up on rail2x4 from TDF 2000 (`emu bench tdf`, docs/PERFORMANCE.md); a
#: lab that falls behind all the same is the guard's verdict, which the test accepts
DEAD_PEER_TDF = 5000


def emu_run(out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, "-m", "emu", "run", "rail2x4", "--quiet", "--pcap",
                        "none", "--no-plots", "--tdf", "10000", "--out", str(out), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    path = out / "summary.json"
    assert path.is_file(), r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads(path.read_text())
    validate_summary(summary)
    return r, summary


def test_allreduce_int64_exact_through_spine_link_failure(tmp_path):
    job = ("--workload", "allreduce", "--ring", "rank", "--dtype", "int64", "--size", "2MB",
           "--iters", "1", "--fault", "40us link rail1-spine1 down; 150us link rail1-spine1 up")
    r, s = emu_run(tmp_path / "ar", *job)
    if r.returncode == EXIT_FIDELITY_LOST:  # a busy machine: once more at the guard's TDF
        r, s = emu_run(tmp_path / "ar2", *job, "--tdf", f"{s['suggested_tdf']:g}")
    assert_checks_passed(r)
    assert passed(s), r.stdout[-3000:]
    assert "True" in r.stdout and "False" not in r.stdout.split("correct", 1)[1].split("\n")[1]
    applied = s["faults"]["applied"]
    assert [a["text"] for a in applied] == ["40us link rail1-spine1 down",
                                            "150us link rail1-spine1 up"]
    assert not any(a.get("error") or a.get("skipped") for a in applied)
    rows = s["faults"]["reconvergence"]
    assert len(rows) == 2
    down, up = rows
    assert down["ports_down"] == ["rail1:eth5", "spine1:eth1"]
    assert up["ports_up"] == ["rail1:eth5", "spine1:eth1"]
    for row in rows:  # rail1 and spine1 at the ends, rail2 withdraws via spine1
        assert row["switches"] == ["rail1", "rail2", "spine1"]
        assert 0 < row["local_us"] <= row["converged_us"]
        if s["fidelity"]["kept_up"]:  # a model-time figure counts only from a run that kept up
            assert row["converged_us"] < SETTLE_BOUND_US
    assert "Faults (at: model µs" in r.stdout


def test_a_job_whose_peer_is_gone_fails_in_bounded_time_naming_it(tmp_path):
    """h4g2's NIC loses its link for good 20 us into an AllReduce: the QPs towards it
    exhaust their retries ((retry_cnt + 1) x the NICs' timeout, `--nic-timeout`: 8 x
    131 us model = 5.2 s lab at TDF 5000; the default 1.05 ms would be 42 s of waiting)
    and the job is stopped with the cause - not left to its ranks' 30-minute timeouts."""
    before = set(nsutil.emu_namespaces())
    t0 = time.monotonic()
    r, s = emu_run(tmp_path / "nic", "--workload", "allreduce", "--ring", "rank", "--dtype",
                   "int64", "--size", "8MB", "--iters", "1", "--fault", "20us nic h4g2 down",
                   "--nic-timeout", f"{NIC_TIMEOUT_S * 1e6:g}us", "--tdf", str(DEAD_PEER_TDF))
    took = time.monotonic() - t0
    # a fail - or, where a busy machine made the lab fall behind, the guard's verdict with
    # the checks failed all the same (the guard is tested on its own: tests/e2e/runcheck.py)
    assert (r.returncode, s["verdict"]) in ((1, "fail"), (EXIT_FIDELITY_LOST, "fidelity_lost")) \
        and not s["checks_passed"], r.stdout[-3000:] + r.stderr[-3000:]
    assert took < 300
    # the workload ends within the retry budget after the fault, plus rdma.patience's
    # 60 s lab for starting the ranks and connecting on a loaded machine
    budget = TimeDilation(s["tdf"]).lab_time(20e-6 + (NicConfig.retry_cnt + 1) * NIC_TIMEOUT_S)
    assert s["workload_lab_s"] < budget + 60.0, (s["workload_lab_s"], budget)
    err = s["workload"]["fabric_error"]
    assert "RDMA WRITE to h4g2 (10.0.2.14) failed with RETRY_EXC_ERR" in err \
        or err.startswith("h4g2 QP") and "RETRY_EXC_ERR" in err, err
    assert "FAILED: " in r.stdout and "the job was stopped" in r.stdout
    after = s["faults"]["reach_after"]
    assert (after["reachable"], after["unexpected"]) == (42, 0)
    assert set(nsutil.emu_namespaces()) <= before


def test_short_fuzz_run_no_crash_and_the_write_exact(capsys):
    """`emu bench fuzz` in small (the bench sends 100,000): 4,000 malformed frames of
    every category into a running agent and NIC while a 64 MB WRITE runs."""
    from emu.bench.fuzz import fuzz_bench

    assert fuzz_bench(frames=4000, rate=2000.0, size=64 << 20) == 0  # outlasts 2 s of it
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "0 crashes"
    assert "SUCCESS, byte-exact True" in out
