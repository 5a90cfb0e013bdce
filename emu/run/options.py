"""The `emu run` workload options (--workload, --script and their parameters), checked
against the fabric before anything is built; a bad value raises ValueError naming the
option (docs/CONVENTIONS.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from collectives.launch import MASTER_PORT, plan as job_plan
from collectives.ring import RING_KINDS
from emucore.timedil import parse_size
from topologies.model import Fabric

#: workloads run as a PyTorch job, one worker per GPU (collectives.jobresult)
TORCH_WORKLOADS = ("allreduce", "train", "pipeline", "tensor", "script")
DTYPES = ("float32", "float64", "int32", "int64")


def validate(args: argparse.Namespace, fab: Fabric) -> dict | None:
    """Validate --workload options before anything is built (ValueError names the bad
    one); `--script` sets args.workload to "script"."""
    if args.script is not None:
        if args.workload is not None:
            raise ValueError(f"--script and --workload {args.workload}: pick one")
        if not args.script or not Path(args.script[0]).is_file():
            raise ValueError(f"--script: no such file {(args.script or [''])[0]!r}")
        args.workload = "script"
    if getattr(args, "send", False) and args.workload != "write":
        raise ValueError(f"--send: with --workload write, not {args.workload or 'none'}")
    if args.workload is None:
        return None
    if args.workload == "bookexample":
        return {"gpus": [], "size": 0}
    if args.workload in TORCH_WORKLOADS:
        return _torch_options(args, fab)
    if args.workload == "write":
        roce = getattr(args, "transport", "roce") != "uet"
        if getattr(args, "send", False) and args.write_only and roce:
            raise ValueError("--send and --write-only: a SEND carries no address, RoCE cannot "
                             "spray it (UET can: --transport uet)")
        named = [("--src", args.src), ("--dst", args.dst)]
    else:
        named = [("--to", args.to)] + [("--from", g) for g in args.froms.split(",") if g]
    for opt, g in named:
        if g not in fab.gpus:
            raise ValueError(f"{opt}: no GPU {g!r} in {fab.name} (e.g. {next(iter(fab.gpus))})")
    size = parse_size(args.size or "16MB")
    if not 0 < size < 1 << 31:
        raise ValueError(f"--size: must be 1 B .. 2 GiB, got {args.size!r}")
    return {"gpus": [g for _, g in named], "size": size}


def _torch_options(args: argparse.Namespace, fab: Fabric) -> dict:
    slots = job_plan(fab)  # ValueError unless every host has as many GPUs
    hosts = len({s.host for s in slots})
    if args.workload == "pipeline" and (hosts < 2 or len(slots) // hosts < 2):
        raise ValueError("pipeline: needs 2 hosts with 2 GPUs each (the book's 0a, 1a, "
                         "0b, 1b)")
    bad = [d for d in args.dtype.split(",") if d not in DTYPES]
    if bad:
        raise ValueError(f"--dtype: {bad[0]!r} is not float32, float64, int32 or int64")
    if args.iters is not None and args.iters < 1:
        raise ValueError(f"--iters: must be >= 1, got {args.iters}")
    cwd = getattr(args, "cwd", None)
    if cwd is not None and not Path(cwd).is_dir():
        raise ValueError(f"--cwd: no such directory {cwd!r}")
    if cwd is not None:
        args.cwd = str(Path(cwd).resolve())
    port, ring = getattr(args, "master_port", MASTER_PORT), getattr(args, "ring", "rail")
    if not 1 <= port <= 65535:
        raise ValueError(f"--master-port: must be 1..65535, got {port}")
    if ring not in RING_KINDS:
        raise ValueError(f"--ring: must be {' or '.join(RING_KINDS)}, got {ring!r}")
    sizes = [parse_size(x) for x in (args.size or "64MB").split(",") if x.strip()]
    if not sizes or not all(0 < x < 1 << 31 for x in sizes):
        raise ValueError(f"--size: 1 B .. 2 GiB per rank, got {args.size!r}")
    return {"gpus": list(fab.gpus), "sizes": sizes, "size": max(sizes), "master_port": port,
            "ring": ring}
