"""Data-parallel training with DDP over the fabric (book ch.8 "Data parallelism",
Fig 8-2; ch.14: gradients AllReduced every iteration), with an optional GPU compute
model (issue 15: `--gpu h100`).

Every iteration the global batch is cut into WORLD_SIZE equal shards; each rank runs
forward/backward on its shard inside DistributedDataParallel, whose bucketed AllReduce
averages the gradients; SGD steps. The loss printed is the global mean.

Models (`collectives.workloads.models`): `mlp` (default) learns a synthetic regression;
at the end rank 0 trains a single-process reference on the whole batches - with equal
shards the averaged gradient is the full-batch gradient, so the parameters must match
(float32 tolerance): the check that the collectives are right, not just fast.
`gpt2-small` and `xfmr-d2048` are the measured transformer shapes; their check is that
every replica holds the same weights after training (the AllReduce gave every rank the
same bytes) and, with `--reference` on a small configuration, the single-process match.

With `--gpu h100` (or EMU_GPU_MODEL) each rank spends, in model time, what its forward
and backward would take on that GPU: the FLOPs of one step of the *modelled* shape
(`--gpu-batch` samples of `--gpu-seq` tokens per GPU, default the table's 8 x 1024) are
counted on torch's meta device with FlopCounterMode and priced from the measured figures
of that shape; the CPU meanwhile runs the *real* shape (`--batch`, `--seq`: small, so
that 8 CPU workers fit on two cores) and sleeps the rest. The gradients' size - what the
fabric carries - is the model's, whatever the shape. Real DDP on GPUs AllReduces bf16
gradients: `--wire bf16` (the default for the transformers) registers a hook doing
what DDP's `bf16_compress_hook` does (which DDP allows only with CUDA). `--overlap off` runs the backward under `no_sync()` and AllReduces
the buckets after it: the step without compute/communication overlap. Each iteration's
model time is split into compute, communication, overlap and exposed communication.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

from collectives.compute.clock import ComputeClock
from collectives.compute.gpu import MLP, GpuModel
from collectives.compute.meter import attach, count_step
from collectives.compute.record import write_record
from collectives.workloads.common import backend_arg, init, say, write_result
from collectives.workloads.models import MLP_IN, MODELS, Spec
from collectives.workloads.overlap import (allreduce_after_backward, bf16_wire_hook,
                                          comm_intervals, iteration_split)
from emucore.timedil import TimeDilation

GPU_ENV = "EMU_GPU_MODEL"  #: `emu run --gpu NAME` sets it for every worker


def reference(spec: Spec, iters: int, global_batch: int, seq: int, lr: float) -> list[torch.Tensor]:
    """Single-process training on the concatenated global batches."""
    m = spec.build()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for it in range(iters):
        x, y = spec.batch(it, global_batch, seq)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def compute_model(a: argparse.Namespace, spec: Spec, net: torch.nn.Module) -> tuple:
    """Count the modelled step's FLOPs and attach the hold points; (clock, info)."""
    gpu = GpuModel.by_name(a.gpu)
    shape = ((a.gpu_batch, MLP_IN) if not spec.d else (a.gpu_batch, a.gpu_seq, spec.d))
    cost = count_step(spec.build, lambda: (torch.empty(*shape),), lambda y: y.float().pow(2).mean())
    family = gpu.family_for(spec.d, spec.layers, a.gpu_dtype) if spec.d else MLP
    step_s = gpu.step_seconds(cost.total, a.gpu_dtype, family)
    clock = ComputeClock(TimeDilation.from_env(os.environ))
    attach(net, cost, step_s, clock)
    fwd = sum(cost.fwd.values())
    return clock, {"gpu": gpu.name, "dtype": a.gpu_dtype, "family": family,
                   "shape": list(shape), "flops_step": cost.total, "flops_fwd": fwd,
                   "flops_bwd": cost.total - fwd, "step_model_ms": step_s * 1e3,
                   "tflops": cost.total / step_s / 1e12}


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The workload's options."""
    ap = argparse.ArgumentParser(prog="collectives.workloads.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mlp", choices=sorted(MODELS))
    ap.add_argument("--iters", type=int, default=None,
                    help="training iterations (default 20 for mlp, 2 for the transformers)")
    ap.add_argument("--batch", type=int, default=None,
                    help="global batch the CPUs run (default 64 for mlp, 1 per rank else)")
    ap.add_argument("--seq", type=int, default=32, help="tokens per sample the CPUs run")
    ap.add_argument("--lr", type=float, default=None,
                    help="SGD learning rate (default 0.05 for mlp, 0.001 else)")
    ap.add_argument("--gpu", default=os.environ.get(GPU_ENV, "none"), choices=["none", "h100"],
                    help="compute model (default $EMU_GPU_MODEL or none: compute is free)")
    ap.add_argument("--gpu-batch", type=int, default=8, help="modelled samples per GPU")
    ap.add_argument("--gpu-seq", type=int, default=1024, help="modelled tokens per sample")
    ap.add_argument("--gpu-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--wire", default=None, choices=["fp32", "bf16"],
                    help="gradient dtype on the wire (default fp32 for mlp, bf16 else)")
    ap.add_argument("--overlap", default="on", choices=["on", "off"],
                    help="off: AllReduce the gradients after the backward, not during it")
    ap.add_argument("--reference", action="store_true",
                    help="transformers: compare with a single-process run (small shapes)")
    backend_arg(ap)
    a = ap.parse_args(argv)
    spec = MODELS[a.model]
    a.iters = a.iters if a.iters is not None else (20 if not spec.d else 2)
    a.wire = a.wire or ("fp32" if not spec.d else "bf16")
    a.lr = a.lr if a.lr is not None else (0.05 if not spec.d else 1e-3)
    return a


