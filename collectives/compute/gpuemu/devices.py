"""The emulated GPUs of one worker (issue 33: `emu run --gpu MODEL`): how many, what they
are called, which one is current, and what a device argument naming one means.

A worker sees its host's GPUs as CUDA devices 0..N-1, N = LOCAL_WORLD_SIZE (torchrun's
GPUs per node, the same on every host: `collectives.launch.plan`). They are emulated:
every tensor lives in the worker's CPU memory, so a device argument that names one of
them ("cuda", "cuda:1", torch.device("cuda", 1), a bare index) means the CPU
(`to_cpu`); one that names a GPU the host does not have fails as CUDA does ("invalid
device ordinal"). The current device is the process's (CUDA's is per thread; scripts set
it once, from LOCAL_RANK). Pure but for torch.device: no CUDA is needed or touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

CPU = torch.device("cpu")


@dataclass(frozen=True)
class GpuSpec:
    """What get_device_properties reports of one emulated GPU (the vendor's figures)."""

    name: str
    major: int
    minor: int
    total_memory: int           # bytes
    multi_processor_count: int

    def properties(self, index: int) -> "Properties":
        """The properties object of device `index` (as torch.cuda's, the fields scripts read)."""
        return Properties(f"{self.name} (emulated by emu)", self.major, self.minor,
                          self.total_memory, self.multi_processor_count, index)


@dataclass(frozen=True)
class Properties:
    """torch.cuda.get_device_properties' answer: the fields training scripts read."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    index: int
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    L2_cache_size: int = 50 * 2**20  # noqa: N815 (torch's name)


#: the models `emu run --gpu` knows; H100 SXM 80GB: compute capability 9.0, 132 SMs
SPECS = {"h100": GpuSpec("NVIDIA H100 80GB HBM3", 9, 0, 80 * 2**30, 132)}


class DeviceError(RuntimeError):
    """A device argument that names no emulated GPU (CUDA's "invalid device ordinal")."""


@dataclass
class Devices:
    """The emulated GPUs of this worker and which one is current."""

    spec: GpuSpec
    count: int
    current: int = 0
    said: list = field(default_factory=list)

    @classmethod
    def from_env(cls, model: str, env: Mapping[str, str]) -> "Devices":
        """The host's GPUs (LOCAL_WORLD_SIZE of them) of `model`."""
        if model not in SPECS:
            raise ValueError(f"gpu: one of {', '.join(SPECS)}, got {model!r}")
        count = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
        if count < 1:
            raise ValueError(f"LOCAL_WORLD_SIZE: must be >= 1, got {count}")
        return cls(SPECS[model], count)

    def index(self, device: Any = None, optional: bool = True) -> int:
        """The GPU index a device argument names (None / "cuda" without index: the
        current one); a CPU device or another type is refused."""
        if device is None and optional:
            return self.current
        if isinstance(device, int) and not isinstance(device, bool):
            return self._check(device)
        dev = torch.device(device) if isinstance(device, str) else device
        if not isinstance(dev, torch.device) or dev.type != "cuda":
            raise DeviceError(f"device: expected a CUDA device, got {device!r}")
        return self.current if dev.index is None else self._check(dev.index)

    def _check(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise DeviceError(f"CUDA error: invalid device ordinal: cuda:{i} (the emulated "
                              f"host has {self.count} GPUs, cuda:0..cuda:{self.count - 1})")
        return i

    def set(self, device: Any) -> None:
        """torch.cuda.set_device: a negative index is a no-op, as CUDA's."""
        if isinstance(device, int) and device < 0:
            return
        self.current = self.index(device, optional=False)

    def names_gpu(self, device: Any) -> bool:
        """Whether a device argument names an emulated GPU (a bare int counts: torch reads
        it as a CUDA index)."""
        if isinstance(device, bool):
            return False
        if isinstance(device, int):
            return True
        if isinstance(device, str):
            return device.split(":", 1)[0].strip() == "cuda"
        return isinstance(device, torch.device) and device.type == "cuda"

    def to_cpu(self, device: Any) -> Any:
        """The device to really use: the CPU for an emulated GPU (checked), else as given."""
        if self.names_gpu(device):
            self.index(device, optional=False)
            return CPU
        return device
