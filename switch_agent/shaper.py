"""Egress shaping to a link's lab rate: a virtual-finish-time token bucket (pure).

A link of model rate R runs in the lab at R / TDF (emucore.timedil). The shaper keeps the
time at which the wire is free again; `depart` books a frame's serialisation and
returns when its last bit has left, which is when it reaches the far end (plus the
propagation delay): the agent hands it to the veth then, so the wire carries frames at
exactly the link rate. `can_send` lets the agent book frames up to `burst_s` ahead of
time, which absorbs the poll loop's timer granularity without exceeding the rate.
"""

from __future__ import annotations

import math


class Shaper:
    """Token-bucket pacing of one egress port at `rate_bps` (lab bit/s; inf = unshaped)."""

    __slots__ = ("rate_Bps", "burst_s", "free_at")

    def __init__(self, rate_bps: float, burst_s: float = 0.001, mtu: int = 9216) -> None:
        if rate_bps <= 0:
            raise ValueError(f"rate_bps: must be > 0, got {rate_bps!r}")
        self.rate_Bps = rate_bps / 8.0
        # at least two full frames of burst, so a lone MTU frame never waits on itself
        self.burst_s = max(burst_s, 2 * mtu / self.rate_Bps) if math.isfinite(rate_bps) else 0.0
        self.free_at = 0.0

    def ready_at(self, now: float) -> float:
        """Earliest lab time at which the next frame may be booked."""
        return self.free_at - self.burst_s

    def can_send(self, now: float) -> bool:
        """True when a frame may be booked now (the wire is free within burst_s)."""
        return self.free_at - now <= self.burst_s

    def depart(self, nbytes: int, now: float) -> float:
        """Book a frame's serialisation; return the time its last bit leaves (>= now)."""
        start = self.free_at if self.free_at > now else now
        self.free_at = start + nbytes / self.rate_Bps
        return self.free_at