def main(argv: list[str] | None = None) -> int:
    """Entry point (torchrun environment)."""
    a = parse(argv)
    spec = MODELS[a.model]
    rank, n = init(a.backend)
    try:
        batch = a.batch if a.batch is not None else (64 if not spec.d else n)
        if batch % n:
            raise SystemExit(f"--batch {batch} must divide into {n} equal shards")
        shard = batch // n
        net = spec.build()
        ddp = torch.nn.parallel.DistributedDataParallel(
            net, init_sync=not spec.d, gradient_as_bucket_view=bool(spec.d))
        if a.wire == "bf16":
            ddp.register_comm_hook(None, bf16_wire_hook)
        clock, costinfo = compute_model(a, spec, net) if a.gpu != "none" else (None, None)
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
        nparams = sum(p.numel() for p in ddp.parameters())
        wire = torch.bfloat16 if a.wire == "bf16" else torch.float32
        say(rank, f"DDP training: {spec.name}, {nparams:,} parameters, {n} ranks x {shard} "
                  f"samples{'' if not spec.d else f' x {a.seq} tokens'}, backend {a.backend}, "
                  f"gradients {a.wire} on the wire ({nparams * wire.itemsize / 1e6:.1f} MB per "
                  f"step), overlap {a.overlap}")
        if costinfo:
            say(rank, f"  compute model {a.gpu} ({costinfo['family']}, {a.gpu_dtype}): one "
                      f"step of {costinfo['shape']} = {costinfo['flops_step'] / 1e12:.3f} "
                      f"TFLOP -> {costinfo['step_model_ms']:.3f} ms model "
                      f"({costinfo['tflops']:.1f} TFLOPS)")
        losses, windows = [], []
        for it in range(a.iters):
            x, y = spec.batch(it, batch, a.seq)
            xs, ys = x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard]
            t0 = time.monotonic()
            opt.zero_grad()
            if a.overlap == "on":
                loss = torch.nn.functional.mse_loss(ddp(xs), ys)
                loss.backward()  # DDP AllReduces the gradient buckets as they are ready
            else:
                with ddp.no_sync():
                    loss = torch.nn.functional.mse_loss(ddp(xs), ys)
                    loss.backward()
                allreduce_after_backward(list(ddp.parameters()), wire)
            opt.step()
            windows.append((t0, time.monotonic()))
            glob = loss.detach().clone()
            dist.all_reduce(glob, op=dist.ReduceOp.AVG)
            losses.append(float(glob))
            say(rank, f"  iteration {it + 1:>3}: loss {losses[-1]:.6f}")
        ok, diff = True, 0.0
        if rank == 0 and (not spec.d or a.reference):
            ref = reference(spec, a.iters, batch, a.seq, a.lr)
            diff = max(float((p.detach() - r).abs().max()) for p, r in zip(ddp.parameters(), ref))
            ok = diff < (1e-5 if not spec.d else 1e-3)
            say(rank, f"final parameters vs a single-process reference on the same "
                      f"{batch}-sample batches: max |diff| = {diff:.3g} -> "
                      f"{'MATCH' if ok else 'MISMATCH'}")
        same = torch.tensor([float(p.detach().double().sum()) for p in ddp.parameters()],
                            dtype=torch.float64)
        top = same.clone()
        dist.broadcast(top, 0)
        ok = ok and torch.equal(same, top)  # every replica holds the same weights
        result = {"workload": "train", "ok": bool(ok), "losses": losses, "model": spec.name,
                  "params": nparams, "max_param_diff": diff, "ranks": n, "shard": shard,
                  "wire": a.wire, "overlap": a.overlap, "replicas_equal": bool(
                      torch.equal(same, top))}
        if clock is not None:
            td = clock.td
            compute = [(r.start_lab, r.end_lab) for r in clock.regions]
            result["compute"] = {**costinfo, **clock.totals()}
            write_record(clock, {**costinfo, "kind": "step"})
            result["iterations"] = iteration_split(windows, compute, comm_intervals(), td)
            last = result["iterations"][-1]
            say(rank, f"  last iteration (model): {last['window_ms']:.3f} ms = compute "
                      f"{last['compute_ms']:.3f} + exposed communication "
                      f"{last['exposed_comm_ms']:.3f} + other {last['other_ms']:.3f}; "
                      f"communication {last['comm_ms']:.3f} of which {last['overlap_ms']:.3f} "
                      f"overlapped; worst compute lag {clock.totals()['lag_max_model_s'] * 1e6:.2f} us")
        write_result(rank, result)
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
