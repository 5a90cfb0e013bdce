"""A mixed-precision DDP training script in the style of the public GPU ones (nanoGPT's
train.py): device = f"cuda:{LOCAL_RANK}", set_device, the "nccl" backend, tensors made
and moved with device=, `torch.autocast("cuda", dtype=torch.bfloat16)`, a GradScaler,
pinned batches copied with non_blocking, CUDA-event timing of each step and of one
matmul, memory statistics. Nothing emu-specific:

    torchrun --nproc-per-node 4 examples/gpu/amp_train.py --steps 3
    sudo python -m emu run rail2x4 --gpu h100 --script examples/gpu/amp_train.py --steps 3

`--custom-kernel` first builds a CUDA kernel with torch.utils.cpp_extension.load_inline
(as fused-kernel scripts do). Rank 0 writes results/amp_train.json (relative to the
working directory): the step and matmul times by CUDA events and by the wall clock.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--width", type=int, default=256)
ap.add_argument("--custom-kernel", action="store_true")
ap.add_argument("--out", default="results")
a = ap.parse_args()

if a.custom_kernel:
    from torch.utils.cpp_extension import load_inline
    gelu = load_inline(name="fused_gelu", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                       cuda_sources="__global__ void k(float* x) {}  // ...",
                       functions=["gelu"])

local_rank = int(os.environ["LOCAL_RANK"])
device = f"cuda:{local_rank}"
torch.cuda.set_device(device)
dist.init_process_group(backend="nccl")
rank = dist.get_rank()
torch.manual_seed(1337 + rank)
torch.backends.cuda.matmul.allow_tf32 = True
ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16)
d = a.width
model = torch.nn.Sequential(torch.nn.Embedding(64, d), torch.nn.LayerNorm(d),
                            torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                            torch.nn.Linear(4 * d, d), torch.nn.Linear(d, 64)).to(device)
model = DDP(model, device_ids=[local_rank])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
step_ms, wall_ms = [], []
for step in range(a.steps):
    x = torch.randint(0, 64, (a.batch, 32)).pin_memory().to(device, non_blocking=True)
    y = torch.randint(0, 64, (a.batch, 32), device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.monotonic()
    start.record()
    with ctx:
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 64), y.view(-1))
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    end.record()
    torch.cuda.synchronize()
    wall_ms.append((time.monotonic() - t0) * 1e3)
    step_ms.append(start.elapsed_time(end))
    if rank == 0:
        print(f"step {step}: loss {loss.item():.4f}, {step_ms[-1]:.3f} ms, "
              f"logits {logits.dtype}, scale {scaler.get_scale():g}")

n = 512
p, q = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t0 = time.monotonic()
start.record()
r = p @ q
end.record()
torch.cuda.synchronize()
mm_wall = (time.monotonic() - t0) * 1e3
if rank == 0:
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "amp_train.json"), "w") as f:
        json.dump({"step_ms": step_ms, "wall_ms": wall_ms, "matmul_n": n,
                   "matmul_flops": 2 * n ** 3, "matmul_ms": start.elapsed_time(end),
                   "matmul_wall_ms": mm_wall, "logits_dtype": str(logits.dtype),
                   "grad_bytes": sum(t.numel() * t.element_size() for t in model.parameters()),
                   "steps": a.steps, "scale": scaler.get_scale(),
                   "max_memory_allocated": torch.cuda.max_memory_allocated()}, f)
    print(f"matmul {n}: {start.elapsed_time(end):.4f} ms by CUDA events")
dist.barrier()
dist.destroy_process_group()
