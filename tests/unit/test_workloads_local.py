"""The PyTorch workloads with every rank on this machine (no fabric): with the "emu"
backend over shared memory, and with torch's gloo as the peer implementation."""

import pytest

from collectives.workloads import pipeline
from tests.unit.localjob import ROOT, run_ranks


def test_pipeline_schedule_is_the_books():
    plan = pipeline.schedule()
    assert len(plan) == 10
    assert plan[1] == [(0, "F", 1)]
    assert sorted(plan[4]) == [(0, "F", 4), (1, "F", 3), (2, "F", 2), (3, "B", 1), (3, "F", 1)]
    assert sorted(plan[7]) == [(0, "B", 1), (1, "B", 2), (2, "B", 3), (3, "B", 4), (3, "F", 4)]
    active = [{t for t, tasks in plan.items() if any(s == st for st, _, _ in tasks)}
              for s in range(4)]
    assert pipeline.utilization(active, 10) == pipeline.BOOK


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_ddp_training_matches_the_reference(tmp_path, backend):
    out, res = run_ranks(4, ["--module", "collectives.workloads.train", "--iters", "4"],
                         tmp_path, backend)
    assert all(r["ok"] for r in res) and res[0]["max_param_diff"] < 1e-5
    assert "MATCH" in out and len(res[0]["losses"]) == 4


def test_pipeline_runs_the_books_schedule_over_emu(tmp_path):
    out, res = run_ranks(4, ["--module", "collectives.workloads.pipeline"], tmp_path)
    assert res[0]["ok"] and res[0]["utilization"] == pipeline.BOOK
    assert res[0]["max_grad_diff"] < 1e-5 and "F1+B1" in out


@pytest.mark.parametrize("n", [2, 3])
def test_tensor_parallel_block_matches_the_unsplit_one(tmp_path, n):
    out, res = run_ranks(n, ["--module", "collectives.workloads.tensor"], tmp_path)
    assert all(r["ok"] for r in res) and "MATCH" in out


def test_the_example_script_runs_unmodified_on_emu(tmp_path):
    out, _ = run_ranks(2, [str(ROOT / "examples" / "ddp_minimal.py")], tmp_path)
    assert "step 4: mean loss over 2 ranks" in out
    assert list(tmp_path.glob("emu-rank0-g*.json")), "went through the emu backend"
