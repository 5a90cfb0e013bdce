"""The PyTorch workloads with every rank on this machine (no fabric): with the "emu"
backend over shared memory, and with torch's gloo as the peer implementation."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from collectives.rendezvous import torchrun_env
from collectives.workloads import pipeline

ROOT = Path(__file__).resolve().parents[2]


def run_ranks(n, target, tmp_path, backend="emu", timeout=180):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
        env.update(torchrun_env(0, n, r, 1, "127.0.0.1", port))
        env.update({"EMU_HOST": "local", "EMU_RESULT_DIR": str(tmp_path), "EMU_BACKEND": backend,
                    "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
        procs.append(subprocess.Popen([sys.executable, "-m", "collectives.run"] + target,
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs[0], [json.loads((tmp_path / f"rank{r}.json").read_text())
                     if (tmp_path / f"rank{r}.json").exists() else None for r in range(n)]


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
