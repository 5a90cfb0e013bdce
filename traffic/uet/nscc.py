"""NSCC, the UET sender's window-based congestion control (issue 16; docs/UET.md "NSCC"),
as the UEC's simulator implements it (`ultraethernet/uet-htsim`, `htsim/sim/uec.cpp`:
`updateCwndOnAck_NSCC`, `quick_adapt`, `fulfill_adjustment`, `update_delay`). Pure: time
passed in, model seconds.

Signals per ACK: the ECN echo (the ACK's M flag: a CE-marked packet reached the target)
and the queueing delay, delay = RTT sample - base RTT (the smallest RTT seen). With the
target queueing delay t (0.75 x base RTT when the fabric trims, else the base RTT):

| ECN | delay     | action |
|-----|-----------|--------|
| no  | < t       | proportional increase: alpha x acked x (t - delay); fast increase (cwnd += 0.25 a x acked) once the delay stayed under 1 us for a window |
| no  | >= t      | fair increase: fi x acked |
| yes | >= t      | multiplicative decrease: cwnd x max(1 - 0.8 (d - t) / d, 0.5), d the averaged delay, only when d > t, at most once per base RTT |
| yes | < t       | nothing (the path is congested, not the flow: change the entropy value) |

Increases accumulate and are applied as cwnd += inc / cwnd once more than 8 MTU were
acknowledged or a base RTT passed (plus eta once per base RTT). QuickAdapt, checked once
per window of base RTT + t: when a delay sample exceeds 4 t or a trimmed packet was
NACKed, and what was acknowledged over the last window is below max_wnd / 8, the window
falls to it; the ECN-marked ACKs (and NACKs) for the bytes then in flight are ignored
after. A NACK takes the NACKed bytes off the window (unless QuickAdapt ran or ignored it)
and enters a delay sample of one base RTT into the average; a timed-out packet's bytes
come off it too (uet-htsim `mark_packet_for_retransmission`). The averaged delay (EWMA
0.0125) takes each RTT sample, except an unmarked one over t, which enters as base RTT /
4. The window stays in [one MTU, 1.5 BDP]. Constants: a = BDP / (100 Gbps x 12 us),
b = t / 12 us, alpha = 4 MSS a b / t, fi = 5 MSS a, eta = 0.15 MSS a.

Where the specification leaves a rule open, `NsccConfig` keeps it configurable, the
simulator's choice by default (emu's earlier choice in brackets): `b` (1), `fast_scale`
(0.5 per acked byte), `md_delay` ("max": the larger of the averaged delay and the
sample), `qa_gate` (0: any achieved window below max_wnd), `qa_ignore` (False),
`adjust_mtus` (0: once per window of acknowledged bytes).
Emu's own simplification: target and gains follow the measured base RTT (uet-htsim
keeps them from the configured network RTT and updates only the BDP and max_wnd).
"""

from __future__ import annotations

from dataclasses import dataclass

REF_BDP = 100e9 / 8 * 12e-6  #: bytes: the reference BDP the constants scale by (UET_FACTS)
GAMMA = 0.8
MD_FLOOR = 0.5
QA_FACTOR = 4.0
FAST_SCALE = 0.25  #: fast increase per acked byte, x a (uet-htsim `_fi_scale`)
MD_DELAYS = ("avg", "max")


