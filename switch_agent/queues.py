"""The 8 egress queues of a switch port and their scheduler: strict priority + DWRR.

Book ch.11, Example 11-3 (policy-map type queuing QOS_EGRESS_PORT): ``c-out-8q-q7
priority level 1`` (strict priority, for CNPs), ``c-out-8q-q3 bandwidth remaining
percent 50`` + WRED/ECN (``emucore.qos.wred``), the other queues "either zero percent
of remaining bandwidth ... or a share of the remaining bandwidth".

The configuration is a `emucore.qos.queuing.Queuing`; the book's (its default): queue 7
strict; queue 3 = 50 % and queue 0 (class-default, where all non-RoCE traffic goes) = 50 %
of what the strict queue leaves; queues 1, 2, 4, 5, 6 = 0 %. This is the NX-OS RoCE
queuing template the book's example abbreviates with "...". Several strict queues are
served highest number first. Percentages are relative weights among backlogged queues (work
conserving: an idle queue's share goes to the others). A 0 % queue is never starved
outright: it is served, round robin, only when no weighted queue has an eligible frame.

Deficit round robin (Shreedhar & Varghese, SIGCOMM 1995) with quantum_q =
MTU x weight_q / min(positive weights), so every visit sends at least one frame of up to
MTU bytes and the scheduler is O(1) per frame. PFC: bit n of ``paused_mask`` stops
queue n (queue n carries PFC priority n); a paused queue keeps its place and its deficit
but gains no credit until resumed. Shaping (when the wire is free) stays in
``switch_agent.shaper``: this module only picks the next frame.

For the agent's event log (docs/EVENTS.md) a port's queues note, in ``events`` once
``note_events`` was called, what happened to them: a WRED queue's depth crossing its WRED
minimum or maximum (up or down; the instantaneous depth, also with an averaging weight),
its first CE mark, every frame dropped. A frame pays one integer comparison for the
crossings (against the next level up on enqueue, down on dequeue); a note is made only
when an event happens. Per WRED queue, arrivals, CE marks and drops are also counted by
the depth they found (``wred_bins``: the measured WRED curve, ch.11 Fig 11-2).

A queued frame is an `Entry`: its queue, the frame, the ingress port whose buffer it
holds (None: not accounted), when it was queued and its PFC priority - classified once at
the ingress, so nothing downstream reads the priority off the frame again. Every entry
carries the time it was queued (the caller's clock); the caller, which knows
when the frame starts on the wire, reports each frame's sojourn (`note_sojourn`, model
µs): per queue the largest and a histogram over SOJOURN_EDGES_US - how long CNPs and
data waited (ch.11 L2468-2476: "feedback arrives quickly even during severe congestion"
because the CNP queue is strict).

Trimmed UET headers (`emucore.qos.trim.Trim`: `queue`, `share`) have a class of their own
when their queue is not strict: served after the strict queues and before the DWRR tiers,
but capped - while other frames wait, the class may run at most one MTU of bytes ahead of
`share` % of the non-strict bytes sent (a byte debt: a trimmed frame adds
len x (100 - share), a weighted or scavenger frame pays off len x share). With nothing
else eligible it is served anyway, uncharged (work conserving). Only a dequeue that has
no strict frame to send reads the class; the enqueue of any frame does no extra work.
"""

from __future__ import annotations

import bisect
import collections
import random
from collections.abc import Callable
from typing import NamedTuple

from emucore.qos.classify import mark_ce
from emucore.qos.fields import NUM_QUEUES
from emucore.qos.queuing import Queuing
from emucore.qos.trim import Trim
from emucore.qos.wred import WredVerdict, ewma_depth, wred_decide

#: depth bin of the WRED curve counters: the book's WRED minimum (Example 11-3, 150 KB)
WRED_BIN_BYTES = 150_000
WRED_BINS = 40  #: bins reported; arrivals at 39 x 150 KB and deeper count in the last
NEVER = 1 << 62  # a depth no queue reaches
#: sojourn histogram bin edges, model µs: bin i counts sojourns < SOJOURN_EDGES_US[i]
#: (after the previous edge), the last bin those from 1000 µs on
SOJOURN_EDGES_US = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class Entry(NamedTuple):
    """A queued frame, the layout of every FIFO item, `dequeue`'s and `flush`'s answer.

    The queues build and hand out plain tuples of this layout (unpacked by position on
    the hot path): constructing a NamedTuple costs about as much again as the rest of the
    queue's work on a frame (issue 29, measured with callgrind)."""

    queue: int
    frame: bytes
    ingress: object  #: the ingress `switch_agent.port.Port` holding its bytes, or None
    queued: float  #: lab time it was queued
    prio: int  #: its PFC priority (its CBFC channel), classified at the ingress


