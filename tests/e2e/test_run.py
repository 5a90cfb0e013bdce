"""A whole `emu run` (root): the run directory a network engineer gets, and `emu report`."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emu.observe.summary import validate_summary

from .runcheck import assert_checks_passed, passed

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def tshark_count(pcap: Path, display_filter: str) -> int:
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True, timeout=120)
    return len(out.stdout.split())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run") / "incast"
    r = subprocess.run([sys.executable, "-m", "emu", "run", "rail2x4", "--quiet", "--out", str(d),
                        "--workload", "incast", "--to", "h4g1", "--from", "h1g1,h2g1,h3g1",
                        "--size", "4MB", "--pcap", "all", "--pcap-limit", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert_checks_passed(r, d)
    (d / "stdout.txt").write_text(r.stdout)
    return d


def test_run_directory_contents(run_dir):
    for name in ("topology.json", "qos.json", "dcqcn.json", "metrics.csv", "summary.json",
                 "last_counters.json"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    validate_summary(summary)
    assert passed(summary) and summary["metrics_rows"] > 100
    assert json.loads((run_dir / "dcqcn.json").read_text())["name"] == "paper"
    assert summary["classes"]["rail1"]["3"]["packets"] > 3000  # 3 x 4 MB in 4 KB frames
    assert set(summary["nics"]) == {"h1g1", "h2g1", "h3g1", "h4g1"}
    assert (run_dir / "plots" / "queue_depth.png").is_file()
    assert (run_dir / "plots" / "qp_rates.png").is_file()
    topo = json.loads((run_dir / "topology.json").read_text())
    tdf = summary["tdf"]  # --tdf auto: at least the topology's 5000, more on a slow machine
    assert summary["tdf_choice"]["mode"] == "auto" and topo["tdf"] == tdf >= 5000
    assert topo["links"][0]["lab_bps"] == topo["links"][0]["model_bps"] / tdf
    out = (run_dir / "stdout.txt").read_text()
    assert "RoCE (3)" in out and ("Verdict: PASS" in out or "Verdict: FIDELITY LOST" in out)


def test_pcaps_decode_and_stay_bounded(run_dir):
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    pcaps = run_dir / "pcaps"
    assert tshark_count(pcaps / "h4-nic1.pcap", "infiniband.bth.opcode == 6") >= 1  # WRITE FIRST
    assert tshark_count(pcaps / "h1-nic1.pcap", "infiniband.bth.opcode == 0x11") >= 1  # ACKs
    summary = json.loads((run_dir / "summary.json").read_text())
    for name, info in summary["pcaps"].items():
        assert info["bytes"] <= 2_000_000 + 10_000, name
    counters = json.loads((run_dir / "last_counters.json").read_text())
    paused_ports = [(sw, p) for sw, c in counters.items() if "ports" in c
                    for p, pc in c["ports"].items() if sum(pc["pfc"]["pause_tx"])]
    for sw, p in paused_ports:  # where pauses happened, the capture shows CBFC frames
        assert tshark_count(pcaps / f"{sw}-{p}.pcap", "macc.opcode == 0x0101") >= 1


def test_report_regenerates_without_the_fabric(run_dir):
    shutil.rmtree(run_dir / "plots")
    r = subprocess.run([sys.executable, "-m", "emu", "report", str(run_dir)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "RoCE (3)" in r.stdout and ("PASS" in r.stdout or "FIDELITY LOST" in r.stdout)
    assert (run_dir / "plots" / "queue_depth.png").is_file()


def test_mininet_cli_with_gpu_aliases_and_show_commands():
    script = "h1g1 ping -c 2 h4g2\nrail1 show interface priority-flow-control\nexit\n"
    r = subprocess.run([sys.executable, "-m", "emu", "run", "rail2x4", "--cli", "--quiet",
                        "--pcap", "none"], cwd=ROOT, input=script, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = r.stdout + r.stderr  # Mininet's CLI prints through its logger
    assert "from 10.0.1.11" in out and "ttl=61" in out  # h1g1's NIC, 3 routers
    assert "eth5" in out and "lossless" in out
