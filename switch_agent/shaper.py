"""Egress shaping to a link's lab rate: a virtual-finish-time token bucket (pure).

A link of model rate R runs in the lab at R / TDF (emu.timedil). The shaper decides
when the next frame may start; `depart` returns when its last bit has left, which is
when it reaches the far end (plus the propagation delay): the agent hands it to the
veth then. A burst allowance absorbs the poll loop's timer granularity, so the
average rate over any backlogged period is exact while short-term bursts stay below
`burst_s` worth of bytes.
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
        """Earliest lab time at which the next frame may start."""
        return self.free_at - self.burst_s

    def can_send(self, now: float) -> bool:
        """True when a frame may start now."""
        return now >= self.free_at - self.burst_s

    def depart(self, nbytes: int, now: float) -> float:
        """Account a frame that starts now; return the time its last bit leaves."""
        start = self.free_at if self.free_at > now - self.burst_s else now - self.burst_s
        self.free_at = start + nbytes / self.rate_Bps
        return self.free_at