class Drr:
    """Deficit round robin over a fixed set of queues (state only; frames live outside)."""

    __slots__ = ("quantum", "deficit", "topped", "active")

    def __init__(self, quanta: dict[int, int]) -> None:
        self.quantum = [quanta.get(q, 0) for q in range(NUM_QUEUES)]
        self.deficit = [0] * NUM_QUEUES
        self.topped = [False] * NUM_QUEUES  # quantum already granted for this visit
        self.active: collections.deque[int] = collections.deque()

    def activate(self, q: int) -> None:
        """Queue q just became non-empty."""
        self.active.append(q)

    def deactivate(self, q: int) -> None:
        """Queue q was emptied from outside (flush)."""
        if q in self.active:
            self.active.remove(q)
        self.deficit[q] = 0
        self.topped[q] = False

    def pick(self, fifo: list, paused_mask: int) -> int:
        """Charge and return the queue whose head frame goes next, or -1 if all paused."""
        active = self.active
        deficit = self.deficit
        paused_run = 0
        while active:
            q = active[0]
            if paused_mask >> q & 1:
                paused_run += 1
                if paused_run >= len(active):
                    return -1
                active.rotate(-1)
                continue
            paused_run = 0
            if not self.topped[q]:
                deficit[q] += self.quantum[q]
                self.topped[q] = True
            entries = fifo[q]
            size = len(entries[0][1])
            if size <= deficit[q]:
                if len(entries) == 1:  # leaves the active list with it
                    active.popleft()
                    deficit[q] = 0
                    self.topped[q] = False
                else:
                    deficit[q] -= size
                return q
            self.topped[q] = False
            active.rotate(-1)
        return -1


