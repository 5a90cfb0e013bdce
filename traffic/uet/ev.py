"""Entropy values: which path each packet takes (issue 16; UET_FACTS "Load balancing by
EV"; docs/UET.md "Entropy"). A UET sender writes an entropy value (EV) into every
packet's UDP source port; the switches' ordinary ECMP hash over the 5-tuple then spreads
one message over every equal-cost path when the EV changes per packet.

* `fixed`: one EV per PDC (a flow on one path, as RoCE's per-QP source port);
* `oblivious`: a random EV per packet;
* `reps`: recycled entropy (REPS), as the UEC's simulator does it (`ultraethernet/uet-htsim`,
  `htsim/sim/uec_mp.cpp` `UecMpReps`, `buffer_reps.cpp`): a ring of `slots` (8) EVs whose
  ACKs came back without ECN; each packet takes the earliest fresh one (an EV is used
  `lifetime` times, 1 by default), a random one when none is fresh. A marked ACK's EV is
  not remembered, so congested paths fade out.
  **Freeze**: a retransmission timeout (on a trimming fabric a timeout means a failed
  path, not congestion: uet-htsim runs REPS' freezing only with trimming) freezes the
  ring for `freeze_s` (10 ms): packets cycle through the remembered EVs, fresh or not,
  so traffic stays on paths known to work; unmarked ACKs still refill the ring.
  **Explore**: the first ACK after the freeze ends empties the ring, and the next
  `explore` (16) packets take random EVs.
Pure: the random generator and the time are passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class _Slot:
    ev: int = 0
    valid: bool = False
    life: int = 0


class Entropy:
    """The EV source of one sender."""

    def __init__(self, mode: str, rng: random.Random, ev_range: tuple[int, int] = (49152, 65535),
                 slots: int = 8, fixed: int | None = None, *, freeze_s: float = 10e-3,
                 explore: int = 16, lifetime: int = 1, trimming: bool = True) -> None:
        if mode not in ("fixed", "oblivious", "reps"):
            raise ValueError(f"mode: fixed, oblivious or reps, got {mode!r}")
        if slots < 1 or explore < 0 or lifetime < 1 or freeze_s < 0:
            raise ValueError(f"slots >= 1, explore >= 0, lifetime >= 1, freeze_s >= 0, got "
                             f"{slots!r}, {explore!r}, {lifetime!r}, {freeze_s!r}")
        self.mode, self.rng = mode, rng
        self.lo, self.hi = ev_range
        self.fixed = fixed if fixed is not None else rng.randint(self.lo, self.hi)
        self.freeze_s = freeze_s if trimming else 0.0
        self.explore_n, self.lifetime = explore, lifetime
        self.ring = [_Slot() for _ in range(slots)]
        self._reset()
        self.frozen = False
        self.thaw_at = 0.0
        self.explore = 0
        self.recycled = self.fresh = self.freezes = 0

    @classmethod
    def of(cls, cfg, rng: random.Random) -> "Entropy":
        """The EV source a `UetConfig` asks for."""
        return cls(cfg.ev, rng, cfg.ev_range, cfg.reps_slots, freeze_s=cfg.reps_freeze_s,
                   explore=cfg.reps_explore, lifetime=cfg.reps_lifetime,
                   trimming=cfg.nscc.trimming)

    def _reset(self) -> None:
        for s in self.ring:
            s.ev, s.valid, s.life = 0, False, 0
        self.head = self.count = self.n_fresh = self.head_frozen = 0

    @property
    def remembered(self) -> list[int]:
        """The fresh EVs, earliest first (for tests and counters)."""
        n = len(self.ring)
        return [self.ring[(self.head - self.n_fresh + i) % n].ev for i in range(self.n_fresh)]

    def _random(self) -> int:
        self.fresh += 1
        return self.rng.randint(self.lo, self.hi)

    def next(self) -> int:
        """The EV of the next packet."""
        if self.mode == "fixed":
            return self.fixed
        if self.mode == "oblivious":
            return self._random()
        if self.explore > 0:
            self.explore -= 1
            return self._random()
        if self.frozen:
            return self._take_frozen() if self.count else self._random()
        return self._take_fresh() if self.n_fresh else self._random()

    def _take_fresh(self) -> int:
        """The earliest fresh EV (`remove_earliest_fresh`)."""
        s = self.ring[(self.head - self.n_fresh) % len(self.ring)]
        self.recycled += 1
        s.life -= 1
        if self.lifetime == 1 or s.life <= 0:
            s.valid = False
            self.n_fresh -= 1
        return s.ev

    def _take_frozen(self) -> int:
        """Frozen: the remembered EVs in turn, fresh or not (`remove_frozen`)."""
        s = self.ring[self.head_frozen]
        self.recycled += 1
        s.life -= 1
        if s.valid and (self.lifetime == 1 or s.life < 0):
            s.valid = False
            self.n_fresh -= 1
        self.head_frozen = (self.head_frozen + 1) % self.count
        return s.ev

    def _add(self, ev: int) -> None:
        s = self.ring[self.head]
        if not s.valid:
            self.n_fresh = min(self.n_fresh + 1, len(self.ring))
        s.ev, s.valid, s.life = ev, True, self.lifetime
        self.head = (self.head + 1) % len(self.ring)
        self.count = min(self.count + 1, len(self.ring))

    def feedback(self, ev: int, ecn: bool, now: float | None = None) -> None:
        """An ACK for a packet sent with `ev` came back at `now`, marked or not (REPS
        learns; the first ACK after the freeze ends starts exploring)."""
        if self.mode != "reps":
            return
        if self.frozen and now is not None and now > self.thaw_at:
            self.frozen = False
            self._reset()
            self.explore = self.explore_n
        if not ecn:
            self._add(ev)

    def timeout(self, now: float) -> None:
        """A retransmission timeout: REPS freezes (not while frozen or exploring)."""
        if self.mode == "reps" and self.freeze_s > 0 and not self.frozen and not self.explore:
            self.frozen = True
            self.thaw_at = now + self.freeze_s
            self.freezes += 1
