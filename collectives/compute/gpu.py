"""What compute costs on a GPU, from measured figures (issue 15: `--gpu h100`).

The data (collectives/compute/data, measured on one H100 SXM, PyTorch 2.11, CUDA 13.0):
forward + backward times against the FLOPs torch's `FlopCounterMode` counts, for MLPs and
for pre-norm transformer stacks of given width d and depth L, in bf16 and fp32 (TF32
off); and square matmuls. They say two things a single peak figure cannot: small steps
are bound by kernel launches, not FLOPs (a tiny MLP's fwd+bwd takes 0.72 ms, a 12-layer
d 768 stack ~23 ms whatever its size below ~2 TFLOP), and throughput grows with size (to
~614 TFLOPS bf16, ~50 fp32).

The model of one forward + backward step of F counted FLOPs, per *family* (the MLP
family; one per transformer shape d x L measured), from the family's measured points
(F_i, t_i) of one dtype sorted by F:
* t(F) at a measured F_i is t_i, capped by the time of every larger measured step of
  the family (a running minimum from the right): a smaller step cannot take longer than
  a larger one, so where the data says it did (three points: xfmr d768 L12 b1 s256 bf16,
  23.68 ms against b4 s512's 22.28; mlp w16 and w256 fp32, 2.31 and 1.17 ms against
  w1024's 0.95 - launch-bound noise and warm-up) the larger step's time is used;
* between two points, linear interpolation in log F - log t (a power law piece);
* below the first point, its time: the launch-bound floor;
* above the last point, F / (the last point's throughput): the best measured rate, never
  extrapolated upwards.
A family is chosen by the caller (the train workload knows its shape); `family_for`
picks the transformer family of a width and depth, else the MLP family. `op_seconds`
prices one matmul-like operation from the matmul records (max(the n = 1024 matmul's time
as a floor, F / interpolated throughput)) for scripts whose shape emu does not know.
Pure: no clock, no torch.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
DTYPES = ("bfloat16", "float32")
MLP = "mlp"


def _dtype(name: str) -> str:
    d = name.replace("torch.", "")
    if d not in DTYPES:
        raise ValueError(f"dtype: one of {', '.join(DTYPES)}, got {name!r}")
    return d


def family_name(d: int, layers: int) -> str:
    """The family of a transformer stack of width d and depth L ("xfmr d768 L12")."""
    return f"xfmr d{d} L{layers}"


@dataclass(frozen=True)
class Curve:
    """Measured (FLOPs, seconds) of one family and dtype, increasing in both."""

    flops: tuple[float, ...]
    seconds: tuple[float, ...]

    @classmethod
    def of(cls, points: list[tuple[float, float]]) -> "Curve":
        """From measured points: sorted by FLOPs, each time capped by every larger
        point's (a running minimum from the right), so the curve never decreases."""
        best: dict[float, float] = {}
        for x, y in points:
            best[float(x)] = min(y, best.get(float(x), math.inf))
        f = sorted(best)
        t, low = [0.0] * len(f), math.inf
        for i in range(len(f) - 1, -1, -1):
            low = min(low, best[f[i]])
            t[i] = low
        return cls(tuple(f), tuple(t))

    def seconds_for(self, flops: float) -> float:
        """Seconds of a step of `flops` (see the module docstring)."""
        if flops < 0:
            raise ValueError(f"flops: must be >= 0, got {flops}")
        f, t = self.flops, self.seconds
        if flops <= f[0]:
            return t[0]
        if flops >= f[-1]:
            return t[-1] * flops / f[-1]
        i = bisect.bisect_right(f, flops)
        lf0, lf1 = math.log(f[i - 1]), math.log(f[i])
        lt0, lt1 = math.log(t[i - 1]), math.log(t[i])
        y = math.exp(lt0 + (lt1 - lt0) * (math.log(flops) - lf0) / (lf1 - lf0))
        return min(max(y, t[i - 1]), t[i])  # no rounding below the point before


class GpuModel:
    """A GPU's compute costs from its measured tables."""

    def __init__(self, name: str, steps: dict[tuple[str, str], Curve],
                 matmul: dict[str, Curve]) -> None:
        self.name, self.steps, self.matmul = name, steps, matmul

    @classmethod
    def h100(cls, data: Path = DATA) -> "GpuModel":
        """The H100 SXM of collectives/compute/data."""
        recs = json.loads((data / "h100-flopcounter.json").read_text())
        pts: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for r in recs:
            words = r["case"].split()
            fam = MLP if words[0] == "mlp" else f"xfmr {words[1]} {words[2]}"
            pts.setdefault((fam, _dtype(r["dtype"])), []).append(
                (r["flops_counted"], r["seconds"]))
        mm: dict[str, list[tuple[float, float]]] = {}
        for r in json.loads((data / "h100-compute.json").read_text()):
            if r["kind"] == "matmul":
                mm.setdefault(_dtype(r["dtype"]), []).append((2 * r["n"] ** 3, r["s"]))
        return cls("h100", {k: Curve.of(v) for k, v in pts.items()},
                   {k: Curve.of(v) for k, v in mm.items()})

    @classmethod
    def by_name(cls, name: str) -> "GpuModel":
        """The model `--gpu NAME` names ("h100")."""
        if name != "h100":
            raise ValueError(f"--gpu: h100 or none, got {name!r}")
        return cls.h100()

    def families(self, dtype: str = "bfloat16") -> list[str]:
        """The families measured in `dtype`."""
        d = _dtype(dtype)
        return sorted(f for f, dt in self.steps if dt == d)

    def family_for(self, d: int | None = None, layers: int | None = None,
                   dtype: str = "bfloat16") -> str:
        """The transformer family of width d and depth `layers` if measured, else MLP."""
        fam = family_name(d, layers) if d and layers else MLP
        return fam if (fam, _dtype(dtype)) in self.steps else MLP

    def step_seconds(self, flops: float, dtype: str = "bfloat16", family: str = MLP) -> float:
        """Seconds of one forward + backward step of `flops` counted FLOPs."""
        key = (family, _dtype(dtype))
        if key not in self.steps:
            raise ValueError(f"family: {family!r} is not measured in {key[1]} "
                             f"(measured: {', '.join(self.families(key[1]))})")
        return self.steps[key].seconds_for(flops)

    def op_seconds(self, flops: float, dtype: str = "bfloat16") -> float:
        """Seconds of one matmul-like operation of `flops` FLOPs: never less than the
        smallest measured matmul (n = 1024), else F / the throughput interpolated between
        the measured matmuls (the best one beyond them)."""
        c = self.matmul[_dtype(dtype)]
        return c.seconds_for(flops)
