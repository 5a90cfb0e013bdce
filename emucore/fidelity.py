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

What the p99 cannot see - service a port lost for good (`queue_drift`): a switch's egress
shaper books each frame from max(free_at, now) (switch_agent/shaper.py), so a late
wake-up that finds the wire idle past its booked horizon loses that time for good, while
the NIC feeding it keeps pacing at the line rate and catches up any lag below its slack
(traffic/nic/datapath.py `pace`). At a port fed at its line rate C the arrivals of the lost
time stay queued and are never worked off: after lost service L (model s) the queue is
up to L x C / 8 bytes deeper than the model's. Many lags each far below the bound add up:
L9.1 at TDF 5000 beside a CPU hog kept up (p99 0.75 us, max 1.66 us) while rail1's queue
3 to h2 climbed in steps of 1-7 frames from 0 to 153,698 B (the book's WRED minimum is
150 KB) where the model's stays at 0. A count the model decides by a queue threshold K
(a CE mark at WRED min, a pause at xOFF, a drop at the buffer) is the model's only while
L x C / 8 < K at every port; `queue_drift` says where it was not.

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
#: the snapshot field of lost service: {port: model seconds} (`LagMeter.lose`)
LOST_KEY = "lost_service_model_s"


def lag_bound_model_s(mtu: int, model_bps: float) -> float:
    """One MTU-sized frame's serialisation time at the model rate (the kept-up bound)."""
    if mtu <= 0 or model_bps <= 0:
        raise ValueError(f"mtu and model_bps must be > 0, got {mtu!r}, {model_bps!r}")
    return mtu * 8 / model_bps


class LagMeter:
    """Lags of one process's scheduled actions, in model seconds (O(1) per record)."""

    __slots__ = ("td", "count", "max_s", "hist", "worst_what", "lost")

    def __init__(self, td: TimeDilation) -> None:
        self.td = td
        self.count = 0
        self.max_s = 0.0
        #: [on time, lag <= edge 0, <= edge 1, ..., above the top edge]
        self.hist = [0] * HIST_LEN
        self.worst_what = ""
        #: port -> model seconds of service it lost for good (`lose`)
        self.lost: dict[str, float] = {}

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
        self.lost = {}

    def lose(self, port: str, lost_lab_s: float) -> None:
        """Port `port` left its wire idle for `lost_lab_s` lab seconds it cannot make up (a
        late booking that started after the time the model would have): summed per port,
        in model seconds (`queue_drift`)."""
        if lost_lab_s > 0.0:
            self.lost[port] = self.lost.get(port, 0.0) + self.td.model_time(lost_lab_s)

    def snapshot(self) -> dict:
        """JSON-able state: count, max and p99 (model s), the histogram, the worst action;
        LOST_KEY only when some port lost service."""
        snap = {"count": self.count, "max_lag_model_s": self.max_s,
                "p99_lag_model_s": min(percentile(self.hist, P99), self.max_s), "hist": list(self.hist),
                "worst": self.worst_what}
        if self.lost:
            snap[LOST_KEY] = dict(self.lost)
        return snap


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
    lost: dict[str, float] = {}
    for s in snapshots:
        for port, t in (s.get(LOST_KEY) or {}).items():
            lost[port] = lost.get(port, 0.0) + t
        count += s["count"]
        for i, n in enumerate(s["hist"]):
            hist[i] += n
        if s["max_lag_model_s"] > worst_s:
            worst_s, worst = s["max_lag_model_s"], s.get("worst", "")
    out = {"count": count, "max_lag_model_s": worst_s, "p99_lag_model_s": min(percentile(hist, P99), worst_s),
           "hist": hist, "worst": worst}
    if lost:
        out[LOST_KEY] = lost
    return out


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


def queue_error_bytes(lost_model_s: float, model_bps: float) -> float:
    """The queue, bytes, that `lost_model_s` of service lost at a port of model rate
    `model_bps` can leave that the model did not have: lost x C / 8 (module docstring)."""
    if lost_model_s < 0 or model_bps <= 0:
        raise ValueError(f"lost_model_s must be >= 0 and model_bps > 0, got "
                         f"{lost_model_s!r}, {model_bps!r}")
    return lost_model_s * model_bps / 8


@dataclass(frozen=True)
class Drift:
    """One port's lost service and the queue it can have built, against the smallest
    queue threshold a count depends on."""

    port: str  # "rail1 eth2"
    lost_model_s: float
    queue_bytes: float
    threshold: str  # its name, "WRED min" ("" when none was given)
    threshold_bytes: float  # inf when none was given

    @property
    def reaches(self) -> bool:
        """The lost service can have built a queue up to the threshold."""
        return self.queue_bytes >= self.threshold_bytes

    def to_dict(self) -> dict:
        """JSON-able, in the units people read (µs, bytes)."""
        return {"port": self.port, "lost_model_us": self.lost_model_s * 1e6,
                "queue_bytes": round(self.queue_bytes), "threshold": self.threshold,
                "threshold_bytes": (self.threshold_bytes if math.isfinite(self.threshold_bytes)
                                    else None), "reaches": self.reaches}


def queue_drift(lost: Mapping[str, float], rate_bps: Mapping[str, float],
                thresholds: Mapping[str, float] | None = None) -> list[Drift]:
    """Every port that lost service (port -> lost model s), worst queue first, judged
    against the smallest of `thresholds` (name -> bytes: the WRED minimum, xOFF, ...).
    A port whose rate is not in `rate_bps` is skipped: it is not a fabric link."""
    name, bar = "", math.inf
    for n, b in (thresholds or {}).items():
        if b <= 0:
            raise ValueError(f"threshold {n!r} must be > 0 bytes, got {b!r}")
        if b < bar:
            name, bar = n, float(b)
    out = [Drift(port, s, queue_error_bytes(s, rate_bps[port]), name, bar)
           for port, s in lost.items() if s > 0 and port in rate_bps]
    return sorted(out, key=lambda d: (-d.queue_bytes, d.port))
