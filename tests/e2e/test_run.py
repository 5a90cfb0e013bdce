"""A whole `emu run` (root): the run directory a network engineer gets, and `emu report`."""

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from emu.observe.summary import validate_summary
from emucore.wire.ib import Op
from traffic.nic.nicconfig import NicConfig
from traffic.rc.segment import packet_count

from .runcheck import assert_checks_passed, passed

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def tshark_rows(pcap: Path, display_filter: str, *fields: str) -> list[tuple[str, ...]]:
    """The fields of every frame of `pcap` matching `display_filter` (tshark must succeed)."""
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields",
                          *[x for f in fields for x in ("-e", f)]],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (pcap.name, out.stderr[-2000:])
    return [tuple(line.split("\t")) for line in out.stdout.splitlines() if line]


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
    sched = summary["data_path"]["sched"]  # --sched auto, no workers: SCHED_RR (rtsched)
    assert (sched["asked"], sched["resolved"]) == ("auto", "rr")
    assert set(sched["got"]) == {"rail1", "rail2", "spine1", "spine2", "h1g1", "h2g1", "h3g1",
                                 "h4g1"}
    assert all(g == "rr 10" or g.startswith("normal (SCHED_RR refused: ")
               for g in sched["got"].values()), sched


def test_pcaps_decode_and_stay_bounded(run_dir):
    """Every frame of the incast, counted exactly: each sender's WRITE of `size` bytes is
    ceil(size / MTU) packets - one FIRST, MIDDLEs, one LAST with immediate - and the
    responder ACKs exactly the packets that ask for one (traffic.rc.responder: AckReq,
    set by the requester on every `ackreq_every`-th PSN and on the last). Every PFC frame
    a switch port sent (its pause_tx + resume_tx) is in the capture of the port it went
    to, and no other: whether this incast pauses depends on DCQCN's cuts against the
    book's per-ingress xOFF (3.2 MB of a 4 MB flow), so both ways are judged."""
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    pcaps = run_dir / "pcaps"
    summary = json.loads((run_dir / "summary.json").read_text())
    for name, info in summary["pcaps"].items():
        assert info["bytes"] <= 2_000_000 + 10_000, name
    w = summary["workload"]
    assert w["retransmits"] == {g: 0 for g in w["from"]}  # the no-drop class resends nothing
    topo = json.loads((run_dir / "topology.json").read_text())
    gpus = {g["name"]: g for g in topo["gpus"]}
    ips = {name: g["ip"] for name, g in gpus.items()}
    n = packet_count(w["size"], NicConfig.mtu)  # emu run's NICs: path MTU 4096
    assert not summary["pcaps"]["h4-nic1.pcap"]["truncated"]
    got = Counter(tshark_rows(pcaps / "h4-nic1.pcap", "infiniband && ip.dst == " + ips[w["to"]],
                              "ip.src", "infiniband.bth.opcode"))
    want = Counter()
    for g in w["from"]:
        want.update({(ips[g], str(int(op))): k for op, k in
                     ((Op.WRITE_FIRST, 1), (Op.WRITE_MIDDLE, n - 2), (Op.WRITE_LAST_IMM, 1))})
    assert got == want
    for g in w["from"]:  # the ACKs each sender received
        nic = f"{gpus[g]['host']}-{gpus[g]['nic']}.pcap"
        assert not summary["pcaps"][nic]["truncated"], nic
        acks = tshark_rows(pcaps / nic, f"infiniband.bth.opcode == {int(Op.ACK)} && "
                                        f"ip.src == {ips[w['to']]}", "frame.number")
        assert len(acks) == -(-n // NicConfig.ackreq_every), (g, len(acks))
    counters = json.loads((run_dir / "last_counters.json").read_text())
    ends = {(e["node"], e["ifname"]): (e["mac"], o) for lk in topo["links"]
            for e, o in ((lk["a"], lk["b"]), (lk["b"], lk["a"]))}
    judged = 0
    for sw, c in counters.items():
        for p, pc in c.get("ports", {}).items():
            sent = sum(pc["pfc"]["pause_tx"]) + sum(pc["pfc"]["resume_tx"])
            mac, peer = ends[(sw, p)]
            cap = f"{peer['node']}-{peer['ifname']}.pcap"
            assert not summary["pcaps"][cap]["truncated"], cap
            frames = tshark_rows(pcaps / cap, f"macc.opcode == 0x0101 && eth.src == {mac}",
                                 "frame.number")
            assert len(frames) == sent, (sw, p, cap, len(frames), sent)
            judged += 1
    switches = {nd["name"] for nd in topo["nodes"] if nd["kind"] == "switch"}
    assert judged == sum(e["node"] in switches for lk in topo["links"] for e in (lk["a"], lk["b"]))


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
                        "--pcap", "none", "--no-plots"], cwd=ROOT, input=script,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = r.stdout + r.stderr  # Mininet's CLI prints through its logger
    assert "from 10.0.1.11" in out and "ttl=61" in out  # h1g1's NIC, 3 routers
    assert "eth5" in out and "lossless" in out


@pytest.mark.parametrize("mode", ["fast", "python"])
def test_a_write_on_each_data_path(mode, tmp_path):
    """`--datapath fast` puts every switch agent's frames through C (and the NICs' framing),
    `python` keeps the reference everywhere (issue 30): the same write arrives whole and
    decodes in Wireshark either way, and the run says what ran compiled."""
    d = tmp_path / mode
    r = subprocess.run([sys.executable, "-m", "emu", "run", "rail2x4", "--out", str(d),
                        "--datapath", mode, "--tdf", "10000", "--workload", "write", "--src",
                        "h1g1", "--dst", "h4g2", "--size", "2MB", "--pcap", "h4:nic2",
                        "--no-plots"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    summary = assert_checks_passed(r, d)
    assert passed(summary)
    dp = summary["data_path"]
    want = "c" if mode == "fast" else "python"
    assert dp["mode"] == mode and dp["agents"] == {s: want for s in
                                                   ("rail1", "rail2", "spine1", "spine2")}
    agents = "switch agents (per-frame pipeline and poll loop)"
    assert (agents in dp["compiled"]) == (mode == "fast")
    assert (dp["compiled"] == []) == (mode == "python")
    assert f"Data path: {mode} - " in r.stdout
    assert "PFC active on every fabric port" in r.stdout  # LLDP/DCBX in Python, pushed to C
    events = [json.loads(line) for line in (d / "events" / "rail1.jsonl").read_text().splitlines()]
    assert sorted(e["port"] for e in events if e["ev"] == "pfc_oper") == [
        f"eth{i}" for i in range(1, 7)]  # both paths keep the switch's event log
    [pcap] = (d / "pcaps").glob("*h4*nic2*.pcap")
    rows = tshark_rows(pcap, "infiniband.bth.opcode == 6 || infiniband.bth.opcode == 7 || "
                             "infiniband.bth.opcode == 8 || infiniband.bth.opcode == 9 || "
                             "infiniband.bth.opcode == 10 || infiniband.bth.opcode == 11",
                       "infiniband.bth.opcode")
    assert len(rows) == packet_count(2_000_000, 4096)  # every WRITE packet of 2 MB (SI) arrived
