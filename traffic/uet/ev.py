"""Entropy values: which path each packet takes (issue 16; UET_FACTS "Load balancing by
EV"). A UET sender writes an entropy value (EV) into every packet's UDP source port; the
switches' ordinary ECMP hash over the 5-tuple then spreads one message over every
equal-cost path when the EV changes per packet.

* `fixed`: one EV per PDC (a flow on one path, as RoCE's per-QP source port);
* `oblivious`: a random EV per packet;
* `reps`: recycled entropy (REPS): an EV whose ACK came back without ECN is remembered
  (at most `slots`) and reused for the next packet; with none remembered, a random one.
  A marked ACK's EV is simply not reused, so congested paths fade out.
Pure: the random generator is passed in.
"""

from __future__ import annotations

import random
from collections import deque


class Entropy:
    """The EV source of one sender."""

    def __init__(self, mode: str, rng: random.Random, ev_range: tuple[int, int] = (49152, 65535),
                 slots: int = 8, fixed: int | None = None) -> None:
        if mode not in ("fixed", "oblivious", "reps"):
            raise ValueError(f"mode: fixed, oblivious or reps, got {mode!r}")
        self.mode, self.rng = mode, rng
        self.lo, self.hi = ev_range
        self.fixed = fixed if fixed is not None else rng.randint(self.lo, self.hi)
        self.good: deque[int] = deque(maxlen=slots)
        self.recycled = self.fresh = 0

    def next(self) -> int:
        """The EV of the next packet."""
        if self.mode == "fixed":
            return self.fixed
        if self.mode == "reps" and self.good:
            self.recycled += 1
            return self.good.popleft()
        self.fresh += 1
        return self.rng.randint(self.lo, self.hi)

    def feedback(self, ev: int, ecn: bool) -> None:
        """An ACK for a packet sent with `ev` came back, marked or not (REPS learns)."""
        if self.mode == "reps" and not ecn:
            self.good.append(ev)
