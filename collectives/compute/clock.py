"""Spending modelled compute in model time: the worker sleeps (issue 15; the fidelity
guard's rule, docs/ARCHITECTURE.md "Fidelity is part of every result": nothing spins).

A region (a forward pass, a backward pass) starts at a lab time; each hold point k of
the region has spent, in the model, the shares of every hold point up to and including
k, so the worker waits until start + (sum of those shares) x TDF of lab time: the CPU's
own time for the same work (between hold points) is absorbed, never added. A hold point
reached after its target is late: the worker's CPU took longer than the GPU it models,
and the lateness in model time is the region's lag (as emucore.fidelity.LagMeter's). Every
region is recorded: its model start and end on the job's clock (lab / TDF), the FLOPs
and the modelled seconds, the worst lag; every hold point also goes to a
`emucore.fidelity.LagMeter`, whose snapshot joins the run's fidelity guard. Time
(`clock`) and sleep are passed in.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from emucore.fidelity import LagMeter
from emucore.timedil import TimeDilation


@dataclass
class Region:
    """One stretch of modelled compute."""

    kind: str               # "fwd", "bwd", "op"
    start_lab: float        # lab seconds (the clock's)
    model_s: float = 0.0    # modelled seconds spent so far
    flops: float = 0.0
    end_lab: float = 0.0    # when its last hold ended
    lag_model_s: float = 0.0  # worst lateness of a hold point, model seconds
    holds: int = 0

    def to_dict(self, td: TimeDilation) -> dict:
        """JSON form with model times (the job's clock / TDF)."""
        return {**asdict(self), "t0_model_s": td.model_time(self.start_lab),
                "t1_model_s": td.model_time(self.end_lab)}


@dataclass
class ComputeClock:
    """Holds a worker for modelled compute; records what it spent."""

    td: TimeDilation
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    regions: list[Region] = field(default_factory=list)
    current: Region | None = None
    meter: LagMeter | None = None  #: the fidelity guard's view of the hold points

    def __post_init__(self) -> None:
        if self.meter is None:
            self.meter = LagMeter(self.td)

    def begin(self, kind: str) -> Region:
        """Start a region now (ends the previous one)."""
        self.current = Region(kind, self.clock())
        self.current.end_lab = self.current.start_lab
        self.regions.append(self.current)
        return self.current

    def spend(self, model_s: float, flops: float = 0.0) -> float:
        """A hold point of `model_s` modelled seconds (and the FLOPs they stand for):
        sleep until the region's target; returns the lab seconds slept."""
        r = self.current if self.current is not None else self.begin("op")
        r.model_s += model_s
        r.flops += flops
        r.holds += 1
        target = r.start_lab + self.td.lab_time(r.model_s)
        now = self.clock()
        self.meter.record(target, now, f"compute {r.kind}")
        slept = 0.0
        if target > now:
            slept = target - now
            self.sleep(slept)
            r.end_lab = target
        else:
            r.lag_model_s = max(r.lag_model_s, self.td.model_time(now - target))
            r.end_lab = now
        return slept

    def totals(self) -> dict:
        """Modelled seconds and FLOPs per region kind, the worst lag, the region count."""
        out: dict = {"regions": len(self.regions), "lag_max_model_s": 0.0}
        for r in self.regions:
            k = out.setdefault(r.kind, {"model_s": 0.0, "flops": 0.0, "count": 0})
            k["model_s"] += r.model_s
            k["flops"] += r.flops
            k["count"] += 1
            out["lag_max_model_s"] = max(out["lag_max_model_s"], r.lag_model_s)
        return out
