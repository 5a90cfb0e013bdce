"""Where an emulated GPU's tensors live: in the worker's CPU memory (issue 33).

Every way a script puts a tensor on a GPU is answered with the CPU, after the device is
checked against the host's GPUs (`devices.Devices.to_cpu`):
* `DeviceMap`, a TorchFunctionMode (per thread: the script's): the `device=` argument of
  every torch call - factory functions, `nn.Linear(..., device=)`, `new_*`, `*_like`,
  and `with torch.device("cuda")` / set_default_device, which pass it the same way;
* methods of torch.Tensor, for every thread (the DataLoader's pin-memory thread too):
  `.to("cuda:N")` / `.to(N)` / `.to(device=...)` move nothing (as `.to` of a tensor
  already there: the same tensor), `.cuda()` is `.to("cuda")`, `.pin_memory()` returns
  the tensor, `.record_stream()` does nothing; `nn.Module.to/.cuda` go through them;
* `torch.autocast("cuda", dtype)` (and torch.cuda.amp.autocast) is CPU autocast of that
  dtype: the operations really run in bf16 / fp16;
* DistributedDataParallel(..., device_ids=[i], output_device=i) of a module on the CPU:
  the device ids name the GPU the module is on, so they are checked and dropped;
* `init_process_group(device_id=cuda:i)`: checked and dropped (the emu backend binds no
  device); `torch.load(map_location=cuda / None)` loads to the CPU.
What a tensor reports is the truth: `x.device` is cpu, `x.is_cuda` False (docs/
COLLECTIVES.md "GPU scripts" says why).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode

from collectives.compute.gpuemu.devices import Devices
from collectives.compute.gpuemu.patch import Patches


PARSE_TO = torch._C._nn._parse_to
MOVES = (torch._C.TensorBase.to, torch._C.TensorBase.cuda)


class DeviceMap(TorchFunctionMode):
    """Maps the `device=` argument of every torch call from an emulated GPU to the CPU."""

    def __init__(self, devices: Devices) -> None:
        super().__init__()
        self.devices = devices

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if "device" in kwargs:
            kwargs = {**kwargs, "device": self.devices.to_cpu(kwargs["device"])}
        if func is PARSE_TO or func in MOVES:  # Module.to(1), Tensor.to("cuda") as methods
            args = tuple(self.devices.to_cpu(a) if self._moves_to(func, i, a) else a
                         for i, a in enumerate(args))
        return func(*args, **kwargs)

    def _moves_to(self, func: Any, i: int, a: Any) -> bool:
        """Whether positional argument i of a .to-like call names a GPU (an int only
        where it is the device: _parse_to's first, Tensor.to's after self)."""
        if isinstance(a, int) and not isinstance(a, bool):
            return i == (0 if func is PARSE_TO else 1)
        return self.devices.names_gpu(a)


def tensor_methods(devices: Devices) -> dict[str, Callable]:
    """torch.Tensor methods that would reach for CUDA, answered on the CPU."""
    to = torch.Tensor.to

    def to_(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if args and devices.names_gpu(args[0]) and not isinstance(args[0], torch.Tensor):
            args = (devices.to_cpu(args[0]),) + args[1:]
        if "device" in kwargs:
            kwargs["device"] = devices.to_cpu(kwargs["device"])
        return to(self, *args, **kwargs)

    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
             memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        devices.index(device)
        return to(self, "cpu", non_blocking=non_blocking, memory_format=memory_format)

    def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        return self

    def record_stream(self: torch.Tensor, stream: Any) -> None:
        return None

    return {"to": to_, "cuda": cuda, "pin_memory": pin_memory,
            "record_stream": record_stream}


def autocast_init(devices: Devices) -> Callable:
    """torch.amp.autocast.__init__ with device_type "cuda" read as "cpu"."""
    init = torch.amp.autocast_mode.autocast.__init__

    @functools.wraps(init)
    def __init__(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == "cuda":
            device_type = "cpu"
        init(self, device_type, *args, **kwargs)
    return __init__


def ddp_init(devices: Devices) -> Callable:
    """DistributedDataParallel.__init__ that checks and drops the GPU device ids."""
    init = DistributedDataParallel.__init__
    sig = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = sig.bind(self, *args, **kwargs)
        for name in ("device_ids", "output_device"):
            given = bound.arguments.get(name)
            for d in (given if isinstance(given, (list, tuple)) else [given]):
                if d is not None:
                    devices.to_cpu(d if devices.names_gpu(d) else torch.device(d))
            bound.arguments.pop(name, None)
        init(*bound.args, **bound.kwargs)
    return __init__


def init_process_group(devices: Devices, fn: Callable) -> Callable:
    """init_process_group that checks and drops device_id=cuda:i."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        dev = kwargs.pop("device_id", None)
        if dev is not None:
            devices.to_cpu(dev)
        return fn(*args, **kwargs)
    return wrapper


def load(fn: Callable) -> Callable:
    """torch.load onto the CPU when the map location names a GPU or nothing."""
    @functools.wraps(fn)
    def wrapper(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if map_location is None or isinstance(map_location, (int, torch.device)) or (
                isinstance(map_location, str) and map_location.startswith("cuda")):
            map_location = "cpu"
        elif isinstance(map_location, dict):
            map_location = {k: ("cpu" if str(v).startswith("cuda") else v)
                            for k, v in map_location.items()}
        return fn(f, map_location, *args, **kwargs)
    return wrapper


def install(devices: Devices, patches: Patches) -> None:
    """Patch torch's placement calls (undone by patches.undo)."""
    for name, fn in tensor_methods(devices).items():
        patches.set(torch.Tensor, name, fn)
    patches.set(torch.amp.autocast_mode.autocast, "__init__", autocast_init(devices))
    patches.set(DistributedDataParallel, "__init__", ddp_init(devices))
    ipg = init_process_group(devices, c10d.init_process_group)
    patches.set(c10d, "init_process_group", ipg)
    patches.set(dist, "init_process_group", ipg)
    patches.set(torch, "load", load(torch.load))
