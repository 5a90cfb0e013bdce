"""DCQCN congestion control as pure state machines: notification and reaction points.

Book ch.11 ("Data Center Quantized Congestion Notification", Figure 11-3 the receiving
NIC generates CNPs and the sender NIC delays transmit, Figure 11-7 the ECN/PFC timeline
t1..t8); algorithm of Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
SIGCOMM 2015, with the parameters and update rules of docs/DCQCN_PARAMS.md.

Everything is in MODEL units: times in model seconds, rates in bit/s. The caller passes
`now` (model seconds) to every call; the RNIC converts the pacing interval to lab time
with `emucore.timedil.TimeDilation.lab_time`. Nothing here reads a clock.

* `NotificationPoint` (receiving NIC): a CE-marked data packet for QP q asks for a CNP,
  at most one per q per `cnp_interval`.
* `ReactionPoint` (sending NIC, one per QP): cuts Rc on a CNP, decays alpha every
  `alpha_period` without CNP, raises the rate on timer and byte-counter events through
  fast recovery, additive and hyper increase. Its timers start at the first CNP (before
  that the QP runs unlimited at line rate, as a NIC's rate limiter is only attached on
  congestion) and then keep running. `on_rate`, if set, is called with (model time, new
  Rc, "cut" or "increase") whenever Rc changes: at the CNP, at the byte-counter event,
  and for a timer event caught up late by `tick`, at the model time it was due.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Callable

__all__ = ["DcqcnProfile", "NotificationPoint", "ReactionPoint", "Stage", "PROFILES", "TIME_EPS"]

#: Timer comparisons tolerate this much model time (1 ps), so that 50 x 1e-6 reaches a
#: deadline of 50e-6 despite floating-point rounding.
TIME_EPS = 1e-12


@dataclass(frozen=True)
class DcqcnProfile:
    """DCQCN parameters (docs/DCQCN_PARAMS.md); times in model seconds, rates in bit/s."""

    name: str = "paper"
    g: float = 1 / 256                      #: alpha gain
    alpha_init: float = 1.0                 #: alpha before the first CNP
    alpha_period: float = 55e-6             #: alpha decays once per period without CNP
    rate_increase_timer: float = 55e-6      #: timer increase event period
    byte_counter: int = 10_000_000          #: bytes sent per byte-counter increase event
    fast_recovery_steps: int = 5            #: F
    rai: float = 40e6                       #: additive increase step
    rhai: float = 200e6                     #: hyper increase step
    min_rate: float = 1e6                   #: floor of Rc
    cnp_interval: float = 50e-6             #: NP: at most one CNP per QP per interval

    def __post_init__(self) -> None:
        if not 0 < self.g <= 1:
            raise ValueError(f"g: must be in (0, 1], got {self.g!r}")
        if not 0 <= self.alpha_init <= 1:
            raise ValueError(f"alpha_init: must be in [0, 1], got {self.alpha_init!r}")
        for f in ("alpha_period", "rate_increase_timer", "rai", "rhai", "min_rate"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{f}: must be a positive number, got {v!r}")
        if not (isinstance(self.cnp_interval, (int, float)) and self.cnp_interval >= 0):
            raise ValueError(f"cnp_interval: must be >= 0, got {self.cnp_interval!r}")
        if not (isinstance(self.byte_counter, int) and self.byte_counter > 0):
            raise ValueError(f"byte_counter: must be a positive integer, got {self.byte_counter!r}")
        if not (isinstance(self.fast_recovery_steps, int) and self.fast_recovery_steps >= 1):
            raise ValueError("fast_recovery_steps: must be an integer >= 1, "
                             f"got {self.fast_recovery_steps!r}")

    @classmethod
    def paper(cls) -> "DcqcnProfile":
        """Zhu et al. SIGCOMM 2015 (Rhai from ns3-rdma)."""
        return cls()

    @classmethod
    def nvidia(cls) -> "DcqcnProfile":
        """NVIDIA ConnectX-5 firmware defaults (dce_tcp_g 1019, rpg_byte_reset 32767 x 64 B,
        rpg_threshold 1, rpg_ai_rate 5, rpg_hai_rate 50, min_time_between_cnps 4)."""
        return cls(name="nvidia", g=5 / 1024, alpha_init=1023 / 1024, alpha_period=1e-6,
                   rate_increase_timer=300e-6, byte_counter=32767 * 64, fast_recovery_steps=1,
                   rai=5e6, rhai=50e6, min_rate=1e6, cnp_interval=4e-6)

    @classmethod
    def by_name(cls, name: str, **overrides) -> "DcqcnProfile":
        """A named profile ('paper' or 'nvidia'), optionally with fields overridden."""
        makers = {"paper": cls.paper, "nvidia": cls.nvidia}
        if name not in makers:
            raise ValueError(f"profile: unknown DCQCN profile {name!r} (known: {sorted(makers)})")
        known = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise ValueError(f"profile: unknown DCQCN parameter(s) {bad}")
        return replace(makers[name](), **overrides)


PROFILES = ("paper", "nvidia")


class NotificationPoint:
    """Receiving-NIC CNP generator: at most one CNP per QP per `cnp_interval`."""

    def __init__(self, profile: DcqcnProfile | None = None,
                 cnp_interval: float | None = None) -> None:
        p = profile or DcqcnProfile.paper()
        self.cnp_interval = p.cnp_interval if cnp_interval is None else cnp_interval
        self._last: dict[int, float] = {}
        self.ce_seen = 0
        self.cnps = 0

    def on_ce(self, qpn: int, now_model: float) -> bool:
        """A CE-marked packet arrived for QP `qpn` at `now_model`: send a CNP?"""
        self.ce_seen += 1
        last = self._last.get(qpn)
        if last is not None and now_model - last < self.cnp_interval - TIME_EPS:
            return False
        self._last[qpn] = now_model
        self.cnps += 1
        return True

    def forget(self, qpn: int) -> None:
        """Drop the state of a destroyed QP."""
        self._last.pop(qpn, None)


class Stage:
    """Names of the increase stages (for counters and plots)."""

    IDLE = "idle"
    FAST_RECOVERY = "fast_recovery"
    ADDITIVE = "additive"
    HYPER = "hyper"


class ReactionPoint:
    """Sending-NIC rate controller of one QP: current rate `rc`, target `rt`, `alpha`."""

    __slots__ = ("line_rate", "p", "rc", "rt", "alpha", "t", "bc", "bytes_acc", "active",
                 "next_alpha", "next_increase", "cnps", "cuts", "increases", "stage", "on_rate")

    def __init__(self, line_rate: float, profile: DcqcnProfile | None = None) -> None:
        if not (line_rate > 0 and math.isfinite(line_rate)):
            raise ValueError(f"line_rate: must be a positive rate in bit/s, got {line_rate!r}")
        self.p = profile or DcqcnProfile.paper()
        if self.p.min_rate > line_rate:
            raise ValueError(f"min_rate: {self.p.min_rate!r} is above line_rate {line_rate!r}")
        self.line_rate = float(line_rate)
        self.rc = self.rt = self.line_rate
        self.alpha = self.p.alpha_init
        self.t = self.bc = 0           # timer / byte-counter events since the last cut
        self.bytes_acc = 0
        self.active = False            # timers run from the first CNP on
        self.next_alpha = self.next_increase = math.inf
        self.cnps = self.cuts = self.increases = 0
        self.stage = Stage.IDLE
        #: called as on_rate(model time, new rc, "cut" | "increase") when rc changes
        self.on_rate: Callable[[float, float, str], None] | None = None

    # ---- events --------------------------------------------------------------------
    def on_cnp(self, now: float) -> None:
        """A CNP for this QP arrived: cut the rate, raise alpha, restart the counters."""
        self.tick(now)
        p = self.p
        self.cnps += 1
        self.cuts += 1
        old = self.rt = self.rc
        self.rc = self._clamp(self.rc * (1 - self.alpha / 2))
        if self.on_rate is not None and self.rc != old:
            self.on_rate(now, self.rc, "cut")
        self.alpha = (1 - p.g) * self.alpha + p.g
        self.t = self.bc = 0
        self.bytes_acc = 0
        self.active = True
        self.next_alpha = now + p.alpha_period
        self.next_increase = now + p.rate_increase_timer
        self.stage = Stage.FAST_RECOVERY

    def on_bytes_sent(self, n: int, now: float) -> None:
        """`n` bytes left on this QP: byte-counter increase events every `byte_counter` bytes."""
        self.tick(now)
        if not self.active:
            return
        self.bytes_acc += n
        while self.bytes_acc >= self.p.byte_counter:
            self.bytes_acc -= self.p.byte_counter
            self.bc += 1
            self._increase(now)

    def tick(self, now: float) -> None:
        """Run the alpha and rate-increase timers up to `now` (call it at least every
        `next_deadline()`; on_cnp and on_bytes_sent call it themselves)."""
        if not self.active:
            return
        p = self.p
        now += TIME_EPS
        if now >= self.next_alpha:
            k = int((now - self.next_alpha) // p.alpha_period) + 1
            self.alpha *= (1 - p.g) ** k
            self.next_alpha += k * p.alpha_period
        while now >= self.next_increase:
            due = self.next_increase
            self.next_increase += p.rate_increase_timer
            self.t += 1
            self._increase(due)
            at_line = self.rc >= self.line_rate and self.rt >= self.line_rate
            if at_line and now >= self.next_increase:
                # at line rate more events change nothing but the counter: skip them
                k = int((now - self.next_increase) // p.rate_increase_timer) + 1
                self.t += k
                self.increases += k
                self.next_increase += k * p.rate_increase_timer

    # ---- queries -------------------------------------------------------------------
    def pace_interval(self, frame_bytes: int) -> float:
        """Model seconds between the starts of two frames of `frame_bytes` at rate Rc."""
        return frame_bytes * 8 / self.rc

    def next_deadline(self) -> float:
        """Model time of the next timer event (inf before the first CNP)."""
        return min(self.next_alpha, self.next_increase)

    def snapshot(self) -> dict:
        """State for counters, logs and plots."""
        return {"rc": self.rc, "rt": self.rt, "alpha": self.alpha, "t": self.t, "bc": self.bc,
                "stage": self.stage, "cnps": self.cnps, "increases": self.increases}

    # ---- internals -----------------------------------------------------------------
    def _clamp(self, rate: float) -> float:
        return min(max(rate, self.p.min_rate), self.line_rate)

    def _increase(self, at: float) -> None:
        """One rate-increase event that happened at model time `at`."""
        p = self.p
        old = self.rc
        f = p.fast_recovery_steps
        self.increases += 1
        if max(self.t, self.bc) < f:
            self.stage = Stage.FAST_RECOVERY
        elif min(self.t, self.bc) >= f:
            self.stage = Stage.HYPER
            self.rt = self._clamp(self.rt + (min(self.t, self.bc) - f + 1) * p.rhai)
        else:
            self.stage = Stage.ADDITIVE
            self.rt = self._clamp(self.rt + p.rai)
        self.rc = self._clamp((self.rt + self.rc) / 2)
        if self.on_rate is not None and self.rc != old:
            self.on_rate(at, self.rc, "increase")
