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


IDLE_SCRIPT = r'''
import json, os, resource, sys, time
import torch, torch.distributed as dist
def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the rank
    return ru.ru_utime + ru.ru_stime
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(1024))  # opens the channels
dist.barrier()
c0, w0 = cpu(), time.monotonic()
if r == n - 1:
    time.sleep(float(sys.argv[1]))  # the slow peer
dist.all_reduce(torch.ones(1024))
c1, w1 = cpu(), time.monotonic()
with open(os.path.join(os.environ["EMU_RESULT_DIR"], f"rank{r}.json"), "w") as f:
    json.dump({"cpu_s": c1 - c0, "wall_s": w1 - w0}, f)
dist.destroy_process_group()
'''


def test_ranks_waiting_for_a_slow_peer_use_no_cpu(tmp_path):
    """Three ranks wait 2 s in an AllReduce for a fourth that sleeps: they must block
    (socket receive, Condition), not poll. Bound: 5 % of the wait. The AllReduce of 4 KB
    itself costs ~5 ms of CPU per rank (8 ranks measured 4-6 ms including the wait, with
    every waiter blocked); a rank that spun would take its share of the 2 cores, ~50 %
    of the wait with 4 ranks, and a 100 Hz sleep-poll ~1-2 %, plus the operation."""
    wait = 2.0
    script = tmp_path / "idle.py"
    script.write_text(IDLE_SCRIPT)
    _, res = run_ranks(4, [str(script), str(wait)], tmp_path)
    for r, rec in enumerate(res[:-1]):
        # the barrier lets ranks go a few ms apart (measured 1.9957 s of a 2 s sleep)
        assert rec["wall_s"] >= 0.9 * wait, f"rank {r} did not wait for the slow one: {rec}"
        assert rec["cpu_s"] < 0.05 * wait, f"rank {r} used CPU while waiting: {rec}"


HOLD_SCRIPT = r'''
import atexit, gc, json, os, weakref
import torch.distributed as dist
dist.init_process_group()
r = dist.get_rank()
sub = dist.new_group()
dist.barrier(group=sub)  # no rank leaves (and takes the store) before the others joined
groups = [weakref.ref(dist.group.WORLD), weakref.ref(sub)]
del sub
dist.destroy_process_group()
gc.collect()
seen = {"after_destroy": [g() is not None for g in groups]}
def at_exit():  # leave() runs the atexit handlers after collectives.worker.settle
    seen["at_exit"] = [g() is not None for g in groups]
    with open(os.path.join(os.environ["EMU_RESULT_DIR"], f"rank{r}.json"), "w") as f:
        json.dump(seen, f)
atexit.register(at_exit)
'''


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_the_worker_holds_every_process_group_until_the_script_is_done(tmp_path, backend):
    """A DDP Reducer dropping the last reference to a gloo group joins gloo's threads with
    the GIL held while one of them waits for the GIL to free a finished work's tensors
    (collectives.worker.hold_groups): the worker holds each group the script created,
    past the script's destroy_process_group, and lets go of them in settle."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD_SCRIPT)
    _, res = run_ranks(2, [str(script)], tmp_path, backend)
    assert res == [{"after_destroy": [True, True], "at_exit": [False, False]}] * 2
