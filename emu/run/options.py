"""The options of one `emu run`, typed (`RunOptions`), and the workload's ones
(--workload, --script and their parameters) checked against the fabric before anything
is built; a bad value raises ValueError naming the option (docs/CONVENTIONS.md).

The command line fills a `RunOptions` from argparse (emu.commands.run.run_options), a
lab fills one directly (emu.lab.runner); every step of emu.run reads this, never an
argparse namespace. The defaults here are the command line's defaults.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from collectives.launch import MASTER_PORT, plan as job_plan
from collectives.ring import RING_KINDS
from emucore.timedil import parse_size
from topologies.model import Fabric

#: workloads run as a PyTorch job, one worker per GPU (collectives.jobresult)
TORCH_WORKLOADS = ("allreduce", "train", "pipeline", "tensor", "script")


def has_workers(opts: "RunOptions") -> bool:
    """Whether the run starts PyTorch workers (a torch workload or --script): what
    `--sched auto` goes by (emucore.rtsched.resolve)."""
    return opts.workload in TORCH_WORKLOADS or bool(opts.script)
DTYPES = ("float32", "float64", "int32", "int64")


@dataclass(frozen=True)
class RunOptions:
    """Every option of `emu run TOPOLOGY` (`python -m emu run --help` says what each does)."""

    topology: str  # a preset, rail{R}x{H} or a YAML file (a lab: its fabric's name)
    spines: int | None = None
    tdf: float | str = "auto"  # "auto" (emu.run.autotdf) or a number > 0
    datapath: str = "auto"  # auto | python | fast (emucore.datapath)
    sched: str = "auto"  # auto | rr | normal: agents' and NICs' (emucore.rtsched)
    cli: bool = False
    servers: str | None = None  # a servers file (emu.cluster.servers)
    out: str | None = None  # the run directory (default runs/<topology>-<time>)
    qos: str = "book"
    lb: tuple[str, ...] = ()  # [WHO=]SPEC each (emu.realise.lbplan)
    fault: tuple[str, ...] = ()  # fault schedules (emu.faults.schedule)
    no_shaping: bool = False
    no_plots: bool = False  # skip the plots at the end (`emu report RUNDIR` draws them)
    pcap: str = "hosts"
    pcap_limit: float = 20.0  # MB per capture file
    interval: str = "50us"  # metrics sampling, model time
    quiet: bool = False
    workload: str | None = None  # "script" once resolved with --script (`resolve`)
    script: tuple[str, ...] | None = None  # FILE [ARGS]
    cwd: str | None = None
    backend: str = "emu"
    iters: int | None = None
    gpu: str = "none"
    model: str = "mlp"
    overlap: str = "on"
    ring: str = "rail"
    master_port: int = MASTER_PORT
    dtype: str = "float32"
    src: str = "h1g1"
    dst: str = "h4g2"
    to: str = "h4g1"
    froms: str = "h1g1,h2g1,h3g1"
    size: str | None = None
    write_only: bool = False
    send: bool = False
    dcqcn: str = "paper"
    nic_timeout: str | None = None  # every NIC's retransmission timeout, model time
    transport: str = "roce"
    uet: str | None = None  # K=V,... (with transport uet)
    trim: str | None = None  # "on" or K=V,... (emucore.qos.trim)
    llr: str | None = None
    cbfc: str | None = None
    seed: int = 1  # the switches' and NICs' draws (AgentConfig.test_drop_seed, NicConfig.seed)


def seed_arg(text: str) -> int:
    """`--seed`'s value (emu run, emu lab run): an integer >= 0; argparse's error names
    the option (`argument --seed: an integer >= 0, got '-1'`)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"an integer >= 0, got {text!r}")
    return value


def resolve(opts: RunOptions) -> RunOptions:
    """The options as the run uses them: `--script` makes the workload "script"."""
    if opts.script is None:
        return opts
    if opts.workload not in (None, "script"):
        raise ValueError(f"--script and --workload {opts.workload}: pick one")
    if not opts.script or not Path(opts.script[0]).is_file():
        raise ValueError(f"--script: no such file {(opts.script or [''])[0]!r}")
    return replace(opts, workload="script")


def absolute_cwd(opts: RunOptions) -> RunOptions:
    """`--cwd` made absolute (the workers start elsewhere)."""
    return opts if opts.cwd is None else replace(opts, cwd=str(Path(opts.cwd).resolve()))


def validate(opts: RunOptions, fab: Fabric) -> dict | None:
    """Validate the workload options before anything is built (ValueError names the bad
    one)."""
    opts = resolve(opts)
    if opts.send and opts.workload != "write":
        raise ValueError(f"--send: with --workload write, not {opts.workload or 'none'}")
    if opts.workload is None:
        return None
    if opts.workload == "bookexample":
        return {"gpus": [], "size": 0}
    if opts.workload in TORCH_WORKLOADS:
        return _torch_options(opts, fab)
    if opts.workload == "write":
        if opts.send and opts.write_only and opts.transport != "uet":
            raise ValueError("--send and --write-only: a SEND carries no address, RoCE cannot "
                             "spray it (UET can: --transport uet)")
        named = [("--src", opts.src), ("--dst", opts.dst)]
    else:
        named = [("--to", opts.to)] + [("--from", g) for g in opts.froms.split(",") if g]
    for opt, g in named:
        if g not in fab.gpus:
            raise ValueError(f"{opt}: no GPU {g!r} in {fab.name} (e.g. {next(iter(fab.gpus))})")
    size = parse_size(opts.size or "16MB")
    if not 0 < size < 1 << 31:
        raise ValueError(f"--size: must be 1 B .. 2 GiB, got {opts.size!r}")
    return {"gpus": [g for _, g in named], "size": size}


def _torch_options(opts: RunOptions, fab: Fabric) -> dict:
    slots = job_plan(fab)  # ValueError unless every host has as many GPUs
    hosts = len({s.host for s in slots})
    if opts.workload == "pipeline" and (hosts < 2 or len(slots) // hosts < 2):
        raise ValueError("pipeline: needs 2 hosts with 2 GPUs each (the book's 0a, 1a, "
                         "0b, 1b)")
    bad = [d for d in opts.dtype.split(",") if d not in DTYPES]
    if bad:
        raise ValueError(f"--dtype: {bad[0]!r} is not float32, float64, int32 or int64")
    if opts.iters is not None and opts.iters < 1:
        raise ValueError(f"--iters: must be >= 1, got {opts.iters}")
    if opts.cwd is not None and not Path(opts.cwd).is_dir():
        raise ValueError(f"--cwd: no such directory {opts.cwd!r}")
    port, ring = opts.master_port, opts.ring
    if not 1 <= port <= 65535:
        raise ValueError(f"--master-port: must be 1..65535, got {port}")
    if ring not in RING_KINDS:
        raise ValueError(f"--ring: must be {' or '.join(RING_KINDS)}, got {ring!r}")
    sizes = [parse_size(x) for x in (opts.size or "64MB").split(",") if x.strip()]
    if not sizes or not all(0 < x < 1 << 31 for x in sizes):
        raise ValueError(f"--size: 1 B .. 2 GiB per rank, got {opts.size!r}")
    return {"gpus": list(fab.gpus), "sizes": sizes, "size": max(sizes), "master_port": port,
            "ring": ring}
