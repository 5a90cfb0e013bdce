"""WRED with ECN: one queue's `random-detect` settings and the per-packet mark / drop
decision (pure).

Book ch.11, "Explicit Congestion Notification" (Fig 11-2) and Example 11-3: queue 3 has
``random-detect minimum-threshold 150 kbytes maximum-threshold 3000 kbytes
drop-probability 7 weight 0 ecn``. The curve, on the queue depth a packet sees on
arrival (weight 0 = instantaneous depth, no averaging):

==========================  ====================  ======================
depth                        ECN-capable packet     Not-ECT packet
==========================  ====================  ======================
depth < min                  forward                forward
min <= depth < max           mark CE with p         drop with p
max <= depth <= limit        mark CE                drop
depth > limit                drop                   drop
==========================  ====================  ======================

with p = max_prob x (depth - min) / (max - min) rising linearly from 0 at min to
max_prob just below max. Without ``ecn`` the ECN-capable column is the Not-ECT one
(classic RED, Floyd & Jacobson 1993). ECN-capable means ECT(0), ECT(1) or CE (a CE
packet is "marked" again: it stays CE, RFC 3168 s.5). The random number is passed in;
the limit is the queue's (`emucore.qos.queuing.QueueConfig.limit_bytes`).

Profiles (docs/DCQCN_PARAMS.md): ``book`` 150 KB / 3000 KB / 7 %; ``paper`` (Zhu et al.,
SIGCOMM 2015) Kmin 5 KB / Kmax 200 KB / Pmax 1 %.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from emucore.qos.fields import QUEUE_LIMIT_BYTES, flag, int_in, normalise, percent, size


class WredVerdict(enum.IntEnum):
    """What WRED does with one arriving packet."""

    FORWARD = 0  # enqueue untouched
    MARK = 1  # enqueue with CE set
    DROP = 2  # not enqueued


@dataclass(frozen=True)
class Wred:
    """`random-detect minimum-threshold maximum-threshold drop-probability weight [ecn]`
    of one egress queue (sizes in bytes)."""

    min_bytes: int
    max_bytes: int
    max_prob_pct: float  # NX-OS drop-probability, percent
    weight: int = 0  # EWMA exponent (Cisco "weight"); 0 = instantaneous depth (book)
    ecn: bool = True  # mark ECN-capable packets instead of dropping them

    def __post_init__(self) -> None:
        normalise(self, "min_bytes", size("min_bytes", self.min_bytes))
        normalise(self, "max_bytes", size("max_bytes", self.max_bytes))
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes: must be <= max_bytes ({self.max_bytes}), "
                             f"got {self.min_bytes!r}")
        normalise(self, "max_prob_pct", percent("max_prob_pct", self.max_prob_pct))
        int_in("weight", self.weight, 0, 15)
        flag("ecn", self.ecn)

    @classmethod
    def book(cls) -> "Wred":
        """Example 11-3: min 150 KB, max 3000 KB, drop-probability 7, weight 0, ecn."""
        return cls(150_000, 3_000_000, 7.0, 0, True)

    @classmethod
    def paper(cls) -> "Wred":
        """DCQCN paper (Zhu et al. 2015): Kmin 5 KB, Kmax 200 KB, Pmax 1 %, ECN."""
        return cls(5_000, 200_000, 1.0, 0, True)

    @classmethod
    def named(cls, name: str) -> "Wred":
        """A profile by name: 'book' or 'paper'."""
        if name not in ("book", "paper"):
            raise ValueError(f"wred profile: must be 'book' or 'paper', got {name!r}")
        return getattr(cls, name)()

    @property
    def max_prob(self) -> float:
        """Marking/drop probability just below max_bytes as a fraction 0..1."""
        return self.max_prob_pct / 100.0

    def probability(self, depth_bytes: float) -> float:
        """Mark/drop probability at `depth_bytes` (1.0 at or above max; limit ignored)."""
        if depth_bytes < self.min_bytes:
            return 0.0
        if depth_bytes >= self.max_bytes:
            return 1.0
        return self.max_prob * (depth_bytes - self.min_bytes) / (self.max_bytes - self.min_bytes)


def wred_decide(depth_bytes: float, ecn_codepoint: int, wred: Wred, rand: float,
                limit_bytes: int = QUEUE_LIMIT_BYTES) -> WredVerdict:
    """FORWARD, MARK or DROP for a packet arriving at a queue `depth_bytes` deep whose
    tail-drop limit is `limit_bytes`; `ecn_codepoint` is the packet's ECN field
    (tos & 3), `rand` uniform in [0, 1)."""
    if depth_bytes < wred.min_bytes:
        return WredVerdict.FORWARD
    if depth_bytes > limit_bytes:
        return WredVerdict.DROP
    if depth_bytes < wred.max_bytes:
        p = wred.max_prob * (depth_bytes - wred.min_bytes) / (wred.max_bytes - wred.min_bytes)
        if rand >= p:
            return WredVerdict.FORWARD
    return WredVerdict.MARK if ecn_codepoint and wred.ecn else WredVerdict.DROP


def ewma_depth(avg: float, depth: int, weight: int) -> float:
    """Averaged depth for WRED weight w (Cisco: avg += (depth - avg) / 2**w); w=0 -> depth."""
    if weight == 0:
        return depth
    return avg + (depth - avg) / (1 << weight)
