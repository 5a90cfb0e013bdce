"""Data-parallel training with DDP over the fabric (book ch.8 "Data parallelism",
Fig 8-2; ch.14: gradients AllReduced every iteration).

A small MLP (16 -> 64 -> 64 -> 1) learns a fixed synthetic regression task (the data
ships as a seeded generator below). Every iteration the global batch is cut into
WORLD_SIZE equal shards; each rank runs forward/backward on its shard inside
DistributedDataParallel, whose bucketed AllReduce averages the gradients over the
backend; SGD steps. The loss printed is the global mean (an AllReduce of the ranks'
losses). At the end rank 0 trains a single-process reference, same initial weights and
learning rate, on the concatenated global batches; with equal shards the averaged
gradient equals the full-batch gradient, so the final parameters must match (float32
tolerance) -- the check that the collectives are right, not just fast.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist

from collectives.workloads.common import backend_arg, init, say, write_result

IN, HIDDEN = 16, 64


def model(seed: int = 0) -> torch.nn.Module:
    """The MLP, with weights from `seed`."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, 1))


def batch(it: int, size: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch `it` of the synthetic task y = sin(x . w) + noise (fixed seed)."""
    g = torch.Generator().manual_seed(seed * 100_003 + it)
    w = torch.linspace(-1, 1, IN)
    x = torch.randn(size, IN, generator=g)
    y = torch.sin(x @ w).unsqueeze(1) + 0.05 * torch.randn(size, 1, generator=g)
    return x, y


def reference(iters: int, global_batch: int, lr: float) -> list[torch.Tensor]:
    """Single-process training on the concatenated global batches."""
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for it in range(iters):
        x, y = batch(it, global_batch)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def main(argv: list[str] | None = None) -> int:
    """Entry point (torchrun environment)."""
    ap = argparse.ArgumentParser(prog="collectives.workloads.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20, help="training iterations (default 20)")
    ap.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    ap.add_argument("--lr", type=float, default=0.05)
    backend_arg(ap)
    a = ap.parse_args(argv)
    rank, n = init(a.backend)
    try:
        if a.batch % n:
            raise SystemExit(f"--batch {a.batch} must divide into {n} equal shards")
        shard = a.batch // n
        ddp = torch.nn.parallel.DistributedDataParallel(model())
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
        say(rank, f"DDP training: MLP {IN}-{HIDDEN}-{HIDDEN}-1, "
                  f"{sum(p.numel() for p in ddp.parameters())} parameters, {n} ranks x "
                  f"{shard} samples, backend {a.backend}")
        losses = []
        for it in range(a.iters):
            x, y = batch(it, a.batch)
            xs, ys = x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(xs), ys)
            loss.backward()  # DDP AllReduces (averages) the gradient buckets here
            opt.step()
            glob = loss.detach().clone()
            dist.all_reduce(glob, op=dist.ReduceOp.AVG)
            losses.append(float(glob))
            say(rank, f"  iteration {it + 1:>3}: loss {losses[-1]:.6f}")
        ok, diff = True, 0.0
        if rank == 0:
            ref = reference(a.iters, a.batch, a.lr)
            diff = max(float((p.detach() - r).abs().max()) for p, r in zip(ddp.parameters(), ref))
            ok = diff < 1e-5
            say(rank, f"final parameters vs a single-process reference on the same "
                      f"{a.batch}-sample batches: max |diff| = {diff:.3g} -> "
                      f"{'MATCH' if ok else 'MISMATCH'}")
        same = torch.tensor([float(p.detach().sum()) for p in ddp.parameters()])
        top = same.clone()
        dist.broadcast(top, 0)
        ok = ok and torch.equal(same, top)  # every replica holds the same weights
        write_result(rank, {"workload": "train", "ok": bool(ok), "losses": losses,
                            "max_param_diff": diff, "ranks": n, "shard": shard})
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
