"""Egress shaping to a link's lab rate: a virtual-finish-time token bucket (pure).

A link of model rate R runs in the lab at R / TDF (emucore.timedil). The shaper keeps the
time at which the wire is free again; `book` books a frame's serialisation (`depart`
returns when its last bit has left, which is when it reaches the far end, plus the
propagation delay): the agent hands it to the veth then, so the wire carries frames at
exactly the link rate. `can_send` lets the agent book frames up to `burst_s` ahead of
time, which absorbs the poll loop's timer granularity without exceeding the rate.

A booking made late - the wire idle since before now and the frame eligible since before
now - starts where the model would have started it, max(free_at, the port's
eligible_at), if that is no more than `burst_s` before now: the service a late wake-up
left idle is made up, not lost (lost service is what lets a port fed at exactly its line
rate build a queue in the lab that the model never has, docs/ARCHITECTURE.md "The
fidelity guard"). The window is `burst_s`, max(1 ms, 2 MTU at the lab rate): the same
as the slack within which the NIC's pacer catches up (traffic/nic/datapath.py `pace`,
`NicDatapath.slack`), so both ends of a link make up the same lateness, and a catch-up
hands the wire at most the burst `can_send` already allows. Further behind, the booking
starts at now, as the NIC restarts from now beyond its slack: that lateness is the
fidelity guard's to count, and `lost_s` adds it up - the wire time the model had and the
lab did not, by which every frame queued behind such a booking waits longer than the
model says (a port's counters: "lost_service_us").
"""

from __future__ import annotations

import math


class Shaper:
    """Token-bucket pacing of one egress port at `rate_bps` (lab bit/s; inf = unshaped)."""

    __slots__ = ("rate_Bps", "burst_s", "free_at", "lost_s")

    def __init__(self, rate_bps: float, burst_s: float = 0.001, mtu: int = 9216) -> None:
        if rate_bps <= 0:
            raise ValueError(f"rate_bps: must be > 0, got {rate_bps!r}")
        self.rate_Bps = rate_bps / 8.0
        # at least two full frames of burst, so a lone MTU frame never waits on itself
        self.burst_s = max(burst_s, 2 * mtu / self.rate_Bps) if math.isfinite(rate_bps) else 0.0
        self.free_at = 0.0
        #: lab seconds of wire time lost to bookings more than burst_s late (`book`)
        self.lost_s = 0.0

    def ready_at(self, now: float) -> float:
        """Earliest lab time at which the next frame may be booked."""
        return self.free_at - self.burst_s

    def can_send(self, now: float) -> bool:
        """True when a frame may be booked now (the wire is free within burst_s)."""
        return self.free_at - now <= self.burst_s

    def book(self, nbytes: int, now: float, eligible_at: float = math.inf) -> tuple[float, float]:
        """Book a frame's serialisation at `now` for a port whose frames are eligible
        since `eligible_at`; return (booked start, model start). The model start is
        max(free_at, eligible_at) when both are before now (booked late), else
        max(free_at, now); the booking starts there too unless that is more than
        `burst_s` before now (then at now, and now - model start is lost: `lost_s`).
        free_at = booked start + nbytes / rate."""
        free = self.free_at
        if now > free and now > eligible_at:  # booked late: the wire sat idle
            model = free if free > eligible_at else eligible_at
            if now - model <= self.burst_s:
                start = model
            else:
                start = now
                self.lost_s += now - model
        else:
            model = start = free if free > now else now
        self.free_at = start + nbytes / self.rate_Bps
        return start, model

    def depart(self, nbytes: int, now: float, eligible_at: float = math.inf) -> float:
        """Book a frame (`book`); return the time its last bit leaves."""
        self.book(nbytes, now, eligible_at)
        return self.free_at