@dataclass
class NsccConfig:
    """NSCC parameters; rates in bit/s, times in model seconds. None: uet-htsim's value."""

    base_rtt_s: float = 10e-6       #: until a smaller RTT is measured
    trimming: bool = False          #: the fabric trims: target = 0.75 x base RTT
    delay_alpha: float = 0.0125     #: EWMA weight of the averaged delay
    fast_delay_s: float = 1e-6      #: fast increase below this delay
    fast_scale: float | None = None  #: fast increase per acked byte (None: 0.25 x a)
    b: float | None = None          #: second scaling factor (None: target / ref_rtt_s)
    ref_rtt_s: float = 12e-6        #: the reference RTT of b (uet-htsim `_reference_network_rtt`)
    md_delay: str = "avg"           #: MD on the averaged delay, or "max" (of avg and sample)
    qa_gate: int = 3                #: QuickAdapt only below max_wnd >> qa_gate (3: / 8)
    qa_ignore: bool = True          #: after QuickAdapt, ignore marked ACKs for the in-flight bytes
    adjust_mtus: int = 8            #: apply increases every N MTU acked (0: every window)

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        for name in ("base_rtt_s", "delay_alpha", "fast_delay_s", "ref_rtt_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        for name in ("fast_scale", "b"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name}: must be > 0 or None (uet-htsim's), got {v!r}")
        if self.md_delay not in MD_DELAYS:
            raise ValueError(f"md_delay: avg or max, got {self.md_delay!r}")
        for name in ("qa_gate", "adjust_mtus"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 30:
                raise ValueError(f"{name}: an integer 0..30, got {v!r}")


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
        self.qa_end: float | None = None  #: end of the QuickAdapt window (None: none yet)
        self.achieved = 0
        self.to_ignore = self.ignored = 0  #: bytes: the QuickAdapt ignore window
        self.counters = {"acks": 0, "ecn": 0, "fair": 0, "proportional": 0, "fast": 0,
                         "decrease": 0, "path_change": 0, "quick_adapt": 0, "ignored": 0,
                         "nacks": 0, "timeouts": 0}

    def _scale(self) -> None:
        c = self.cfg
        self.bdp = max(self.base_rtt * self.link_bps / 8, float(self.mtu))
        self.max_wnd = 1.5 * self.bdp
        self.target = (0.75 if c.trimming else 1.0) * self.base_rtt
        a = self.bdp / REF_BDP
        b = c.b if c.b is not None else self.target / c.ref_rtt_s
        self.alpha = 4 * self.mtu * a * b / self.target
        self.fi = 5 * self.mtu * a
        self.eta = 0.15 * self.mtu * a
        self.fast = c.fast_scale if c.fast_scale is not None else FAST_SCALE * a
        self.adjust_bytes = c.adjust_mtus * self.mtu

    def _bounds(self) -> None:
        self.cwnd = min(max(self.cwnd, float(self.mtu)), self.max_wnd)

    def _sample(self, delay: float, ecn: bool) -> None:
        """A delay sample into the average (uet-htsim `update_delay`)."""
        x = 0.25 * self.base_rtt if not ecn and delay > self.target else delay
        self.avg_delay += self.cfg.delay_alpha * (x - self.avg_delay)

    def _quick_adapt(self, now: float, ecn: bool, over: bool, inflight: float) -> str | None:
        """QuickAdapt (uet-htsim `quick_adapt`): "quick_adapt" when it ran, "ignored" when
        this marked signal fell in its ignore window - the caller then changes nothing
        else - or None."""
        done = None
        if self.cfg.qa_ignore and ecn and self.ignored < self.to_ignore:
            done = "ignored"
        elif self.qa_end is None or now > self.qa_end:
            if (self.qa_end is not None and (self.qa_trigger or over)
                    and self.achieved < self.max_wnd / (1 << self.cfg.qa_gate)):
                self.cwnd = max(float(self.achieved), float(self.mtu))
                self.to_ignore, self.ignored = inflight, 0
                self.qa_trigger = False
                done = "quick_adapt"
            self.achieved = 0
            self.qa_end = now + self.base_rtt + self.target
        if done:
            self.counters[done] += 1
            self.inc_bytes = 0.0
            self.acked_since_adjust = 0
        return done

    def on_ack(self, now: float, acked: int, rtt: float | None, ecn: bool,
               inflight: float | None = None) -> str:
        """An ACK newly acknowledging `acked` bytes, with an RTT sample (None: the
        acknowledged packet was retransmitted), the ECN echo and the bytes still in
        flight (None: the window); returns the action."""
        self.counters["acks"] += 1
        self.achieved += acked
        self.ignored += acked
        self.acked_since_adjust += acked
        if ecn:
            self.counters["ecn"] += 1
        if rtt is not None and rtt > 0 and rtt < self.base_rtt:
            self.base_rtt = rtt
            self._scale()
        if rtt is not None:
            delay = max(0.0, rtt - self.base_rtt)
            self._sample(delay, ecn)
        else:
            delay = self.avg_delay
        over = delay > QA_FACTOR * self.target
        qa = self._quick_adapt(now, ecn, over, self.cwnd if inflight is None else inflight)
        if qa:
            return qa
        if not ecn and delay >= self.target:
            action = "fair"
            self.inc_bytes += self.fi * acked
        elif not ecn:
            action = self._proportional(acked, delay)
        elif delay >= self.target:
            action = "decrease"
            self._decrease(now, delay)
        else:
            action = "path_change"
        self.counters[action] += 1
        self._bounds()
        if self._adjust_due(now):
            self.cwnd += self.inc_bytes / self.cwnd
            if now - self.last_adjust >= self.base_rtt:
                self.cwnd += self.eta
                self.last_adjust = now
            self.inc_bytes = 0.0
            self.acked_since_adjust = 0
        self._bounds()
        return action

    def _adjust_due(self, now: float) -> bool:
        """Increases apply after `adjust_mtus` MTU acknowledged (0: a window's worth) or a
        base RTT (uet-htsim `_adjust_bytes_threshold`, `_adjust_period_threshold`)."""
        enough = self.adjust_bytes if self.adjust_bytes else self.cwnd
        return self.acked_since_adjust > enough or now - self.last_adjust > self.base_rtt

    def _decrease(self, now: float, delay: float) -> None:
        """Multiplicative decrease (uet-htsim `multiplicative_decrease`)."""
        self.increasing = False
        self.fi_count = 0
        d = self.avg_delay if self.cfg.md_delay == "avg" else max(self.avg_delay, delay)
        if d > self.target and now - self.last_dec > self.base_rtt:
            self.cwnd *= max(1 - GAMMA * (d - self.target) / d, MD_FLOOR)
            self.last_dec = now

    def _proportional(self, acked: int, delay: float) -> str:
        if delay < self.cfg.fast_delay_s:
            self.fi_count += acked
            if self.fi_count > self.cwnd or self.increasing:
                self.cwnd += acked * self.fast
                self.increasing = True
                return "fast"
        else:
            self.fi_count = 0
        self.increasing = False
        self.inc_bytes += self.alpha * acked * (self.target - delay)
        return "proportional"

    def on_nack(self, now: float, nacked: int, inflight: float | None = None) -> str:
        """A trimmed packet was NACKed (uet-htsim `updateCwndOnNack_NSCC`): a delay sample
        of one base RTT, QuickAdapt armed; unless it ran (or the NACK fell in its ignore
        window) the NACKed bytes come off the window. Returns the action."""
        self.counters["nacks"] += 1
        self.ignored += nacked
        self._sample(self.cfg.base_rtt_s, True)  # uet-htsim: RTT = base RTT + network RTT
        self.qa_trigger = True
        qa = self._quick_adapt(now, True, False, self.cwnd if inflight is None else inflight)
        if qa:
            return qa
        self.cwnd -= nacked
        self._bounds()
        return "nack"

    def on_timeout(self, nbytes: int) -> None:
        """A packet timed out: its bytes come off the window, at least one MTU stays
        (uet-htsim `mark_packet_for_retransmission`: cwnd = max(cwnd - size, mtu); no
        delay sample, no QuickAdapt)."""
        self.counters["timeouts"] += 1
        self.cwnd = max(self.cwnd - nbytes, float(self.mtu))

    def snapshot(self) -> dict:
        """State for counters and plots (bytes, model seconds)."""
        return {"cwnd": self.cwnd, "base_rtt_s": self.base_rtt, "target_s": self.target,
                "avg_delay_s": self.avg_delay, "bdp": self.bdp, **self.counters}
