"""Streams, events and memory statistics of the emulated GPUs (issue 33).

Nothing runs asynchronously: every operation has finished, and its modelled GPU time has
been spent (`collectives.compute.opmode`: the worker sleeps it), when the call returns.
So a stream is a name (query: done; synchronize, wait_*: nothing to wait for) and an
event records the worker's model time when it is recorded: `elapsed_time` is model
milliseconds, lab seconds / TDF (emucore.timedil), as a CUDA event's is GPU
milliseconds. Memory statistics are the worker's resident memory (/proc/self/status
VmRSS, VmHWM for the peak; `reset_peak_memory_stats` resets VmHWM through
/proc/self/clear_refs) above what it held when the script started: the real (CPU-side)
tensors and whatever else the script keeps - a measurement of this process, not a model
of the GPU's allocator.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from emucore.timedil import TimeDilation


class Stream:
    """An emulated CUDA stream: every operation on it has completed."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device, self.priority = device, priority

    def query(self) -> bool:
        """Work done? Always."""
        return True

    def synchronize(self) -> None:
        """Nothing pending."""

    def is_capturing(self) -> bool:
        """No CUDA graph is ever captured (refuse)."""
        return False

    def wait_stream(self, stream: Any) -> None:
        """Nothing pending."""

    def wait_event(self, event: Any) -> None:
        """Nothing pending."""

    def record_event(self, event: Any = None) -> Any:
        """Record `event` (a new one if None) now."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<emulated torch.cuda.Stream device={self.device}>"


class Event:
    """An emulated CUDA event: the model time at record()."""

    clock: Callable[[], float] = time.monotonic
    td: TimeDilation = TimeDilation(1.0)

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, **_: Any) -> None:
        self.enable_timing = enable_timing
        self.model_s: float | None = None

    def record(self, stream: Any = None) -> None:
        """Stamp the worker's model time now (all earlier work has been spent)."""
        self.model_s = self.td.model_time(self.clock())

    def query(self) -> bool:
        """Done? Always."""
        return True

    def wait(self, stream: Any = None) -> None:
        """Nothing pending."""

    def synchronize(self) -> None:
        """Nothing pending."""

    def elapsed_time(self, end: "Event") -> float:
        """Model milliseconds from this event to `end`, CUDA's checks included."""
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument "
                               "'enable_timing=True'.")
        if self.model_s is None or end.model_s is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.model_s - self.model_s) * 1e3


def _status_kb(field: str, path: str = "/proc/self/status") -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Memory:
    """Resident memory above the baseline taken at start, in bytes."""

    def __init__(self, total: int, read: Callable[[str], int] = _status_kb) -> None:
        self.total, self.read = total, read
        self.base = read("VmRSS") * 1024

    def allocated(self, device: Any = None) -> int:
        """Resident bytes above the baseline now."""
        return max(0, self.read("VmRSS") * 1024 - self.base)

    def max_allocated(self, device: Any = None) -> int:
        """Peak resident bytes above the baseline since start or the last reset."""
        return max(0, self.read("VmHWM") * 1024 - self.base)

    def reset_peak(self, device: Any = None) -> None:
        """Reset the peak to now (VmHWM: /proc/self/clear_refs, value 5)."""
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass

    def stats(self, device: Any = None) -> dict[str, int]:
        """The keys of torch.cuda.memory_stats scripts read."""
        now, peak = self.allocated(), self.max_allocated()
        return {"allocated_bytes.all.current": now, "allocated_bytes.all.peak": peak,
                "reserved_bytes.all.current": now, "reserved_bytes.all.peak": peak,
                "active_bytes.all.current": now, "active_bytes.all.peak": peak}

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """(free, total) of the modelled GPU's memory."""
        return max(0, self.total - self.allocated()), self.total
