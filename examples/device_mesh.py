"""2-D parallelism the way torch's tutorials write it: a DeviceMesh of (dp, tp), collectives
on each dimension's sub-groups, and a DTensor sharded over tp then replicated.

    torchrun --nproc-per-node 8 examples/device_mesh.py
    sudo python -m emu run rail2x4 --script examples/device_mesh.py

Every check is exact (int64 sums, a float tensor reassembled bit for bit); exit status 1
on any mismatch.
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def main() -> bool:
    """The checks, on the initialised default group; True if exact on every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dp = 2 if world % 2 == 0 else 1
    mesh = init_device_mesh("cpu", (dp, world // dp), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh["tp"].get_group(), mesh["dp"].get_group()
    tp_ranks = dist.get_process_group_ranks(tp_group)
    dp_ranks = dist.get_process_group_ranks(dp_group)

    t = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(t, group=tp_group)
    u = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(u, group=dp_group)
    ok = t.item() == sum(tp_ranks) and u.item() == sum(dp_ranks)

    full = torch.arange(world * 4 * 3, dtype=torch.float32).reshape(world * 4, 3) / 7
    sharded = distribute_tensor(full, mesh["tp"], [Shard(0)])
    local_ok = torch.equal(sharded.to_local(), full.chunk(len(tp_ranks))[tp_ranks.index(rank)])
    replicated = sharded.redistribute(mesh["tp"], [Replicate()]).to_local()
    ok = ok and local_ok and torch.equal(replicated, full)

    flags = torch.tensor([int(ok)], dtype=torch.int64)
    dist.all_reduce(flags)
    if rank == 0:
        print(f"mesh {tuple(mesh.shape)} (dp, tp): sub-group sums, DTensor Shard(0) -> Replicate "
              f"on every rank: {flags.item()}/{world} exact")
    return flags.item() == world


if __name__ == "__main__":
    dist.init_process_group()
    good = main()
    dist.destroy_process_group()
    raise SystemExit(0 if good else 1)
