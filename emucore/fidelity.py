"""The fidelity guard: how far a process's actions lag behind the model schedule (pure).

Time dilation holds only while the lab keeps up (docs/ARCHITECTURE.md "Fidelity is part
of every result"). Every process that acts on a schedule - a switch port's shaper and
delay line, a NIC's pacer, a timer - knows when an action was *due* (lab seconds) and
when it *happened*; the difference, converted to model time, is the lag. A frame that
leaves 2 ms lab late at TDF 5000 left 0.4 us model late: to the model that is a link
idle for 0.4 us that should not have been, or a queue 0.4 us deeper.

`LagMeter` keeps, per process, the count, the maximum and a histogram of lags (fixed
log-spaced buckets, so recording is O(1) with no allocation and snapshots from several
processes merge exactly). `verdict` judges merged snapshots against the bound.

The bound (`lag_bound_model_s`): the serialisation time of one MTU-sized frame at the
model link rate (9216 B at 200 Gbps = 0.369 us). A p99 lag below it means that 99 % of
scheduled actions happened before the frame they delay could have left the wire: the
lab's lateness is smaller than the finest thing the model resolves on a link. The
maximum is reported, not judged: one stall (a page fault, the kernel's scheduler)
delays one frame, which does not change a result built from millions.

A process that wants its wake-ups on time asks the kernel for a small timer slack
(`emucore.rawsock.tighten_timer_slack`): by default Linux may defer a sleeping thread's timeout by
50 us to batch wake-ups, a quarter of the bound above at TDF 2000.

`suggest_tdf` turns a run that did not keep up into the TDF that would have: CPU work
per model second is fixed, so the lab's CPU demand scales as 1 / TDF; aim for
`TARGET_LOAD` of the cores (docs/ARCHITECTURE.md "Time: model world and lab world").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from emucore.timedil import TimeDilation

#: histogram bucket upper edges, model seconds: 1 ns .. ~1 s, 8 buckets per decade
BUCKET_EDGES = tuple(10 ** (-9 + i / 8) for i in range(8 * 9 + 1))
HIST_LEN = len(BUCKET_EDGES) + 2
P99 = 0.99
#: share of the machine's cores a run may use and still keep up (headroom for bursts)
TARGET_LOAD = 0.7
#: a suggested TDF is rounded up to the next of these x 10^k
NICE_STEPS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)


def lag_bound_model_s(mtu: int, model_bps: float) -> float:
    """One MTU-sized frame's serialisation time at the model rate (the kept-up bound)."""
    if mtu <= 0 or model_bps <= 0:
        raise ValueError(f"mtu and model_bps must be > 0, got {mtu!r}, {model_bps!r}")
    return mtu * 8 / model_bps


class LagMeter:
    """Lags of one process's scheduled actions, in model seconds (O(1) per record)."""

    __slots__ = ("td", "count", "max_s", "hist", "worst_what")

    def __init__(self, td: TimeDilation) -> None:
        self.td = td
        self.count = 0
        self.max_s = 0.0
        #: [on time, lag <= edge 0, <= edge 1, ..., above the top edge]
        self.hist = [0] * HIST_LEN
        self.worst_what = ""

    def record(self, due_lab: float, done_lab: float, what: str = "") -> float:
        """An action due at `due_lab` happened at `done_lab` (lab seconds); returns the
        lag in model seconds (0 when on time or early)."""
        lag = self.td.model_time(done_lab - due_lab)
        self.count += 1
        if lag <= 0.0:
            self.hist[0] += 1
            return 0.0
        self.hist[1 + bisect.bisect_left(BUCKET_EDGES, lag)] += 1
        if lag > self.max_s:
            self.max_s = lag
            self.worst_what = what
        return lag

    def reset(self) -> None:
        """Forget every recorded lag (a new measurement window)."""
        self.count = 0
        self.max_s = 0.0
        self.hist = [0] * HIST_LEN
        self.worst_what = ""

    def snapshot(self) -> dict:
        """JSON-able state: count, max and p99 (model s), the histogram, the worst action."""
        return {"count": self.count, "max_lag_model_s": self.max_s,
                "p99_lag_model_s": min(percentile(self.hist, P99), self.max_s), "hist": list(self.hist),
                "worst": self.worst_what}


