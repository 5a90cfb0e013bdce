"""PFC watchdog: detect a PFC storm / deadlock on an egress queue and mitigate (pure).

Book ch.11, "Priority Flow Control Watchdog" (Examples 11-5 and 11-7,
``priority-flow-control watch-dog``): a queue paused for too long is a stuck pause
(a broken NIC sending pauses forever, or a cyclic buffer dependency). The behaviour
follows SONiC's PFC watchdog (sonic-net/SONiC wiki "PFC Watchdog Design"): three
functions, detection, mitigation, restoration.

The configuration is a `emucore.qos.interface.Watchdog` (``detect_s``, ``restore_s``,
``action``); the watched priorities are the port's no-drop ones.

* Detection: a monitored (no-drop) priority whose egress queue is paused *and* holds
  frames, continuously for ``detect_s`` (default 200 ms, SONiC's default), is
  declared stormed. The state is polled: resolution = the interval between ``check``
  calls (call it at least every detect_s / 4).
* Mitigation, ``action``: ``drop`` - the queued frames of that priority on that port are
  flushed and arriving ones dropped (``drop_mask``); ``forward`` - the pause is ignored
  (``ignore_mask``: clear those bits from the paused mask given to the scheduler).
* Restoration: after ``restore_s`` with no pause frame received for that
  priority, normal PFC behaviour returns.

Times are model seconds in the config (the fabric's world) and lab seconds in ``now``;
``emucore.timedil.TimeDilation`` converts. Note that at TDF 5000, 200 ms model is 1000 s in
the lab: scale the defaults down for lab experiments that want to see a storm handled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from emucore.qos.interface import Watchdog
from emucore.timedil import TimeDilation


@dataclass(frozen=True)
class WatchdogEvent:
    """A storm detected or restored (returned to the caller for logging)."""

    kind: str  # "storm" | "restore"
    port: str
    priority: int
    action: str
    lab_time: float
    model_time: float

    def __str__(self) -> str:
        what = "PFC storm detected" if self.kind == "storm" else "PFC storm restored"
        return (f"{self.port}: {what} on priority {self.priority} "
                f"(action {self.action}, t_model={self.model_time * 1e3:.3f} ms)")


class PfcWatchdog:
    """Watchdog state of one egress port."""

    __slots__ = ("cfg", "td", "port", "detect_s", "restore_s", "watched", "cond_since",
                 "stormed", "drop_mask", "ignore_mask", "storms_detected", "storms_restored",
                 "dropped")

    def __init__(self, cfg: Watchdog, priorities: Iterable[int], td: TimeDilation,
                 port: str = "") -> None:
        self.cfg = cfg
        self.td = td
        self.port = port
        self.detect_s = td.lab_time(cfg.detect_s)
        self.restore_s = td.lab_time(cfg.restore_s)
        self.watched = sum(1 << p for p in set(priorities))
        self.cond_since = [-1.0] * 8  # since when paused with frames waiting, -1 if not
        self.stormed = 0  # bit mask of stormed priorities
        self.drop_mask = 0  # stormed with action drop: drop arrivals for these queues
        self.ignore_mask = 0  # stormed with action forward: ignore their pause
        self.storms_detected = [0] * 8
        self.storms_restored = [0] * 8
        self.dropped = [0] * 8

    def check(self, now: float, paused_mask: int, backlog_mask: int,
              last_pause_rx: Sequence[float]) -> list[WatchdogEvent]:
        """Advance detection/restoration at lab time `now`; `paused_mask` from
        EgressPause.paused_mask, `backlog_mask` from PortQueues.backlog_mask,
        `last_pause_rx` = EgressPause.last_rx. Returns the events (usually none)."""
        cond = paused_mask & backlog_mask & self.watched & ~self.stormed
        events: list[WatchdogEvent] = []
        if not (cond or self.stormed or any(s >= 0 for s in self.cond_since)):
            return events
        for p in range(8):
            bit = 1 << p
            if self.stormed & bit:
                if now - last_pause_rx[p] >= self.restore_s:
                    self.stormed &= ~bit
                    self.drop_mask &= ~bit
                    self.ignore_mask &= ~bit
                    self.storms_restored[p] += 1
                    events.append(self._event("restore", p, now))
            elif cond & bit:
                if self.cond_since[p] < 0:
                    self.cond_since[p] = now
                elif now - self.cond_since[p] >= self.detect_s:
                    self.cond_since[p] = -1.0
                    self.stormed |= bit
                    if self.cfg.action == "drop":
                        self.drop_mask |= bit
                    else:
                        self.ignore_mask |= bit
                    self.storms_detected[p] += 1
                    events.append(self._event("storm", p, now))
            else:
                self.cond_since[p] = -1.0
        return events

    def _event(self, kind: str, p: int, now: float) -> WatchdogEvent:
        return WatchdogEvent(kind, self.port, p, self.cfg.action, now, self.td.model_time(now))

    def effective_mask(self, paused_mask: int) -> int:
        """The paused mask the scheduler should obey (forward action ignores pauses)."""
        return paused_mask & ~self.ignore_mask

    def note_dropped(self, prio: int, n: int = 1) -> None:
        """Count `n` frames dropped by the watchdog (flushed or arriving)."""
        self.dropped[prio] += n

    def counters(self) -> dict:
        """Snapshot for `show pfc watchdog` and metrics."""
        return {"stormed": [p for p in range(8) if self.stormed >> p & 1],
                "storms_detected": list(self.storms_detected),
                "storms_restored": list(self.storms_restored),
                "dropped": list(self.dropped), "action": self.cfg.action,
                "detection_model_s": self.cfg.detect_s,
                "restoration_model_s": self.cfg.restore_s}

