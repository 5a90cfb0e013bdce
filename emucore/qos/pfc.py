"""Priority-based Flow Control (IEEE 802.1Qbb), DSCP-based as in book ch.11 (pure).

* The frame itself (0x8808, opcode 0x0101) is `emucore.wire.pause`.
* ``IngressPfc``: buffer accounting per (ingress port, priority) (ch.11 Step 2,
  Figs 11-4..11-6). Bytes are held from admission until the frame leaves its egress
  queue. Above xOFF -> send a pause; while above xON the pause is refreshed before it
  expires; below xON -> send a resume (quanta 0). A no-drop priority only loses frames
  past xOFF + headroom (a headroom overflow: the headroom was sized too small).
* ``EgressPause``: what a received pause does to an egress port (ch.11 Step 4): that
  priority stops until the quanta expire or a resume arrives; others keep flowing.

``Pfc`` is the configuration: the network-qos policy (Example 11-4) and the thresholds
the book leaves implicit. ``headroom_needed`` is the one headroom rule, used by the
validator (`emucore.qos.advice`) and by the switch agent at start-up.

Times are lab seconds (``now``); durations are converted with ``emucore.timedil``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from emucore.qos.classify import ROCE_PRIORITY
from emucore.qos.fields import NUM_QUEUES, int_in, normalise, size
from emucore.timedil import TimeDilation
from emucore.wire.pause import MAX_QUANTA, pause_frame, parse_pfc

class Admission(enum.IntEnum):
    """What ingress PFC accounting does with one received frame."""

    ADMIT = 0  # admitted, nothing to send
    XOFF = 1  # admitted, and send a pause for this priority now
    HEADROOM_DROP = 2  # past xOFF + headroom: drop the frame (headroom sized too small)


@dataclass(frozen=True)
class Pfc:
    """`policy-map type network-qos` (Example 11-4) + PFC thresholds per ingress port and
    priority (bytes, model = lab). Default xON < WRED min < WRED max < xOFF (ch.11)."""

    policy: str = "qos_network"
    no_drop: frozenset[int] = frozenset({ROCE_PRIORITY})  # pause pfc-cos 3
    xoff_bytes: int = 3_200_000  # > WRED max 3000 KB of the book profile
    xon_bytes: int = 100_000  # < WRED min 150 KB
    headroom_bytes: int = 200_000  # see headroom_needed
    pause_quanta: int = MAX_QUANTA  # quanta sent in a pause

    def __post_init__(self) -> None:
        if not isinstance(self.no_drop, (list, tuple, set, frozenset)):
            raise ValueError(f"no_drop: expected a list of priorities, got {self.no_drop!r}")
        normalise(self, "no_drop", frozenset(self.no_drop))
        for p in sorted(self.no_drop):
            int_in("no_drop", p, 0, NUM_QUEUES - 1)
        for name in ("xoff_bytes", "xon_bytes", "headroom_bytes"):
            normalise(self, name, size(name, getattr(self, name)))
        if self.xon_bytes >= self.xoff_bytes:
            raise ValueError(f"xon_bytes: must be < xoff_bytes ({self.xoff_bytes}), "
                             f"got {self.xon_bytes!r}")
        int_in("pause_quanta", self.pause_quanta, 1, MAX_QUANTA)


def headroom_needed(model_bps: float, one_way_delay_s: float, mtu: int) -> int:
    """Bytes a no-drop priority must still absorb after crossing xOFF on a link of
    `model_bps` with cable delay `one_way_delay_s` (model s): 2 x delay x rate + 2 x MTU.

    The book (ch.11 Step 2, docs/FABRIC_FACTS.md "PFC") asks the headroom to hold what is
    in flight while the pause takes effect: the pause travels one way while the sender
    keeps sending (delay x rate), the bytes already on the cable still land (delay x
    rate), the sender finishes the frame it has begun (1 MTU) and the frame that crossed
    xOFF is taken whole (1 MTU). Sender response time is not added: the emulated NICs and
    agents act on a pause when they read it. Rounded up to whole bytes (float noise below
    a millibyte ignored)."""
    return math.ceil(round(2 * one_way_delay_s * model_bps / 8, 3)) + 2 * mtu


class IngressPfc:
    """Buffer accounting and xOFF/xON state of one ingress port, per priority."""

    __slots__ = ("cfg", "enabled", "held", "paused", "refresh_at", "next_refresh",
                 "refresh_s", "pause_s", "xoff", "xon", "drop_above", "pause_frames",
                 "resume_frames", "xoff_sent", "xon_sent", "refreshes", "headroom_drops",
                 "max_held")

    def __init__(self, cfg: Pfc, src_mac: bytes, model_bps: float, td: TimeDilation,
                 refresh_fraction: float = 0.5) -> None:
        if not 0.0 < refresh_fraction < 1.0:
            raise ValueError(f"refresh_fraction: must be in (0, 1), got {refresh_fraction!r}")
        self.cfg = cfg
        self.enabled = [p in cfg.no_drop for p in range(8)]
        self.held = [0] * 8
        self.paused = [False] * 8
        self.refresh_at = [math.inf] * 8
        self.next_refresh = math.inf  # earliest refresh_at: the agent's wake-up time
        self.pause_s = td.pause_lab_s(cfg.pause_quanta, model_bps)
        #: re-send the pause after this fraction of its duration while above xON
        self.refresh_s = refresh_fraction * self.pause_s
        self.xoff = cfg.xoff_bytes
        self.xon = cfg.xon_bytes
        self.drop_above = cfg.xoff_bytes + cfg.headroom_bytes
        self.pause_frames = [pause_frame(src_mac, p, cfg.pause_quanta) for p in range(8)]
        self.resume_frames = [pause_frame(src_mac, p, 0) for p in range(8)]
        self.xoff_sent = [0] * 8
        self.xon_sent = [0] * 8
        self.refreshes = [0] * 8
        self.headroom_drops = [0] * 8
        self.max_held = [0] * 8

    def admit(self, prio: int, nbytes: int, now: float) -> Admission:
        """Account a received frame: ADMIT, XOFF (admitted; send pause_frames[prio]) or
        HEADROOM_DROP. Priorities without PFC are not accounted."""
        if not self.enabled[prio]:
            return Admission.ADMIT
        h = self.held[prio] + nbytes
        if h > self.drop_above:
            self.headroom_drops[prio] += 1
            return Admission.HEADROOM_DROP
        self.held[prio] = h
        if h > self.max_held[prio]:
            self.max_held[prio] = h
        if h > self.xoff and not self.paused[prio]:
            self.paused[prio] = True
            self.xoff_sent[prio] += 1
            t = now + self.refresh_s
            self.refresh_at[prio] = t
            if t < self.next_refresh:
                self.next_refresh = t
            return Admission.XOFF
        return Admission.ADMIT

    def release(self, prio: int, nbytes: int, now: float) -> bool:
        """A frame admitted here left its egress queue (sent or dropped); True when the
        priority fell below xON: send resume_frames[prio]."""
        if not self.enabled[prio]:
            return False
        h = self.held[prio] - nbytes
        self.held[prio] = h
        if h < self.xon and self.paused[prio]:
            self.paused[prio] = False
            self.xon_sent[prio] += 1
            self.refresh_at[prio] = math.inf
            self.next_refresh = min(self.refresh_at)
            return True
        return False

    def tick(self, now: float) -> list[int]:
        """Priorities whose pause must be re-sent now (still above xON, pause about to
        expire upstream); cheap when now < next_refresh."""
        if now < self.next_refresh:
            return []
        out = []
        for p in range(8):
            if self.refresh_at[p] <= now:
                self.refresh_at[p] = now + self.refresh_s
                self.refreshes[p] += 1
                out.append(p)
        self.next_refresh = min(self.refresh_at)
        return out

    def counters(self) -> dict:
        """Snapshot for `show pfc` and metrics."""
        return {"held_bytes": list(self.held), "max_held_bytes": list(self.max_held),
                "paused": [p for p in range(8) if self.paused[p]],
                "xoff_sent": list(self.xoff_sent), "xon_sent": list(self.xon_sent),
                "refreshes": list(self.refreshes), "headroom_drops": list(self.headroom_drops)}


class EgressPause:
    """Pause state of one egress port, driven by the PFC frames received on it."""

    __slots__ = ("model_bps", "td", "until", "since", "last_rx", "resumed_at", "mask",
                 "next_expiry", "pauses_rx", "resumes_rx", "paused_s", "expired")

    def __init__(self, model_bps: float, td: TimeDilation) -> None:
        self.model_bps = model_bps
        self.td = td
        self.until = [0.0] * 8  # lab time a priority's pause ends
        self.since = [-1.0] * 8  # start of its current continuous pause, -1 if running
        self.last_rx = [-math.inf] * 8  # last non-zero pause received
        self.resumed_at = [0.0] * 8  # when its last pause ended (resume, or its expiry)
        self.mask = 0
        self.next_expiry = math.inf
        self.pauses_rx = [0] * 8
        self.resumes_rx = [0] * 8
        self.paused_s = [0.0] * 8  # lab seconds paused, closed intervals
        #: (priority, lab time of the expiry) of pauses that ran out, noted when a list: an
        #: expiry is found lazily, after it happened (the agent's event log, docs/EVENTS.md)
        self.expired: list[tuple[int, float]] | None = None

    def on_pfc(self, class_enable: int, quanta: Sequence[int], now: float) -> None:
        """Apply a received PFC frame: quanta q > 0 pauses for q x 512 bit times at the
        model rate (dilated), q = 0 resumes; a new pause reloads the timer."""
        self._expire(now)
        for p in range(8):
            if not class_enable >> p & 1:
                continue
            q = quanta[p]
            if q:
                self.pauses_rx[p] += 1
                self.last_rx[p] = now
                if self.since[p] < 0:
                    self.since[p] = now
                self.until[p] = now + self.td.pause_lab_s(q, self.model_bps)
            else:
                self.resumes_rx[p] += 1
                if self.since[p] >= 0:
                    self.paused_s[p] += now - self.since[p]
                    self.since[p] = -1.0
                    self.resumed_at[p] = now
                self.until[p] = 0.0
        self._recompute()

    def on_frame(self, frame: bytes, now: float) -> bool:
        """Parse and apply a received frame; False if it is not PFC."""
        parsed = parse_pfc(frame)
        if parsed is None:
            return False
        self.on_pfc(parsed[0], parsed[1], now)
        return True

    def paused_mask(self, now: float) -> int:
        """Bit p set while priority p is paused (cached until the next expiry)."""
        if now < self.next_expiry:
            return self.mask
        self._expire(now)
        self._recompute()
        return self.mask

    def paused_time(self, prio: int, now: float) -> float:
        """Lab seconds priority `prio` has been paused, including a pause in progress."""
        self._expire(now)
        s = self.since[prio]
        return self.paused_s[prio] + (now - s if s >= 0 else 0.0)

    def _expire(self, now: float) -> None:
        for p in range(8):
            if self.since[p] >= 0 and self.until[p] <= now:
                if self.expired is not None:
                    self.expired.append((p, self.until[p]))
                self.paused_s[p] += self.until[p] - self.since[p]
                self.resumed_at[p] = self.until[p]
                self.since[p] = -1.0
                self.until[p] = 0.0

    def _recompute(self) -> None:
        mask, nxt = 0, math.inf
        for p in range(8):
            if self.since[p] >= 0:
                mask |= 1 << p
                if self.until[p] < nxt:
                    nxt = self.until[p]
        self.mask, self.next_expiry = mask, nxt

    def counters(self, now: float) -> dict:
        """Snapshot: pauses/resumes received and paused time (lab s) per priority."""
        return {"pauses_rx": list(self.pauses_rx), "resumes_rx": list(self.resumes_rx),
                "paused_model_s": [self.td.model_time(self.paused_time(p, now))
                                   for p in range(8)],
                "paused_mask": self.paused_mask(now)}