def percentile(hist: list[int], q: float) -> float:
    """Quantile `q` of a histogram: 0 for an on-time action (bucket 0), else the upper
    edge of the lag's bucket (model s; inf above the top edge). Snapshots cap it at the
    largest lag seen, which the bucket's edge may exceed by up to a bucket's width."""
    total = sum(hist)
    if total == 0:
        return 0.0
    rank, seen = math.ceil(q * total), 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            break
    if i == 0:
        return 0.0
    return BUCKET_EDGES[i - 1] if i <= len(BUCKET_EDGES) else math.inf


def merge(snapshots: Iterable[Mapping]) -> dict:
    """Several processes' snapshots as one (exact: the histograms add up)."""
    hist = [0] * HIST_LEN
    count, worst_s, worst = 0, 0.0, ""
    for s in snapshots:
        count += s["count"]
        for i, n in enumerate(s["hist"]):
            hist[i] += n
        if s["max_lag_model_s"] > worst_s:
            worst_s, worst = s["max_lag_model_s"], s.get("worst", "")
    return {"count": count, "max_lag_model_s": worst_s, "p99_lag_model_s": min(percentile(hist, P99), worst_s),
            "hist": hist, "worst": worst}


@dataclass(frozen=True)
class Verdict:
    """Whether a run kept up, and the figures behind it."""

    kept_up: bool
    p99_lag_model_s: float
    max_lag_model_s: float
    bound_model_s: float
    worst: str  # the process (and action) with the largest lag
    actions: int

    def to_dict(self) -> dict:
        """The `fidelity` object of summary.json (microseconds, as people read them)."""
        return {"kept_up": self.kept_up, "p99_lag_model_us": self.p99_lag_model_s * 1e6,
                "max_lag_model_us": self.max_lag_model_s * 1e6,
                "bound_model_us": self.bound_model_s * 1e6, "worst": self.worst,
                "actions": self.actions}


def verdict(per_process: Mapping[str, Mapping], bound_model_s: float) -> Verdict:
    """Judge the snapshots of every process (name -> LagMeter.snapshot()): the run kept up
    when the p99 lag over all their scheduled actions is within `bound_model_s`."""
    merged = merge(per_process.values())
    worst_name = max(per_process, key=lambda n: per_process[n]["max_lag_model_s"], default="")
    what = per_process[worst_name].get("worst", "") if worst_name else ""
    worst = f"{worst_name} ({what})" if what else worst_name
    return Verdict(merged["p99_lag_model_s"] <= bound_model_s, merged["p99_lag_model_s"],
                   merged["max_lag_model_s"], bound_model_s, worst, merged["count"])


def suggest_tdf(tdf: float, cpu_cores_used: float, cores: int) -> float:
    """The TDF at which the same run would load `TARGET_LOAD` of `cores`, rounded up to a
    nice value, never below twice `tdf` (a run that lost fidelity was saturated, so its
    measured CPU use understates the demand)."""
    if tdf <= 0 or cores <= 0:
        raise ValueError(f"tdf and cores must be > 0, got {tdf!r}, {cores!r}")
    need = tdf * max(2.0, cpu_cores_used / (TARGET_LOAD * cores))
    return nice_up(need)


def nice_up(x: float) -> float:
    """The smallest of NICE_STEPS x 10^k that is >= x."""
    if x <= 0:
        raise ValueError(f"must be > 0, got {x!r}")
    k = math.floor(math.log10(x))
    for base in (10.0 ** k, 10.0 ** (k + 1)):
        for step in NICE_STEPS:
            if step * base >= x * (1 - 1e-12):
                return step * base
    return 10.0 ** (k + 1)  # not reached
