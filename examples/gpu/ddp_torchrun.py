"""A multi-GPU DDP training script in the style of the public torchrun tutorials: one
process per GPU, `torch.cuda.set_device(LOCAL_RANK)`, the "nccl" backend, the model
moved to its GPU and wrapped with `DDP(model, device_ids=[local_rank])`, a
DistributedSampler, CUDA events timing each epoch. Nothing emu-specific:

    torchrun --nproc-per-node 4 examples/gpu/ddp_torchrun.py 2 1 --batch_size 32
    sudo python -m emu run rail2x4 --gpu h100 --script examples/gpu/ddp_torchrun.py 2 1 --batch_size 32

Positional: total epochs, save every. Each rank trains on its DistributedSampler shard
(no shuffling: equal shards); DDP averages the gradients, so rank 0's weights must equal
those of the same model trained alone on the whole batches (it checks; exit 1 if not)
and it writes results/ddp_torchrun.json (relative to the working directory).
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def dataset(n: int = 512) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 64, generator=g)
    return TensorDataset(x, x @ torch.randn(64, 8, generator=g) + 0.1)


def new_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 8))


class Trainer:
    def __init__(self, model, data, optimizer, gpu_id, save_every):
        self.gpu_id = gpu_id
        self.model = DDP(model.to(gpu_id), device_ids=[gpu_id])
        self.data, self.optimizer, self.save_every = data, optimizer, save_every
        self.epoch_ms = []

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.data.sampler.set_epoch(epoch)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for source, targets in self.data:
            self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))
        end.record()
        torch.cuda.synchronize()
        self.epoch_ms.append(start.elapsed_time(end))
        print(f"[GPU{dist.get_rank()}] Epoch {epoch} | Batchsize: {len(source)} | "
              f"Steps: {len(self.data)} | {self.epoch_ms[-1]:.3f} ms")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def reference(epochs: int, batch_size: int, world: int, device) -> torch.nn.Module:
    """The same training on one GPU: step k's batch is every rank's step-k batch."""
    model = new_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = dataset()
    for epoch in range(epochs):
        shards = [list(DistributedSampler(ds, world, r, shuffle=False)) for r in range(world)]
        for k in range(0, len(shards[0]), batch_size):
            idx = [i for s in shards for i in s[k:k + batch_size]]
            x, y = ds[idx]
            opt.zero_grad()
            F.mse_loss(model(x.to(device)), y.to(device)).backward()
            opt.step()
    return model


def main(total_epochs, save_every, batch_size, out):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = dataset()
    data = DataLoader(ds, batch_size=batch_size, pin_memory=True, shuffle=False,
                      sampler=DistributedSampler(ds, shuffle=False))
    model = new_model()
    trainer = Trainer(model, data, torch.optim.SGD(model.parameters(), lr=0.01), local_rank,
                      save_every)
    trainer.train(total_epochs)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ok = True
    if rank == 0:
        ref = reference(total_epochs, batch_size, world, torch.device("cuda", local_rank))
        diff = max((p - q).abs().max().item()
                   for p, q in zip(trainer.model.module.parameters(), ref.parameters()))
        ok = diff < 1e-5
        print(f"DDP over {world} GPUs vs one GPU: max weight difference {diff:.3g} -> "
              f"{'match' if ok else 'MISMATCH'}")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "ddp_torchrun.json"), "w") as f:
            json.dump({"world": world, "max_diff": diff, "ok": ok, "grad_bytes": grad_bytes,
                       "steps": total_epochs * len(data), "epoch_ms": trainer.epoch_ms,
                       "device": str(next(trainer.model.parameters()).device),
                       "device_name": torch.cuda.get_device_name(),
                       "device_count": torch.cuda.device_count(),
                       "max_memory_allocated": torch.cuda.max_memory_allocated()}, f)
    dist.barrier()
    dist.destroy_process_group()
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size on each device")
    parser.add_argument("--out", default="results", help="result directory, relative to cwd")
    args = parser.parse_args()
    raise SystemExit(0 if main(args.total_epochs, args.save_every, args.batch_size, args.out) else 1)
