"""Real training scripts, unmodified (issue 15), on a local job: every rank a process of
this machine, every channel shared memory (tests/unit/localjob.py) - the same backend
code as on the fabric, without root. The scripts are the examples/ ones, written like
public torch.distributed scripts (no emu import)."""

import json
import re

import pytest
import torch

from collectives import aliases
from collectives.endpoint import CM_BASE, cm_port
from collectives.rendezvous import group_slots
from collectives.ring import alltoall_steps, split_bounds
from tests.unit.localjob import ROOT, run_ranks

EX = ROOT / "examples"


@pytest.mark.parametrize("given, target, want", [
    (None, "emu", "emu"), ("gloo", "emu", "emu"), ("nccl", "emu", "emu"),
    ("cpu:gloo,cuda:nccl", "emu", "emu"), ("GLOO", "emu", "emu"), ("emu", "emu", "emu"),
    (torch.distributed.Backend.GLOO, "emu", "emu"), ("fake", "emu", "fake"),
    ("cpu:gloo,cuda:fake", "emu", "cpu:gloo,cuda:fake"),
    (None, "gloo", "gloo"), ("nccl", "gloo", "gloo"), ("emu", "gloo", "gloo")])
def test_what_a_named_backend_runs_as(given, target, want):
    assert aliases.translate(given, target) == want


def test_translate_refuses_an_unknown_target():
    with pytest.raises(ValueError, match="target: one of emu, gloo, got 'mpi'"):
        aliases.translate("gloo", "mpi")


@pytest.mark.parametrize("rank, n, want", [
    (0, 1, []), (0, 2, [(1, 1)]), (1, 2, [(0, 0)]),
    (0, 4, [(1, 3), (2, 2), (3, 1)]), (2, 4, [(3, 1), (0, 0), (1, 3)])])
def test_alltoall_pairwise_steps(rank, n, want):
    assert alltoall_steps(rank, n) == want


def test_alltoall_steps_pair_every_rank_once_per_step():
    n = 8
    for k in range(n - 1):
        sends = {r: alltoall_steps(r, n)[k] for r in range(n)}
        for r, (dst, src) in sends.items():
            assert sends[dst][1] == r and sends[src][0] == r  # dst receives from r at k


@pytest.mark.parametrize("splits, n, rows, want", [
    ([], 4, 8, [(0, 2), (2, 4), (4, 6), (6, 8)]), ([1, 0, 3], 3, 4, [(0, 1), (1, 1), (1, 4)]),
    ([0, 0], 2, 0, [(0, 0), (0, 0)])])
def test_split_bounds(splits, n, rows, want):
    assert split_bounds(splits, n, rows) == want


@pytest.mark.parametrize("splits, n, rows, msg", [
    ([], 3, 8, "8 rows do not split evenly over 3 ranks"),
    ([1, 2], 3, 3, r"split sizes \[1, 2\]: want 3 sizes >= 0 adding up to 3"),
    ([2, -1], 2, 1, "want 2 sizes >= 0")])
def test_split_bounds_errors(splits, n, rows, msg):
    with pytest.raises(ValueError, match=msg):
        split_bounds(splits, n, rows)


def test_cm_ports_per_slot_and_their_limits():
    assert cm_port(0, 3) == CM_BASE + 3 and cm_port(2, 0) == CM_BASE + 512
    with pytest.raises(ValueError, match="group slot 160: a job can use 160 group lanes"):
        cm_port(160, 0)
    with pytest.raises(ValueError, match="MASTER_PORT 20257: choose another --master-port"):
        cm_port(1, 1, master_port=20257)


def test_group_slots_are_unique_in_a_job():
    """Each group's rank 0 draws two lanes from the job's counter; its ranks agree."""
    store = torch.distributed.HashStore()
    groups = [torch.distributed.PrefixStore(f"{g}/", store) for g in range(3)]
    firsts = [group_slots(s, 0, 2, 5.0) for s in groups]
    assert firsts == [0, 2, 4]
    assert [group_slots(s, 1, 2, 5.0) for s in groups] == firsts


