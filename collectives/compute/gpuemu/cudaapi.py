"""The torch.cuda API of the emulated GPUs (issue 33): what `torch.cuda.*` answers while
a `--gpu` worker runs a script. A CPU build of torch has no `torch._C._cuda_*`, so its
torch.cuda fails at the first call (`set_device`: "module 'torch._C' has no attribute
'_cuda_setDevice'"); these replace the calls training scripts and torch's own Python
code make (torch.amp, DDP, the DataLoader's pin-memory thread, DeviceMesh):

* devices: is_available True, device_count the host's GPUs, set_device /
  current_device / `device(i)` / device_of, get_device_name ("... (emulated by emu)"),
  get_device_capability, get_device_properties, is_bf16_supported True;
* time: synchronize (nothing pending), Stream / current_stream / stream(...), Event with
  elapsed_time in model ms (`timing`);
* memory: memory_allocated, max_memory_allocated, memory_reserved, memory_stats,
  reset_peak_memory_stats, mem_get_info, empty_cache (`timing.Memory`);
* random: the emulated GPU draws from the CPU generator (its tensors are made on the
  CPU), so the CUDA generator calls seed nothing and get_rng_state answers the CPU's;
* nvtx ranges are no-ops.
The same names go to torch.cuda, torch.cuda.memory / random (torch's code imports from
there) and torch.accelerator's counterparts. Not offered (CUDA graphs, jiterator): `refuse`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from collectives.compute.gpuemu.devices import Devices
from collectives.compute.gpuemu.timing import Event, Memory, Stream


class _DeviceContext:
    """torch.cuda.device(i): the current device inside the block."""

    def __init__(self, devices: Devices, device: Any) -> None:
        self.devices = devices
        self.idx = -1 if device is None else devices.index(device, optional=False)
        self.prev = devices.current

    def __enter__(self) -> None:
        self.prev = self.devices.current
        self.devices.set(self.idx)

    def __exit__(self, *_: Any) -> None:
        self.devices.current = self.prev


def cuda_table(devices: Devices, memory: Memory) -> dict[str, Any]:
    """Name -> replacement for the torch.cuda namespace."""
    streams: dict[int, Stream] = {}

    def current_stream(device: Any = None) -> Stream:
        i = devices.index(device)
        return streams.setdefault(i, Stream(i))

    @contextlib.contextmanager
    def stream(s: Any) -> Iterator[None]:
        yield

    def device(dev: Any) -> _DeviceContext:
        return _DeviceContext(devices, dev)

    def device_of(obj: Any) -> Any:
        return contextlib.nullcontext()

    def noop(name: str) -> Any:  # one function per name: torch._dynamo's rule map
        def nothing(*_: Any, **__: Any) -> None:  # refuses one object under two names
            return None
        nothing.__name__ = name
        return nothing

    def synchronize(d: Any = None) -> None:
        devices.index(d)  # checks the device; nothing is pending

    cpu_state = torch.get_rng_state
    return {
        "is_available": lambda: True, "is_initialized": lambda: True,
        "init": noop("init"), "_lazy_init": noop("_lazy_init"),
        "device_count": lambda: devices.count,
        "current_device": lambda: devices.current,
        "set_device": lambda d: devices.set(d),
        "device": device, "device_of": device_of,
        "get_device_name": lambda d=None: devices.spec.properties(devices.index(d)).name,
        "get_device_capability": lambda d=None: (devices.spec.major, devices.spec.minor),
        "get_device_properties": lambda d=None: devices.spec.properties(devices.index(d)),
        "is_bf16_supported": lambda including_emulation=True: True,
        "get_arch_list": lambda: [f"sm_{devices.spec.major}{devices.spec.minor}"],
        "synchronize": synchronize,
        "Stream": Stream, "Event": Event, "is_current_stream_capturing": lambda: False, "current_stream": current_stream,
        "default_stream": lambda device=None: current_stream(device), "stream": stream, "set_stream": noop("set_stream"),
        "memory_allocated": memory.allocated, "max_memory_allocated": memory.max_allocated,
        "memory_reserved": lambda d=None: memory.allocated(d),
        "max_memory_reserved": lambda d=None: memory.max_allocated(d),
        "reset_peak_memory_stats": memory.reset_peak,
        "reset_max_memory_allocated": lambda d=None: memory.reset_peak(d),
        "memory_stats": memory.stats, "mem_get_info": memory.mem_get_info,
        "empty_cache": noop("empty_cache"), "ipc_collect": noop("ipc_collect"),
        "set_per_process_memory_fraction": noop("set_per_process_memory_fraction"),
        "memory_summary": lambda d=None, abbreviated=False: (
            f"emulated {devices.spec.name}: {memory.allocated()} B resident above start, "
            f"peak {memory.max_allocated()} B"),
        "manual_seed": noop("manual_seed"), "manual_seed_all": noop("manual_seed_all"), "seed": noop("seed"),
        "seed_all": noop("seed_all"), "initial_seed": torch.initial_seed,
        "get_rng_state": lambda d="cuda": cpu_state(),
        "get_rng_state_all": lambda: [cpu_state() for _ in range(devices.count)],
        "set_rng_state": noop("set_rng_state"), "set_rng_state_all": noop("set_rng_state_all"),
    }


def nvtx_table() -> dict[str, Any]:
    """torch.cuda.nvtx: ranges and marks do nothing."""
    @contextlib.contextmanager
    def rng(*_: Any, **__: Any) -> Iterator[None]:
        yield

    return {"range_push": lambda msg: 0, "range_pop": lambda: 0, "mark": lambda msg: None,
            "range_start": lambda msg: 0, "range_end": lambda rid: None, "range": rng}


def accelerator_table(devices: Devices, cuda: dict[str, Any]) -> dict[str, Any]:
    """torch.accelerator: the emulated GPUs are the accelerator (`cuda`: cuda_table's)."""
    same = ("device_count", "current_stream", "set_stream", "synchronize", "empty_cache",
            "memory_allocated", "max_memory_allocated", "memory_reserved",
            "max_memory_reserved", "memory_stats", "reset_peak_memory_stats")
    return {**{name: cuda[name] for name in same},
            "is_available": lambda check_fork=True: True,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "current_device_index": lambda: devices.current,
            "current_device_idx": lambda: devices.current,
            "set_device_index": lambda d: devices.set(d),
            "set_device_idx": lambda d: devices.set(d),
            "device_index": cuda["device"],
            "get_memory_info": lambda d=None: cuda["mem_get_info"](d),
            "get_device_capability": lambda d=None: {"major": devices.spec.major,
                                                     "minor": devices.spec.minor}}
