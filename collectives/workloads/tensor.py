"""Tensor parallelism: one feed-forward block split across every GPU (book ch.8
"Tensor parallelism"; 004's 3D parallelism), executed over the fabric.

y = W2 . relu(W1 . x + b1) + b2 with W1 split by output rows (column-parallel, as
Megatron-LM does): rank r holds rows [r H/n, (r+1) H/n) of W1 and b1 and computes its
slice of the hidden activations; the partial outputs are joined by AllGather; W2 is
replicated. Backward: the AllGather's gradient is this rank's slice of the incoming
gradient; the gradient of the (replicated) input is the sum of every rank's partial
input gradient, an AllReduce (Megatron's "f" operator). Output and every gradient are
checked against the unsplit layer computed in one process.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist

from collectives.workloads.common import backend_arg, init, say, write_result

IN, OUT, BATCH = 32, 8, 16


class GatherHidden(torch.autograd.Function):
    """Forward: AllGather the hidden slices (dim 1); backward: keep this rank's slice."""

    @staticmethod
    def forward(ctx, part: torch.Tensor) -> torch.Tensor:  # noqa: D102
        n, r = dist.get_world_size(), dist.get_rank()
        ctx.r, ctx.k = r, part.shape[1]
        pieces = [torch.empty_like(part) for _ in range(n)]
        dist.all_gather(pieces, part.contiguous())
        return torch.cat(pieces, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return grad[:, ctx.r * ctx.k:(ctx.r + 1) * ctx.k].contiguous()


class SumInputGrad(torch.autograd.Function):
    """Forward: identity; backward: AllReduce the partial input gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


def full_layer(hidden: int) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """The unsplit block, same weights everywhere (fixed seed)."""
    torch.manual_seed(3)
    return torch.nn.Linear(IN, hidden), torch.nn.Linear(hidden, OUT)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Input and target, identical on every rank (fixed seed)."""
    g = torch.Generator().manual_seed(11)
    return torch.randn(BATCH, IN, generator=g), torch.randn(BATCH, OUT, generator=g)


def main(argv: list[str] | None = None) -> int:
    """Entry point (torchrun environment)."""
    ap = argparse.ArgumentParser(prog="collectives.workloads.tensor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden-per-rank", type=int, default=8, help="W1 rows per rank")
    backend_arg(ap)
    a = ap.parse_args(argv)
    rank, n = init(a.backend)
    try:
        k = a.hidden_per_rank
        hidden = k * n
        l1, l2 = full_layer(hidden)
        w1 = l1.weight.detach()[rank * k:(rank + 1) * k].clone().requires_grad_()
        b1 = l1.bias.detach()[rank * k:(rank + 1) * k].clone().requires_grad_()
        w2 = l2.weight.detach().clone().requires_grad_()
        b2 = l2.bias.detach().clone().requires_grad_()
        x0, target = data()
        x = x0.clone().requires_grad_()
        part = torch.relu(SumInputGrad.apply(x) @ w1.t() + b1)  # this rank's hidden slice
        h = GatherHidden.apply(part)                             # AllGather -> full hidden
        y = h @ w2.t() + b2
        loss = torch.nn.functional.mse_loss(y, target)
        loss.backward()
        # reference: the whole block in this process
        xr = x0.clone().requires_grad_()
        yr = l2(torch.relu(l1(xr)))
        torch.nn.functional.mse_loss(yr, target).backward()
        diffs = {"y": (y - yr).detach().abs().max(), "x.grad": (x.grad - xr.grad).abs().max(),
                 "W1.grad": (w1.grad - l1.weight.grad[rank * k:(rank + 1) * k]).abs().max(),
                 "b1.grad": (b1.grad - l1.bias.grad[rank * k:(rank + 1) * k]).abs().max(),
                 "W2.grad": (w2.grad - l2.weight.grad).abs().max()}
        worst = max(float(v) for v in diffs.values())
        flag = torch.tensor([worst])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        ok = float(flag) < 1e-5
        say(rank, f"Tensor parallelism: FFN {IN} -> {hidden} -> {OUT}, W1 split by rows over "
                  f"{n} ranks ({k} rows each), batch {BATCH}, backend {a.backend}")
        say(rank, f"  forward: AllGather of the hidden slices, {BATCH}x{k} float32 = "
                  f"{BATCH * k * 4} B from each rank -> {BATCH}x{hidden}")
        say(rank, f"  backward: AllReduce of the input gradient, {BATCH}x{IN} float32 = "
                  f"{BATCH * IN * 4} B per rank")
        say(rank, "  vs the unsplit block in one process: " + ", ".join(
            f"{name} {float(v):.2g}" for name, v in diffs.items())
            + f" (worst over ranks {float(flag):.2g}) -> {'MATCH' if ok else 'MISMATCH'}")
        write_result(rank, {"workload": "tensor", "ok": ok, "max_diff": float(flag),
                            "hidden": hidden, "ranks": n})
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