def record(tmp_path, rank=0, group="0"):
    return json.loads((tmp_path / f"emu-rank{rank}-g{group}.json").read_text())


def test_ddp_script_naming_gloo_runs_over_emu_imports_its_sibling_and_uses_cwd(tmp_path):
    """examples/ddp_gloo/train.py names "gloo", imports data.py beside it and writes a
    relative path: its collectives run on emu, the result lands in the working directory,
    and DDP's weights equal a single-process reference."""
    work = tmp_path / "cwd"
    work.mkdir()
    out, _ = run_ranks(4, [str(EX / "ddp_gloo" / "train.py"), "--steps", "3"], tmp_path,
                       cwd=work)
    assert "backend 'gloo' runs as 'emu'" in out and "-> match" in out
    assert (work / "results" / "ddp_gloo.txt").read_text().startswith("backend emu world 4")
    rec = record(tmp_path)
    assert rec["issued"]["allreduce"]["count"] >= 3  # DDP's buckets, one per step at least
    assert rec["issued"]["broadcast"]["count"] >= 1  # DDP's initial parameter broadcast
    assert not (ROOT / "results").exists()


def test_backend_gloo_keeps_torchs_gloo(tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    out, _ = run_ranks(2, [str(EX / "ddp_gloo" / "train.py"), "--steps", "2"], tmp_path,
                       backend="gloo", cwd=work)
    assert "(backend gloo)" in out and "-> match" in out
    assert not list(tmp_path.glob("emu-rank*.json"))  # emu never made a group


def test_device_mesh_2x4_subgroups_and_dtensor_exact(tmp_path):
    out, _ = run_ranks(8, [str(EX / "device_mesh.py")], tmp_path, timeout=240)
    assert "mesh (2, 4) (dp, tp)" in out and "8/8 exact" in out
    names = {record(tmp_path, 0, g)["group_name"] for g in
             [p.name.split("-g", 1)[1][:-5] for p in tmp_path.glob("emu-rank0-g*.json")]}
    assert len(names) >= 3  # world, rank 0's dp and tp groups: each has its name


def test_expert_all_to_all_uneven_exact(tmp_path):
    out, _ = run_ranks(4, [str(EX / "expert_a2a.py")], tmp_path)
    assert "4/4 exact" in out
    assert record(tmp_path)["issued"]["alltoall"]["count"] == 3


def test_async_all_reduce_runs_during_compute(tmp_path):
    """An async all_reduce completes while its ranks compute. It needs every rank's
    progress, so were collectives driven only by wait() none could finish during the
    compute (0/4): one rank that saw it done already shows the background lane worked.
    4/4 is what a quiet machine gives; a rank whose lane the machine's load starved for
    the whole second (3/4 once, a full unit suite on 2 cores beside it) is not a defect."""
    out, _ = run_ranks(4, [str(EX / "async_overlap.py"), "--mb", "2", "--compute", "1"],
                       tmp_path)
    m = re.search(r"finished during the compute on (\d)/4 ranks; exact on 4/4", out)
    assert m and int(m.group(1)) >= 1, out
    first = [[h for h in record(tmp_path, r)["history"] if h["op"] == "allreduce"][0]
             for r in range(4)]  # the 2 MB one; the second is the script's flags
    assert min(op["seconds_lab"] for op in first) < 1.0  # inside the second of matmuls


UNSUPPORTED = """\
import time, torch, torch.distributed as dist
dist.init_process_group()
t0 = time.monotonic()
try:
    dist.recv(torch.zeros(2))
except NotImplementedError as e:
    print(f"refused in {time.monotonic() - t0:.2f} s: {e}")
dist.barrier()  # rank 0 holds the store: it must not leave while rank 1 still sets up
dist.destroy_process_group()
"""


def test_an_unsupported_call_fails_at_once_naming_it(tmp_path):
    script = tmp_path / "anysource.py"
    script.write_text(UNSUPPORTED)
    out, _ = run_ranks(2, [str(script)], tmp_path)
    line = next(x for x in out.splitlines() if x.startswith("refused in"))
    assert "emu backend: recv from any source" in line and float(line.split()[2]) < 1.0
