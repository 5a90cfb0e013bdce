"""A plain torch.distributed DDP script, nothing emu-specific: run it with
`torchrun --nproc-per-node 2 examples/ddp_minimal.py` (gloo) or on the emulated fabric
with `sudo python -m emu run rail2x4 --script examples/ddp_minimal.py`."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group()                      # backend: the default for CPU tensors
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(10, 1))            # rank 0's weights are broadcast
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    torch.manual_seed(rank * 100 + step)
    x, y = torch.randn(32, 10), torch.randn(32, 1)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()                            # gradients AllReduced across the ranks
    opt.step()
    avg = loss.detach().clone()
    dist.all_reduce(avg)
    if rank == 0:
        print(f"step {step}: mean loss over {world} ranks {avg.item() / world:.4f}")
dist.destroy_process_group()
