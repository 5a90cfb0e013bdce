"""The train workload with the H100 compute model (issue 15), on local 2-rank jobs at
TDF 1 (model seconds = lab seconds): GPT-2-small's step costs what the table says, the
iteration splits into compute, communication and overlap, DDP overlaps its bucket
AllReduces with the backward only when asked to, and the result is still right."""

import pytest
import torch

from collectives.compute.gpu import GpuModel
from collectives.compute.meter import count_step
from collectives.workloads.models import MODELS
from tests.unit.localjob import run_ranks

TRAIN = ["--module", "collectives.workloads.train", "--model", "gpt2-small", "--seq", "4"]


@pytest.fixture(scope="module")
def step_cost():
    spec = MODELS["gpt2-small"]
    c = count_step(spec.build, lambda: (torch.empty(8, 1024, 768),),
                   lambda y: y.float().pow(2).mean())
    return c.total, GpuModel.h100().step_seconds(c.total, "bfloat16", "xfmr d768 L12")


def run(tmp_path, *extra):
    out, res = run_ranks(2, TRAIN + list(extra), tmp_path, timeout=300,
                         env_extra={"EMU_TDF": "1"})
    return out, res[0]


def test_gpt2_small_step_costs_the_tables_and_splits(tmp_path, step_cost):
    flops, seconds = step_cost
    out, r = run(tmp_path, "--gpu", "h100", "--iters", "2")
    assert r["ok"] and r["replicas_equal"] and r["params"] == 85_054_464
    c = r["compute"]
    assert c["flops_step"] == flops and c["step_model_ms"] == pytest.approx(seconds * 1e3)
    assert c["family"] == "xfmr d768 L12" and c["shape"] == [8, 1024, 768]
    assert c["fwd"]["count"] == c["bwd"]["count"] == 2
    assert c["fwd"]["model_s"] + c["bwd"]["model_s"] == pytest.approx(2 * seconds)
    last = r["iterations"][-1]
    assert last["compute_ms"] >= seconds * 1e3 * 0.999  # the step's holds, at least
    assert last["window_ms"] == pytest.approx(last["compute_ms"] + last["exposed_comm_ms"]
                                              + last["other_ms"], abs=1e-3)
    assert last["overlap_ms"] > 0  # DDP's buckets ran during the backward's holds
    assert "compute model h100 (xfmr d768 L12, bfloat16)" in out and "170.1 MB per step" in out
    assert (tmp_path / "compute-rank1.json").is_file()


def test_overlap_off_allreduces_after_the_backward(tmp_path):
    _, r = run(tmp_path, "--gpu", "h100", "--iters", "2", "--overlap", "off")
    last = r["iterations"][-1]
    assert r["ok"] and r["overlap"] == "off"
    assert last["overlap_ms"] == pytest.approx(0.0, abs=0.01) and last["comm_ms"] > 0


def test_gpt2_small_ddp_matches_one_process_with_fp32_on_the_wire(tmp_path):
    out, r = run(tmp_path, "--iters", "2", "--wire", "fp32", "--reference")
    assert r["ok"] and r["max_param_diff"] < 1e-3 and "MATCH" in out
