"""WRED with ECN: the per-packet mark / drop decision of an egress queue (pure).

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
packet is "marked" again: it stays CE, RFC 3168 s.5). The random number is passed in.

Profiles (DCQCN_PARAMS.md): ``book`` 150 KB / 3000 KB / 7 %; ``paper`` (Zhu et al.,
SIGCOMM 2015) Kmin 5 KB / Kmax 200 KB / Pmax 1 %.
"""

from __future__ import annotations

from dataclasses import dataclass

FORWARD = 0
MARK = 1
DROP = 2
VERDICT_NAMES = ("forward", "mark", "drop")

#: default hard limit of a WRED queue; AgentConfig.queue_limit_bytes has the same default
DEFAULT_QUEUE_LIMIT = 10_000_000


@dataclass(frozen=True, slots=True)
class WredProfile:
    """Thresholds of one queue's WRED curve (bytes; max_prob in [0, 1])."""

    min_bytes: int
    max_bytes: int
    max_prob: float
    ecn: bool = True
    queue_limit_bytes: int = DEFAULT_QUEUE_LIMIT
    weight: int = 0  # EWMA exponent (Cisco "weight"); 0 = instantaneous depth

    def __post_init__(self) -> None:
        if not (isinstance(self.min_bytes, int) and self.min_bytes >= 0):
            raise ValueError(f"min_bytes: must be an int >= 0, got {self.min_bytes!r}")
        if not (isinstance(self.max_bytes, int) and self.max_bytes >= self.min_bytes):
            raise ValueError(f"max_bytes: must be an int >= min_bytes ({self.min_bytes}), "
                             f"got {self.max_bytes!r}")
        if not 0.0 <= self.max_prob <= 1.0:
            raise ValueError(f"max_prob: must be in [0, 1], got {self.max_prob!r}")
        if not (isinstance(self.queue_limit_bytes, int)
                and self.queue_limit_bytes >= self.max_bytes):
            raise ValueError(f"queue_limit_bytes: must be an int >= max_bytes "
                             f"({self.max_bytes}), got {self.queue_limit_bytes!r}")
        if not (isinstance(self.weight, int) and 0 <= self.weight <= 15):
            raise ValueError(f"weight: must be an int in 0..15, got {self.weight!r}")

    @classmethod
    def book(cls, queue_limit_bytes: int = DEFAULT_QUEUE_LIMIT) -> "WredProfile":
        """Example 11-3: min 150 KB, max 3000 KB, drop-probability 7, weight 0, ecn."""
        return cls(150_000, 3_000_000, 0.07, True, queue_limit_bytes, 0)

    @classmethod
    def paper(cls, queue_limit_bytes: int = DEFAULT_QUEUE_LIMIT) -> "WredProfile":
        """DCQCN paper (Zhu et al. 2015): Kmin 5 KB, Kmax 200 KB, Pmax 1 %, ECN."""
        return cls(5_000, 200_000, 0.01, True, queue_limit_bytes, 0)

    @classmethod
    def named(cls, name: str, queue_limit_bytes: int = DEFAULT_QUEUE_LIMIT) -> "WredProfile":
        """A profile by name: 'book' or 'paper'."""
        if name not in ("book", "paper"):
            raise ValueError(f"wred profile: must be 'book' or 'paper', got {name!r}")
        return getattr(cls, name)(queue_limit_bytes)

    @classmethod
    def from_qos(cls, wred: object, queue_limit_bytes: int) -> "WredProfile":
        """From a `fabric.qos.config.Wred` (duck-typed: min_bytes, max_bytes,
        max_prob, ecn, weight) and the queue's limit."""
        return cls(wred.min_bytes, wred.max_bytes, wred.max_prob, wred.ecn,
                   max(queue_limit_bytes, wred.max_bytes), wred.weight)

    def probability(self, depth_bytes: float) -> float:
        """Mark/drop probability at `depth_bytes` (1.0 at or above max; limit ignored)."""
        if depth_bytes < self.min_bytes:
            return 0.0
        if depth_bytes >= self.max_bytes:
            return 1.0
        return self.max_prob * (depth_bytes - self.min_bytes) / (self.max_bytes - self.min_bytes)


def wred_decide(depth_bytes: float, ecn_codepoint: int, profile: WredProfile,
                rand: float) -> int:
    """FORWARD, MARK or DROP for a packet arriving at a queue `depth_bytes` deep;
    `ecn_codepoint` is the packet's ECN field (tos & 3), `rand` uniform in [0, 1)."""
    if depth_bytes < profile.min_bytes:
        return FORWARD
    if depth_bytes > profile.queue_limit_bytes:
        return DROP
    if depth_bytes < profile.max_bytes:
        p = profile.max_prob * (depth_bytes - profile.min_bytes) / (
            profile.max_bytes - profile.min_bytes)
        if rand >= p:
            return FORWARD
    return MARK if ecn_codepoint and profile.ecn else DROP


def ewma_depth(avg: float, depth: int, weight: int) -> float:
    """Averaged depth for WRED weight w (Cisco: avg += (depth - avg) / 2**w); w=0 -> depth."""
    if weight == 0:
        return depth
    return avg + (depth - avg) / (1 << weight)
