"""PyTorch workers on every emulated GPU of rail2x4 (root): ring AllReduce over the NICs,
the job start on the frontend, DDP, pipeline and tensor parallelism, a user's script."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .runcheck import assert_checks_passed

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def emu_run(out: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "emu", "run", "rail2x4", "--quiet", "--out",
                        str(out), *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert_checks_passed(r, out)
    return r


def tshark_fields(pcap: Path, flt: str, field: str) -> list[str]:
    r = subprocess.run(["tshark", "-r", str(pcap), "-Y", flt, "-T", "fields", "-e", field],
                       capture_output=True, text=True, timeout=120)
    return [x for x in r.stdout.split() if x]


@pytest.fixture(scope="module")
def allreduce_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("coll") / "allreduce"
    # 1 000 008 B: 125 001 int64 / 250 002 float32 elements, not divisible by 8 ranks
    r = emu_run(d, "--workload", "allreduce", "--size", "1000008", "--dtype", "int64,float32",
                "--iters", "1")
    return d, r.stdout


def test_allreduce_is_exact_for_int64_and_close_for_float32(allreduce_run):
    d, out = allreduce_run
    w = json.loads((d / "summary.json").read_text())["workload"]
    rows = w["rank0"]["rows"]
    assert [(r["dtype"], r["count"]) for r in rows] == [("int64", 125001), ("float32", 250002)]
    assert all(r["correct"] for r in rows)
    for k in range(8):  # every rank checked its own result against its local reference
        res = json.loads((d / "workers" / f"rank{k}.json").read_text())
        assert res["ok"] and all(r["correct"] for r in res["rows"])
    assert "busbw" in out and "True" in out


def test_each_fabric_nic_sends_2_n_minus_1_over_n_of_the_data(allreduce_run):
    d, _ = allreduce_run
    w = json.loads((d / "summary.json").read_text())["workload"]
    assert w["ring"] == ["h1g1", "h2g1", "h3g1", "h4g1", "h4g2", "h3g2", "h2g2", "h1g2"]
    assert sorted(w["fabric_senders"]) == ["h1g1", "h2g1", "h2g2", "h3g1", "h3g2", "h4g2"]
    for g in w["fabric_senders"]:
        assert w["nic_payload_tx_bytes"][g] == pytest.approx(
            w["expected_tx_bytes_per_fabric_sender"], rel=0.02)
    for g in ("h1g2", "h4g1"):  # their ring successor shares the host: shared memory
        assert w["nic_payload_tx_bytes"][g] < 1000
    assert (d / "plots" / "collective_steps.png").is_file()


def test_frontend_capture_shows_the_rendezvous(allreduce_run):
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    d, _ = allreduce_run
    w = json.loads((d / "summary.json").read_text())["workload"]
    assert len(bytes.fromhex(w["unique_id"])) == 128
    pcap = d / "pcaps" / "h2-fe0.pcap"
    syns = tshark_fields(pcap, "tcp.dstport == 29500 && tcp.flags.syn == 1 && "
                               "tcp.flags.ack == 0", "ip.src")
    assert set(syns) == {"192.168.10.102"}  # h2's two ranks dial the master on h1
    payload = "".join(tshark_fields(pcap, "tcp.srcport == 29500 && tcp.len > 0", "tcp.payload"))
    assert w["unique_id"] in payload.replace(":", "")  # the 128-byte ID reaches host 2


def test_ddp_training_matches_the_single_process_reference(tmp_path):
    d = tmp_path / "train"
    out = emu_run(d, "--workload", "train", "--iters", "5", "--pcap", "none").stdout
    res = json.loads((d / "workers" / "rank0.json").read_text())
    assert res["ok"] and res["max_param_diff"] < 1e-5, res
    assert "iteration   5: loss" in out and "MATCH" in out


def test_pipeline_utilisation_is_the_books(tmp_path):
    d = tmp_path / "pipe"
    out = emu_run(d, "--workload", "pipeline", "--pcap", "none").stdout
    res = json.loads((d / "workers" / "rank0.json").read_text())
    assert res["ok"], res
    assert res["utilization"] == [25, 50, 75, 100, 75, 75, 100, 75, 50, 25]
    assert "F1+B1" in out and "= the book" in out


def test_tensor_parallel_layer_matches_the_reference(tmp_path):
    d = tmp_path / "tp"
    emu_run(d, "--workload", "tensor", "--pcap", "none")
    res = json.loads((d / "workers" / "rank0.json").read_text())
    assert res["ok"], res


def test_ddp_script_naming_gloo_moves_fabric_bytes_and_matches(tmp_path):
    """Issue 15: a public-style DDP script that names "gloo", imports the module beside it
    and writes a relative path runs over the NICs, in the working directory given."""
    d, cwd = tmp_path / "script", tmp_path / "cwd"
    cwd.mkdir()
    out = emu_run(d, "--pcap", "none", "--cwd", str(cwd), "--script",
                  str(ROOT / "examples" / "ddp_gloo" / "train.py"), "--steps", "3").stdout
    assert "backend 'gloo' runs as 'emu'" in out and "(backend emu) vs one process" in out
    assert "-> match" in out
    assert (cwd / "results" / "ddp_gloo.txt").read_text().startswith("backend emu world 8")
    w = json.loads((d / "summary.json").read_text())["workload"]
    assert w["failed"] == [] and set(w["returncodes"].values()) == {0}
    rows = {r["gpu"]: r for r in w["per_rank"]}
    assert all(r["issued"]["allreduce"]["count"] >= 3 for r in rows.values())
    assert sum(r["nic_tx_bytes"] for r in rows.values()) > 0  # DDP's buckets crossed hosts
    rec = json.loads((d / "workers" / "emu-rank0-g0.json").read_text())
    assert any(c["kind"] == "rdma" for c in rec["channels"].values())


def test_device_mesh_all_to_all_and_async_over_the_fabric(tmp_path):
    """DeviceMesh 2x4 + DTensor, uneven all_to_all_single, an async AllReduce that ends
    while the rank computes - one job, examples/parallelism.py."""
    d = tmp_path / "par"
    out = emu_run(d, "--pcap", "none", "--cwd", str(tmp_path), "--script",
                  str(ROOT / "examples" / "parallelism.py"), "--mb", "1", "--compute", "10"
                  ).stdout
    assert "mesh (2, 4) (dp, tp)" in out and "8/8 exact" in out
    assert "finished during the compute on 8/8 ranks; exact on 8/8" in out
    assert "device mesh exact, expert all-to-all exact, async all_reduce exact" in out
    w = json.loads((d / "summary.json").read_text())["workload"]
    assert all(r["issued"]["alltoall"]["count"] == 3 and r["groups"] == 3
               for r in w["per_rank"])


SILENT = "import torch.distributed as dist\ndist.init_process_group()\nprint('no collectives')\n"


def test_a_script_that_never_communicates_fails_saying_so(tmp_path):
    """On the smallest fabric (one switch, two hosts with a GPU each): whether a rank's NIC
    moved a byte does not depend on the fabric's size, and 2 ranks start sooner than 8."""
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    d = tmp_path / "silent"
    r = subprocess.run([sys.executable, "-m", "emu", "run", "rail1x2", "--spines", "0", "--quiet",
                        "--pcap", "none", "--out", str(d), "--script", str(script)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    s = json.loads((d / "summary.json").read_text())
    # the checks fail (exit 1); a lab that also fell behind - a machine busy while the
    # ranks import torch, with few timed actions on an idle fabric - exits 3 and says both
    lost = s["verdict"] == "fidelity_lost"
    assert r.returncode == (3 if lost else 1), r.stdout[-3000:] + r.stderr[-3000:]
    assert s["checks_passed"] is False and s["workload"]["no_fabric_bytes"] is True
    assert s["verdict"] in ("fail", "fidelity_lost")
    assert "no rank's NIC moved a byte over the fabric" in r.stdout
    assert ("the checks failed too" in r.stdout) == lost


def test_ring_allreduce_over_uet_is_exact_and_sprays(tmp_path):
    """Issue 16: the emu backend's channels over UET (RUD, NSCC, an entropy value per
    packet); the book's ring crosses the spines, where the packets of one QP spread."""
    d = tmp_path / "uet"
    emu_run(d, "--transport", "uet", "--workload", "allreduce", "--size", "1000008",
            "--dtype", "int64", "--iters", "1", "--ring", "rank", "--pcap", "none")
    s = json.loads((d / "summary.json").read_text())
    assert s["transport"] == "uet"
    rows = s["workload"]["rank0"]["rows"]
    assert [(r["dtype"], r["count"], r["correct"]) for r in rows] == [("int64", 125001, True)]
    counters = json.loads((d / "last_counters.json").read_text())
    # the book's ring hops g2 -> next host's g1: Rail-2 -> a spine -> Rail-1
    up = [p["tx_bytes"] for p in counters["rail2"]["ports"].values()
          if p["peer"].startswith("spine")]
    assert len(up) == 2 and sum(up) > 4 * 1_750_000 and min(up) > 0.3 * sum(up), up
