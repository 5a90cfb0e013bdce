"""Emulated CUDA devices for GPU training scripts (issue 33: `emu run --gpu MODEL
--script FILE`).

A `--gpu` worker sees its host's GPUs as CUDA devices: torch.cuda answers for them
(`cudaapi`: devices, streams, events in model time, memory statistics), every way of
putting a tensor on one puts it in the worker's CPU memory (`placement`), so the
operations run on the CPU and are priced by the compute model
(`collectives.compute.opmode`), and the script's collectives - whatever backend it
names - run over the fabric (`collectives.aliases`). What cannot be emulated fails at
the call, naming it (`refuse`). Installed around the script and removed after:

    with emulated_gpus("h100", os.environ):
        runpy.run_path(script, run_name="__main__")

Why this design (patching torch.cuda's Python API and a TorchFunctionMode, not a fake
tensor type or a PrivateUse1 backend): docs/COLLECTIVES.md "GPU scripts".
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Mapping

import torch
import torch.cuda.memory
import torch.cuda.nvtx
import torch.cuda.random
import torch.cuda.streams

from collectives.compute.gpuemu import placement, refuse
from collectives.compute.gpuemu.cudaapi import accelerator_table, cuda_table, nvtx_table
from collectives.compute.gpuemu.devices import Devices
from collectives.compute.gpuemu.patch import Patches
from collectives.compute.gpuemu.timing import Event, Memory
from emucore.timedil import TimeDilation


@contextlib.contextmanager
def emulated_gpus(model: str, env: Mapping[str, str]) -> Iterator[Devices]:
    """The host's GPUs of `model` (LOCAL_WORLD_SIZE of them) as CUDA devices, in this
    thread's torch calls and every thread's torch.cuda / Tensor methods, until the end."""
    devices = Devices.from_env(model, env)
    memory = Memory(devices.spec.total_memory)
    patches = Patches()
    try:
        patches.set(Event, "td", TimeDilation.from_env(env))
        patches.set(Event, "clock", staticmethod(time.monotonic))
        cuda = cuda_table(devices, memory)
        patches.set_all([torch.cuda, torch.cuda.memory, torch.cuda.random, torch.cuda.streams],
                        cuda)
        patches.set_all([torch.cuda.nvtx], nvtx_table())
        patches.set_all([torch.accelerator], accelerator_table(devices, cuda))
        placement.install(devices, patches)
        refuse.install(patches)
        with placement.DeviceMap(devices):
            yield devices
    finally:
        patches.undo()
