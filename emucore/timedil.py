"""Time dilation: the one place that converts model values to lab values.

The emulated fabric runs *time-dilated* (docs/ARCHITECTURE.md "Time: model world and lab
world"; Gupta et al., NSDI 2006, "To Infinity and Beyond: Time-Warped Network
Emulation"). Topologies state model values (200/400 Gbps links, microsecond timers);
the lab runs every rate at model / TDF and stretches every duration by TDF, so byte
counts (queue depths, thresholds, PFC headroom) are identical in both worlds.

Nothing else in the code base multiplies or divides by the TDF: take a `TimeDilation`
and call its methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Default time-dilation factor. A 200 Gbps model link runs at 40 Mbps in the lab. On a
#: 2-core machine rail2x4 with the book's QoS carries an all-NIC cross-rail load of half
#: line rate without loss at TDF 5000 but loses 11 % at 2000 (`python -m emu bench tdf`,
#: docs/PERFORMANCE.md); at full line rate on every NIC, 5000 is at the edge.
DEFAULT_TDF = 5000.0

TDF_ENV = "EMU_TDF"  # how a child process learns the TDF

PFC_QUANTUM_BITS = 512  # IEEE 802.1Qbb: one pause quantum = 512 bit times


@dataclass(frozen=True)
class TimeDilation:
    """Converts between model units (what the book states) and lab units (what runs)."""

    tdf: float = DEFAULT_TDF

    def __post_init__(self) -> None:
        if not (self.tdf > 0):
            raise ValueError(f"tdf: must be > 0, got {self.tdf!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str], default: float = 1.0) -> "TimeDilation":
        """The TDF a process was started with (`EMU_TDF`, set by the orchestrator)."""
        text = environ.get(TDF_ENV)
        try:
            return cls(float(text) if text else default)
        except ValueError:
            raise ValueError(f"{TDF_ENV}: must be a number > 0, got {text!r}") from None

    # rates -----------------------------------------------------------------
    def lab_rate(self, model_bps: float) -> float:
        """Lab bit rate (bit/s) for a model bit rate."""
        return model_bps / self.tdf

    def model_rate(self, lab_bps: float) -> float:
        """Model bit rate (bit/s) for a lab bit rate."""
        return lab_bps * self.tdf

    # durations -------------------------------------------------------------
    def lab_time(self, model_s: float) -> float:
        """Lab duration (s) for a model duration."""
        return model_s * self.tdf

    def model_time(self, lab_s: float) -> float:
        """Model duration (s) for a lab duration."""
        return lab_s / self.tdf

    # PFC -------------------------------------------------------------------
    def pause_model_s(self, quanta: int, model_bps: float) -> float:
        """Model pause duration: quanta x 512 bit times at the model link rate."""
        return quanta * PFC_QUANTUM_BITS / model_bps

    def pause_lab_s(self, quanta: int, model_bps: float) -> float:
        """Lab pause duration for `quanta` received on a link of model rate `model_bps`."""
        return self.lab_time(self.pause_model_s(quanta, model_bps))


def parse_rate(text: str | float | int) -> float:
    """Parse '200G', '400Gbps', '100M', '1.5T' or a number into bit/s."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().lower().replace(" ", "")
    for suffix in ("bps", "b/s", "bit/s"):
        if s.endswith(suffix):
            s = s[: -len(suffix)]
            break
    mult = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    if s and s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


def parse_size(text: str | float | int) -> int:
    """Parse '150KB', '3000 KB', '64MB', '9216' into bytes (KB = 1000 B, KiB = 1024 B)."""
    if isinstance(text, (int, float)):
        return int(text)
    s = str(text).strip().upper().replace(" ", "")
    table = {"KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "KB": 1000, "MB": 1000**2,
             "GB": 1000**3, "K": 1000, "M": 1000**2, "G": 1000**3, "B": 1}
    for suffix, mult in table.items():
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * mult)
    return int(float(s))


def parse_duration(text: str | float | int) -> float:
    """Parse '55us', '1.5 ms', '200ms', '2s', '10ns' or seconds into seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().lower().replace(" ", "").replace("µ", "u")
    for suffix, mult in (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    return float(s)


def format_rate(bps: float) -> str:
    """Human-readable bit rate: 200 Gbps, 400 Mbps, 1.5 kbps."""
    for unit, mult in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("kbps", 1e3)):
        if bps >= mult:
            return f"{bps / mult:g} {unit}"
    return f"{bps:g} bps"


def format_duration(seconds: float) -> str:
    """Human-readable duration: 83.9 µs, 1.2 ms, 3 s."""
    for unit, mult in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= mult:
            return f"{seconds / mult:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"