class PortQueues:
    """The 8 egress FIFOs of one port, WRED/ECN at enqueue, strict + DWRR at dequeue."""

    __slots__ = ("cfg", "fifo", "qbytes", "packets", "bytes", "wred", "limit", "strict",
                 "tier_of", "weighted", "scavenger", "l3", "rng", "enq_packets", "enq_bytes",
                 "deq_packets", "deq_bytes", "marks", "drops", "max_qbytes", "avg", "wmin",
                 "wmax", "up_at", "down_at", "bin_seen", "bin_marked", "bin_dropped",
                 "events", "sojourn_max", "sojourn_hist", "trim_q", "trim_share",
                 "trim_debt", "trim_burst")

    def __init__(self, cfg: Queuing | None = None, mtu: int = 9216,
                 rng: Callable[[], float] | None = None, l3: int = 14,
                 trim: Trim | None = None) -> None:
        cfg = cfg or Queuing()
        if not (isinstance(mtu, int) and mtu >= 64):
            raise ValueError(f"mtu: must be an int >= 64, got {mtu!r}")
        #: uniform [0, 1) source for WRED, drawn only when a queue is past WRED min
        self.rng = rng if rng is not None else random.Random(1).random
        self.cfg = cfg
        #: per queue: its entries, oldest first (`Entry` layout)
        self.fifo: list[collections.deque[tuple]] = [
            collections.deque() for _ in range(NUM_QUEUES)]
        self.qbytes = [0] * NUM_QUEUES
        self.avg = [0.0] * NUM_QUEUES  # WRED averaged depth (only for weight > 0)
        self.packets = 0  # frames queued, all queues
        self.bytes = 0  # bytes queued, all queues
        self.wred = [q.wred for q in cfg.queues]
        #: tail-drop limit; a WRED queue's is at least its WRED max (docs/FABRIC_FACTS.md
        #: "Switch QoS": a smaller configured limit is warned about and raised)
        self.limit = [q.limit_bytes if q.wred is None else max(q.limit_bytes, q.wred.max_bytes)
                      for q in cfg.queues]
        self.wmin = [-1 if w is None else w.min_bytes for w in self.wred]
        self.wmax = [-1 if w is None else w.max_bytes for w in self.wred]
        #: the WRED level a queue's depth reaches next going up / falls below going down
        #: (NEVER / -1: none; both while events are not noted)
        self.up_at = [NEVER] * NUM_QUEUES
        self.down_at = [-1] * NUM_QUEUES
        #: per WRED queue: arrivals, CE marks, drops by depth on arrival // WRED_BIN_BYTES,
        #: one counter per bin up to the limit (the depth never exceeds it)
        bins = [None if w is None else self.limit[q] // WRED_BIN_BYTES + 1
                for q, w in enumerate(self.wred)]
        self.bin_seen = [None if n is None else [0] * n for n in bins]
        self.bin_marked = [None if n is None else [0] * n for n in bins]
        self.bin_dropped = [None if n is None else [0] * n for n in bins]
        #: (event, fields) for the agent's event log (docs/EVENTS.md); None: not noted
        self.events: list[tuple[str, dict]] | None = None
        self.strict = tuple(q for q in reversed(range(NUM_QUEUES)) if cfg.queues[q].strict)
        self.l3 = l3
        #: the trimmed-header class (-1: none, or its queue is strict)
        self.trim_q = trim.queue if trim is not None and trim.queue not in self.strict else -1
        self.trim_share = trim.share if self.trim_q >= 0 else 100
        self.trim_debt = 0  # bytes x percent the class ran ahead of its share
        self.trim_burst = mtu * (100 - self.trim_share)  # it may run one MTU ahead
        others = [q for q in range(NUM_QUEUES) if q not in self.strict and q != self.trim_q]
        weights = {q: cfg.queues[q].bandwidth_percent for q in others
                   if cfg.queues[q].bandwidth_percent}
        unit = min(weights.values()) if weights else 1
        #: DWRR quantum unit = MTU (largest frame normally seen)
        self.weighted = Drr({q: max(1, round(mtu * w / unit)) for q, w in weights.items()})
        self.scavenger = Drr({q: mtu for q in others if q not in weights})
        self.tier_of = [None if q in self.strict or q == self.trim_q else
                        self.weighted if q in weights else self.scavenger
                        for q in range(NUM_QUEUES)]
        self.enq_packets = [0] * NUM_QUEUES
        self.enq_bytes = [0] * NUM_QUEUES
        self.deq_packets = [0] * NUM_QUEUES
        self.deq_bytes = [0] * NUM_QUEUES
        self.marks = [0] * NUM_QUEUES
        self.max_qbytes = [0] * NUM_QUEUES
        self.drops: list[dict[str, int]] = [{} for _ in range(NUM_QUEUES)]
        self.sojourn_max = [0.0] * NUM_QUEUES  # model µs
        self.sojourn_hist = [[0] * (len(SOJOURN_EDGES_US) + 1) for _ in range(NUM_QUEUES)]

    def note_events(self) -> None:
        """Note events in `events` from now on."""
        self.events = []
        for q in range(NUM_QUEUES):
            if self.wred[q] is not None:
                self._levels(q, self.qbytes[q])

    def _levels(self, q: int, depth: int) -> None:
        """The WRED levels around `depth` a frame of queue q would cross next."""
        lo, hi = self.wmin[q], self.wmax[q]
        self.up_at[q] = lo if depth < lo else hi if depth < hi else NEVER
        self.down_at[q] = hi if depth >= hi else lo if depth >= lo else -1

    def drop(self, q: int, reason: str, n: int = 1) -> None:
        """Count `n` frames of queue q dropped for `reason`."""
        d = self.drops[q]
        d[reason] = d.get(reason, 0) + n
        if self.events is not None:
            self.events.extend([("drop", {"queue": q, "reason": reason})] * n)

    def enqueue(self, q: int, frame: bytes, ingress: object = None, tos: int = 0,
                now: float = 0.0, prio: int = 0) -> WredVerdict:
        """Tail drop at the queue limit, WRED (ECN bits from `tos`; 0 for non-IP), then
        append an `Entry` (stamped `now`, carrying `ingress` and `prio`); FORWARD/MARK =
        queued (MARK: the queued copy carries CE), DROP = not queued (counted)."""
        depth = self.qbytes[q]
        n = len(frame)
        limit = self.limit[q]
        wred = self.wred[q]
        if wred is not None:
            b = depth // WRED_BIN_BYTES  # the depth bin this frame found
            self.bin_seen[q][b] += 1
        if depth + n > limit:  # the buffer never exceeds the limit
            self.drop(q, "queue_full")
            if wred is not None:
                self.bin_dropped[q][b] += 1
            return WredVerdict.DROP
        verdict = WredVerdict.FORWARD
        if wred is not None:
            seen = depth
            if wred.weight:
                seen = self.avg[q] = ewma_depth(self.avg[q], depth, wred.weight)
            if seen >= wred.min_bytes:
                verdict = wred_decide(seen, tos & 3, wred, self.rng(), limit)
                if verdict is WredVerdict.DROP:
                    self.drop(q, "wred")
                    self.bin_dropped[q][b] += 1
                    return verdict
                if verdict is WredVerdict.MARK:
                    frame = mark_ce(frame, self.l3)
                    self.bin_marked[q][b] += 1
                    m = self.marks[q] = self.marks[q] + 1
                    if m == 1 and self.events is not None:
                        self.events.append(("ce_first", {"queue": q, "depth": depth}))
        entries = self.fifo[q]
        if not entries:
            tier = self.tier_of[q]
            if tier is not None:
                tier.activate(q)
        entries.append((q, frame, ingress, now, prio))
        after = depth + n
        self.qbytes[q] = after
        if after > self.max_qbytes[q]:
            self.max_qbytes[q] = after
        self.packets += 1
        self.bytes += n
        self.enq_packets[q] += 1
        self.enq_bytes[q] += n
        if after >= self.up_at[q]:
            self._crossed(q, depth, after)
        return verdict

    def dequeue(self, paused_mask: int = 0) -> tuple | None:
        """The `Entry` of the next frame to send, or None (empty or all paused)."""
        if not self.packets:
            return None
        fifo = self.fifo
        for q in self.strict:
            if fifo[q] and not paused_mask >> q & 1:
                return self._pop(q)
        t = self.trim_q
        trimmed = t >= 0 and fifo[t] and not paused_mask >> t & 1
        if trimmed and self.trim_debt < self.trim_burst:
            self.trim_debt += len(fifo[t][0][1]) * (100 - self.trim_share)
            return self._pop(t)
        q = self.weighted.pick(fifo, paused_mask) if self.weighted.active else -1
        if q < 0 and self.scavenger.active:
            q = self.scavenger.pick(fifo, paused_mask)
        if q < 0:
            return self._pop(t) if trimmed else None   # alone: uncharged
        if self.trim_debt:
            self.trim_debt = max(0, self.trim_debt - len(fifo[q][0][1]) * self.trim_share)
        return self._pop(q)

    def _pop(self, q: int) -> tuple:
        entry = self.fifo[q].popleft()
        n = len(entry[1])
        after = self.qbytes[q] - n
        self.qbytes[q] = after
        self.packets -= 1
        self.bytes -= n
        self.deq_packets[q] += 1
        self.deq_bytes[q] += n
        if after < self.down_at[q]:
            self._crossed(q, after + n, after)
        return entry

    def note_sojourn(self, q: int, us: float) -> None:
        """A frame of queue q waited `us` model µs from its arrival to its first bit."""
        if us > self.sojourn_max[q]:
            self.sojourn_max[q] = us
        self.sojourn_hist[q][bisect.bisect_right(SOJOURN_EDGES_US, us)] += 1

    def _crossed(self, q: int, before: int, after: int) -> None:
        """Note the WRED levels queue q's depth crossed going from `before` to `after`
        bytes (up: reached, down: fell below); the next levels to watch."""
        marks = (("wred_min", self.wmin[q]), ("wred_max", self.wmax[q]))
        for ev, level in marks if after > before else reversed(marks):
            if before < level <= after:
                self.events.append((ev, {"queue": q, "dir": "up", "depth": after}))
            elif after < level <= before:
                self.events.append((ev, {"queue": q, "dir": "down", "depth": after}))
        self._levels(q, after)

    def flush(self, q: int, reason: str) -> list[tuple]:
        """Drop every frame queued in q (PFC watchdog); return their `Entry`s so the
        caller can release their ingress accounting."""
        entries = list(self.fifo[q])
        if not entries:
            return entries
        self.fifo[q].clear()
        tier = self.tier_of[q]
        if tier is not None:
            tier.deactivate(q)
        before = self.qbytes[q]
        self.packets -= len(entries)
        self.bytes -= before
        self.qbytes[q] = 0
        self.drop(q, reason, len(entries))
        if self.events is not None and self.wred[q] is not None:
            self._crossed(q, before, 0)
        return entries

    def backlog_mask(self) -> int:
        """Bit q set when queue q holds frames."""
        fifo = self.fifo
        return sum(1 << q for q in range(NUM_QUEUES) if fifo[q])

    def counters(self) -> list[dict]:
        """Per-queue counters snapshot (for `show queues` and metrics)."""
        return [{"queue": q, "depth_bytes": self.qbytes[q], "depth_packets": len(self.fifo[q]),
                 "max_depth_bytes": self.max_qbytes[q], "enqueued": self.enq_packets[q],
                 "enqueued_bytes": self.enq_bytes[q], "dequeued": self.deq_packets[q],
                 "dequeued_bytes": self.deq_bytes[q], "ecn_marked": self.marks[q],
                 "drops": dict(self.drops[q]),
                 "sojourn_max_us": round(self.sojourn_max[q], 3),
                 "sojourn_hist": list(self.sojourn_hist[q])} for q in range(NUM_QUEUES)]

    def wred_bins(self) -> dict[str, dict]:
        """The WRED curve as measured: per WRED queue that saw arrivals, arrivals
        ("seen"), CE marks and drops by the depth they found, in WRED_BIN_BYTES bins."""
        def bins(counts: list[int]) -> list[int]:  # WRED_BINS, the last one for the rest
            return (counts + [0] * WRED_BINS)[:WRED_BINS - 1] + [sum(counts[WRED_BINS - 1:])]

        return {str(q): {"bin_bytes": WRED_BIN_BYTES, "seen": bins(seen),
                         "marked": bins(self.bin_marked[q]), "dropped": bins(self.bin_dropped[q])}
                for q, seen in enumerate(self.bin_seen) if seen is not None and any(seen)}
