"""What a large training job's parallelism asks of the collective library, in one job:
a 2-D DeviceMesh with DTensor (examples/device_mesh.py), expert parallelism's uneven
all-to-all (examples/expert_a2a.py) and an asynchronous AllReduce under compute
(examples/async_overlap.py) - the three scripts beside this one, imported as modules.

    torchrun --nproc-per-node 8 examples/parallelism.py
    sudo python -m emu run rail2x4 --script examples/parallelism.py [--mb 4 --compute 20]

Exit status 0 only if all three are exact on every rank.
"""
import argparse

import torch.distributed as dist

import async_overlap
import device_mesh
import expert_a2a

ap = argparse.ArgumentParser()
ap.add_argument("--mb", type=float, default=4.0, help="async AllReduce size per rank, MB")
ap.add_argument("--compute", type=float, default=2.0,
                help="seconds of matmuls during the async AllReduce")
a = ap.parse_args()
dist.init_process_group(backend="gloo")   # as CPU scripts name it; on emu it runs as emu
results = {"device mesh": device_mesh.main(), "expert all-to-all": expert_a2a.main(),
           "async all_reduce": async_overlap.main(a.mb, a.compute)}
if dist.get_rank() == 0:
    print("parallelism: " + ", ".join(f"{k} {'exact' if v else 'WRONG'}"
                                      for k, v in results.items()))
dist.destroy_process_group()
raise SystemExit(0 if all(results.values()) else 1)
