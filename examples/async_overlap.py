"""An asynchronous AllReduce overlapped with computation, as DDP does with its gradient
buckets: issue it with async_op=True, compute, then wait.

    torchrun --nproc-per-node 4 examples/async_overlap.py --mb 4
    sudo python -m emu run rail2x4 --script examples/async_overlap.py --mb 4

It prints whether the AllReduce had already finished when the computation ended (it ran
in the background) and checks the sum exactly.
"""
import argparse
import time

import torch
import torch.distributed as dist


def main(mb: float = 4.0, compute_s: float = 2.0) -> bool:
    """On the initialised default group; True if the sum is exact on every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((int(mb * 1e6) // 8,), rank + 1, dtype=torch.int64)
    t0 = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    issued = time.monotonic() - t0
    x = torch.randn(256, 256)
    end = time.monotonic() + compute_s
    matmuls = 0
    while time.monotonic() < end:
        x = torch.tanh(x @ x.T / 256)
        matmuls += 1
    done_during_compute = work.is_completed()
    work.wait()
    ok = bool((t == world * (world + 1) // 2).all())
    flags = torch.tensor([int(ok), int(done_during_compute)], dtype=torch.int64)
    dist.all_reduce(flags)
    if rank == 0:
        print(f"async all_reduce of {mb:g} MB returned in {issued * 1e3:.1f} ms; "
              f"{matmuls} matmuls meanwhile; finished during the compute on "
              f"{flags[1].item()}/{world} ranks; exact on {flags[0].item()}/{world}")
    return flags[0].item() == world


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4.0, help="AllReduce size per rank, MB")
    ap.add_argument("--compute", type=float, default=2.0, help="seconds of matmuls meanwhile")
    a = ap.parse_args()
    dist.init_process_group()
    good = main(a.mb, a.compute)
    dist.destroy_process_group()
    raise SystemExit(0 if good else 1)
