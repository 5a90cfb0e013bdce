"""Run one worker of a job the way torchrun would, with the "emu" backend available.

    python -m collectives.worker SCRIPT [ARGS...]
    python -m collectives.worker --module PACKAGE.MODULE [ARGS...]

Registers the backend (book ch.14; `collectives.backend`) and makes it the default for
CPU tensors; translates whatever backend the script names for its CPU tensors ("gloo",
"nccl", "cpu:gloo,cuda:nccl", none) into the one that runs (`collectives.aliases`:
EMU_BACKEND, "emu" by default - the emulated RoCEv2 fabric - or "gloo" for torch's own);
then runs the script or module as __main__ with the given arguments, as `python
SCRIPT` under torchrun does: `sys.argv[0]` is the script, `sys.path[0]` its directory
(a module beside it imports), `__file__` set; for `--module`, `sys.path[0]` is the
working directory, as for `python -m`. The working directory is the launcher's choice
(`emu run --cwd`, default where emu was started). With a compute model
(EMU_GPU_MODEL, `emu run --gpu h100`) the script sees its host's GPUs as CUDA devices
(`collectives.compute.gpuemu`: torch.cuda, .cuda(), autocast, DDP(device_ids=...) on
tensors that live on the CPU) and its matmuls, convolutions and attention cost their GPU
time (`collectives.compute.opmode`); the workload modules model their own steps. The torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, ...) come from the
launcher (`collectives.launch`).
"""

from __future__ import annotations

import os
import runpy
import sys

from collectives import aliases, backend
from collectives.compute.clock import ComputeClock
from collectives.compute.gpu import GpuModel
from collectives.compute.gpuemu import emulated_gpus
from collectives.compute.opmode import GpuOps
from collectives.compute.record import write_record
from emucore.timedil import TimeDilation

GPU_ENV = "EMU_GPU_MODEL"  #: the compute model (`emu run --gpu`): none or h100
GPU_DTYPE = "bfloat16"  #: what the modelled GPU computes in (real training: bf16)


def run_script(script: str) -> None:
    """Run a script as __main__; with a compute model, every FLOP-counted operation of
    this thread is held for its GPU time (collectives.compute.opmode) and the rank's
    compute record is written at the end."""
    name = os.environ.get(GPU_ENV, "none")
    if name in ("", "none"):
        runpy.run_path(script, run_name="__main__")
        return
    clock = ComputeClock(TimeDilation.from_env(os.environ))
    mode = GpuOps(GpuModel.by_name(name), GPU_DTYPE, clock)
    try:
        with emulated_gpus(name, os.environ), mode:
            runpy.run_path(script, run_name="__main__")
    finally:
        write_record(clock, {"gpu": name, "dtype": GPU_DTYPE, "kind": "ops", "ops": mode.ops})


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    target = os.environ.get("EMU_BACKEND", "emu")
    if target not in aliases.TARGETS:
        print(f"collectives.worker: EMU_BACKEND must be {' or '.join(aliases.TARGETS)}, "
              f"got {target!r}", file=sys.stderr)
        return 2
    backend.register(default_for_cpu=target == "emu")
    aliases.install(target)
    hold_groups()
    try:
        return run_target(args)
    finally:
        settle()


def settle() -> None:
    """Free the process groups while the interpreter is whole. A script that never called
    destroy_process_group, or whose DDP model sits in a reference cycle, leaves gloo's
    worker threads to be torn down in Py_FinalizeEx - where torch 2.13 aborts now and then
    ("terminate called without an active exception", SIGABRT/SIGSEGV after the job's
    results were written: 1 run in 6 of 4 local gloo ranks). The groups held since their
    creation (`hold_groups`) go last, after the collection has freed the script's DDP
    Reducers: each Python reference torch drops releases the GIL first, so gloo's
    threads can finish their work while this one joins them."""
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
    HELD.clear()


#: every process group the script created, held from its creation until `settle`
HELD: list = []


def hold_groups() -> None:
    """Hold a Python reference to every process group torch registers (idempotent), so
    that the last reference to a group is never a C++ object freed with the GIL held.

    A DDP model's Reducer (a pybind11 class with an ordinary holder) owns a reference to
    its process group. When the script's destroy_process_group has dropped torch's and
    the model dies - its function returns, the collector frees it - the Reducer's is the
    last: ~ProcessGroupGloo runs on this thread with the GIL held, waits for the queue to
    empty and joins its pt_gloo_runloop threads. A runloop thread that has just run the
    script's last collective then drops the finished work, whose tensors have Python
    objects: decref'ing them takes the GIL - which the joining thread holds. Both wait
    forever (a rank hung at exit after writing its result: gdb showed ~Reducer ->
    ~ProcessGroupGloo -> thread::join on the main thread, ~AsyncBroadcastWork ->
    decref_pyobject -> take_gil on a runloop thread). torch binds ProcessGroup with a
    holder that releases the GIL before destroying it (IntrusivePtrNoGilDestructor,
    torch/csrc/distributed/c10d/init.cpp); while one is held here, the Reducer's is never
    the last, and `settle` drops these when nothing else is left."""
    from torch.distributed import distributed_c10d as c10d

    register = c10d._register_process_group  # pylint: disable=protected-access
    if getattr(register, "__emu_held__", False):
        return

    def held(name, pg):
        HELD.append(pg)
        return register(name, pg)

    held.__emu_held__ = True  # type: ignore[attr-defined]
    c10d._register_process_group = held  # pylint: disable=protected-access


def run_target(args: list[str]) -> int:
    """Run `--module NAME ARGS...` or `SCRIPT ARGS...` as __main__."""
    if args[0] == "--module":
        if len(args) < 2:
            print("collectives.worker: --module needs a module name", file=sys.stderr)
            return 2
        sys.argv = [args[1]] + args[2:]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(args[0])
        sys.argv = [args[0]] + args[1:]
        sys.path[0] = os.path.dirname(script)
        run_script(script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
