"""A CPU DDP script as they are written in the wild: it names the "gloo" backend, imports
a module beside it and writes its result to a relative path.

    torchrun --nproc-per-node 4 examples/ddp_gloo/train.py --steps 5 --out results
    sudo python -m emu run rail2x4 --script examples/ddp_gloo/train.py --steps 5 --out results

Each rank trains on its shard of every global batch; DDP averages the gradients. Rank 0
then trains the same model alone on the whole batches: with equal shards the averaged
gradient is the full-batch gradient, so the weights must match. Exit status 1 if not.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from data import IN, batch   # the module beside this script

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--batch", type=int, default=64, help="global batch (divisible by ranks)")
ap.add_argument("--out", default="results", help="directory for the result, relative to cwd")
a = ap.parse_args()

dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def new_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


model = DDP(new_model())
opt = torch.optim.SGD(model.parameters(), lr=0.05)
per = a.batch // world
for step in range(a.steps):
    x, y = batch(step, a.batch)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x[rank * per:(rank + 1) * per]),
                                 y[rank * per:(rank + 1) * per]).backward()
    opt.step()

ok = True
if rank == 0:
    ref = new_model()
    ropt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(a.steps):
        x, y = batch(step, a.batch)
        ropt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        ropt.step()
    diff = max((p - q).abs().max().item() for p, q in zip(model.module.parameters(),
                                                            ref.parameters()))
    ok = diff < 1e-5
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "ddp_gloo.txt"), "w") as f:
        f.write(f"backend {dist.get_backend()} world {world} max diff {diff:.3g} ok {ok}\n")
    print(f"DDP over {world} ranks (backend {dist.get_backend()}) vs one process: "
          f"max weight difference {diff:.3g} -> {'match' if ok else 'MISMATCH'}")
dist.barrier()  # leave together (gloo aborts a rank that exits while a peer still works)
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
