"""What the PyTorch workloads share: torchrun's environment, the backend, results.

Every workload runs on every emulated GPU under the launcher (`collectives.launch`),
with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), and writes
its result as JSON to $EMU_RESULT_DIR/rank<RANK>.json for `emu run` to collect.
"""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist

import collectives.backend  # noqa: F401  (registers the "emu" backend with torch)
from emucore.atomic import write_json_atomic


def init(backend: str | None = None) -> tuple[int, int]:
    """init_process_group with `backend` (default $EMU_BACKEND or "emu"); (rank, size)."""
    backend = backend or os.environ.get("EMU_BACKEND", "emu")
    dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size()


def backend_arg(ap: Any) -> None:
    """The --backend option every workload takes."""
    ap.add_argument("--backend", default=os.environ.get("EMU_BACKEND", "emu"),
                    help="torch.distributed backend: emu (the fabric, default) or gloo")


def write_result(rank: int, result: dict) -> None:
    """rank<RANK>.json in $EMU_RESULT_DIR (nothing when unset)."""
    out = os.environ.get("EMU_RESULT_DIR")
    if out:
        write_json_atomic(os.path.join(out, f"rank{rank}.json"), {"rank": rank, **result})


def say(rank: int, *args: Any) -> None:
    """Print on rank 0 only."""
    if rank == 0:
        print(*args, flush=True)
