"""NSCC, the UET sender's window-based congestion control (issue 16; docs/UET.md "NSCC", after uet-htsim's `updateCwndOnAck_NSCC`; pure: time passed in,
model seconds).

Signals per ACK: the ECN echo (the ACK's M flag: a CE-marked packet reached the target)
and the queueing delay, delay = RTT sample - base RTT (the smallest RTT seen). With the
target queueing delay t (0.75 x base RTT when the fabric trims, else the base RTT):

| ECN | delay     | action |
|-----|-----------|--------|
| no  | < t       | proportional increase: alpha x acked x (t - delay) (fast increase when the delay stays under 1 us for a whole window) |
| no  | >= t      | fair increase: fi x acked |
| yes | >= t      | multiplicative decrease: cwnd x max(1 - 0.8 (d - t) / d, 0.5), d the averaged delay, at most once per base RTT |
| yes | < t       | nothing (the path is congested, not the flow: change the entropy value) |

Increases accumulate and are applied as cwnd += inc / cwnd once a window of bytes was
acknowledged or a base RTT passed (plus eta once per base RTT). QuickAdapt: when a delay
sample exceeds 4 t, or a trimmed packet is NACKed, the window falls to what was actually
acknowledged over the last base RTT + t. A NACK also takes the NACKed bytes off the
window. The window stays in [one MTU, 1.5 BDP]. Constants: a = BDP / (100 Gbps x 12 us),
alpha = 4 MSS a b / t (b = 1 here), fi = 5 MSS a, eta = 0.15 MSS a.
"""

from __future__ import annotations

from dataclasses import dataclass

REF_BDP = 100e9 / 8 * 12e-6  #: bytes: the reference BDP the constants scale by (UET_FACTS)
GAMMA = 0.8
MD_FLOOR = 0.5
QA_FACTOR = 4.0


@dataclass
class NsccConfig:
    """NSCC parameters; rates in bit/s, times in model seconds."""

    base_rtt_s: float = 10e-6       #: until a smaller RTT is measured
    trimming: bool = False          #: the fabric trims: target = 0.75 x base RTT
    delay_alpha: float = 0.0125     #: EWMA weight of the averaged delay
    fast_delay_s: float = 1e-6      #: fast increase below this delay
    fast_scale: float = 0.5         #: fast increase per acked byte
    b: float = 1.0                  #: uet-htsim's second scaling factor

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        for name in ("base_rtt_s", "delay_alpha", "fast_delay_s", "fast_scale", "b"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")


class Nscc:
    """The window of one sender (one PDC)."""

    def __init__(self, link_bps: float, mtu: int, cfg: NsccConfig | None = None) -> None:
        self.cfg = cfg or NsccConfig()
        self.link_bps, self.mtu = link_bps, mtu
        self.base_rtt = self.cfg.base_rtt_s
        self._scale()
        self.cwnd = self.bdp
        self.avg_delay = 0.0
        self.inc_bytes = 0.0
        self.acked_since_adjust = 0
        self.last_adjust = 0.0
        self.last_dec = -1.0
        self.fi_count = 0
        self.increasing = False
        self.qa_trigger = False
        self.qa_end = 0.0
        self.achieved = 0
        self.counters = {"acks": 0, "ecn": 0, "fair": 0, "proportional": 0, "fast": 0,
                         "decrease": 0, "path_change": 0, "quick_adapt": 0, "nacks": 0}

    def _scale(self) -> None:
        c = self.cfg
        self.bdp = max(self.base_rtt * self.link_bps / 8, float(self.mtu))
        self.max_wnd = 1.5 * self.bdp
        self.target = (0.75 if c.trimming else 1.0) * self.base_rtt
        a = self.bdp / REF_BDP
        self.alpha = 4 * self.mtu * a * c.b / self.target
        self.fi = 5 * self.mtu * a
        self.eta = 0.15 * self.mtu * a

    def _bounds(self) -> None:
        self.cwnd = min(max(self.cwnd, float(self.mtu)), self.max_wnd)

    def _quick_adapt(self, now: float) -> bool:
        """Cut the window to what was achieved, once per window after a trigger."""
        if now < self.qa_end:
            return False
        done = False
        if self.qa_trigger and self.achieved < self.cwnd:
            self.cwnd = max(float(self.achieved), float(self.mtu))
            self.counters["quick_adapt"] += 1
            self.inc_bytes = 0.0
            done = True
        self.qa_trigger = False
        self.achieved = 0
        self.qa_end = now + self.base_rtt + self.target
        return done

    def on_ack(self, now: float, acked: int, rtt: float | None, ecn: bool) -> str:
        """An ACK newly acknowledging `acked` bytes, with an RTT sample (None: the
        acknowledged packet was retransmitted) and the ECN echo; returns the action."""
        self.counters["acks"] += 1
        self.achieved += acked
        if ecn:
            self.counters["ecn"] += 1
        if rtt is not None and rtt > 0 and rtt < self.base_rtt:
            self.base_rtt = rtt
            self._scale()
        delay = max(0.0, rtt - self.base_rtt) if rtt is not None else self.avg_delay
        self.avg_delay += self.cfg.delay_alpha * (delay - self.avg_delay)
        if delay > QA_FACTOR * self.target:
            self.qa_trigger = True
        if self._quick_adapt(now):
            return "quick_adapt"
        if not ecn and delay >= self.target:
            action = "fair"
            self.inc_bytes += self.fi * acked
            self.increasing = False
        elif not ecn:
            action = self._proportional(acked, delay)
        elif delay >= self.target:
            action = "decrease"
            self.increasing = False
            self.fi_count = 0
            d = max(self.avg_delay, delay)
            if d > self.target and now - self.last_dec > self.base_rtt:
                self.cwnd *= max(1 - GAMMA * (d - self.target) / d, MD_FLOOR)
                self.last_dec = now
        else:
            action = "path_change"
        self.counters[action] += 1
        self._bounds()
        self.acked_since_adjust += acked
        if self.acked_since_adjust > self.cwnd or now - self.last_adjust > self.base_rtt:
            self.cwnd += self.inc_bytes / self.cwnd
            if now - self.last_adjust > self.base_rtt:
                self.cwnd += self.eta
                self.last_adjust = now
            self.inc_bytes = 0.0
            self.acked_since_adjust = 0
        self._bounds()
        return action

    def _proportional(self, acked: int, delay: float) -> str:
        if delay < self.cfg.fast_delay_s:
            self.fi_count += acked
            if self.fi_count > self.cwnd or self.increasing:
                self.cwnd += acked * self.cfg.fast_scale
                self.increasing = True
                return "fast"
        else:
            self.fi_count = 0
        self.increasing = False
        self.inc_bytes += self.alpha * acked * (self.target - delay)
        return "proportional"

    def on_nack(self, now: float, nacked: int) -> None:
        """A trimmed packet was NACKed: its bytes off the window, QuickAdapt armed."""
        self.counters["nacks"] += 1
        self.qa_trigger = True
        if not self._quick_adapt(now):
            self.cwnd -= nacked
        self._bounds()

    def snapshot(self) -> dict:
        """State for counters and plots (bytes, model seconds)."""
        return {"cwnd": self.cwnd, "base_rtt_s": self.base_rtt, "target_s": self.target,
                "avg_delay_s": self.avg_delay, "bdp": self.bdp, **self.counters}
