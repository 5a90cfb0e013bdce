"""N DCQCN senders sharing one switch egress port: a packet-level model in model time.

Book ch.11 (Figure 11-3: the switch marks CE, the receiving NIC returns CNPs, the
sending NIC slows down; Example 11-3's WRED thresholds) and docs/DCQCN_PARAMS.md ("Checks
that theory gives us: N long flows into one port converge to C/N each").

The emulated fabric runs this loop with real frames, at a lab speed a Python agent can
forward, so a run long enough for DCQCN to converge costs minutes. This model runs the
very same state machines (`traffic.dcqcn.ReactionPoint` and `NotificationPoint`,
`emucore.qos.wred.wred_decide`) on a single FIFO bottleneck with a fixed feedback
delay and no lab clock, so 100 ms of model time takes about a second. It answers "how
long should this incast take to reach its fair shares, with these parameters?" before
one spends minutes of lab time on it, and the tests use it to check the algorithm
against the theory.

    python -m traffic.tools.bottleneck --senders 3 --profile paper --ecn paper --ms 100
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass, field

from emucore.qos.wred import Wred, WredVerdict, wred_decide
from traffic.dcqcn import PROFILES, DcqcnProfile, NotificationPoint, ReactionPoint

FRAME = 4096 + 78  #: bytes on the wire of a full RoCEv2 WRITE frame (4096 B payload)
ECT0 = 2


@dataclass
class Result:
    """What a run of the model saw; times in model seconds, rates in bit/s."""

    senders: int
    link_bps: float
    duration: float
    samples: list[tuple[float, list[int]]] = field(default_factory=list)  #: (t, bytes sent)
    marks: int = 0
    cnps: list[int] = field(default_factory=list)
    max_queue_bytes: float = 0.0

    def rates(self, lo: float, hi: float) -> list[float]:
        """Each sender's average rate between fractions lo and hi of the run."""
        if not 0 <= lo < hi <= 1:
            raise ValueError(f"window: need 0 <= lo < hi <= 1, got {lo}, {hi}")
        a = min(self.samples, key=lambda s: abs(s[0] - lo * self.duration))
        b = min(self.samples, key=lambda s: abs(s[0] - hi * self.duration))
        if b[0] <= a[0]:
            raise ValueError("window: narrower than one sample")
        return [(y - x) * 8 / (b[0] - a[0]) for x, y in zip(a[1], b[1])]

    def fair_shares(self, lo: float, hi: float) -> list[float]:
        """`rates(lo, hi)` as fractions of a fair share (link / senders)."""
        return [r / (self.link_bps / self.senders) for r in self.rates(lo, hi)]


def simulate(senders: int = 3, *, profile: str | DcqcnProfile = "paper", ecn: str = "paper",
             link_bps: float = 200e9, duration: float = 0.1, delay: float = 2e-6,
             frame: int = FRAME, sample: float = 1e-3, seed: int = 1) -> Result:
    """Run `senders` QPs at line rate into one port of `link_bps` for `duration` model
    seconds. Each frame reaches the switch `delay` after it leaves; the switch marks it
    CE per the `ecn` WRED profile ('book' or 'paper') at the depth it finds; a marked
    frame reaches the receiver when dequeued plus `delay`, whose notification point may
    answer with a CNP that reaches the sender `delay` later."""
    if senders < 1:
        raise ValueError("senders: need at least one")
    if duration <= 0 or sample <= 0 or delay < 0:
        raise ValueError("duration and sample must be > 0, delay >= 0")
    prof = profile if isinstance(profile, DcqcnProfile) else DcqcnProfile.by_name(profile)
    wred = Wred.named(ecn)
    rng = random.Random(seed)
    rps = [ReactionPoint(link_bps, prof) for _ in range(senders)]
    notify = NotificationPoint(prof)
    res = Result(senders, link_bps, duration, cnps=[0] * senders)
    sent = [0] * senders
    events: list[tuple[float, int, int]] = []  # (time, kind, sender): 0 send, 1 CE, 2 CNP
    for i in range(senders):
        heapq.heappush(events, (rng.random() * frame * 8 / link_bps, 0, i))
    free_at = 0.0   # when the egress port finishes what it holds
    next_sample = 0.0
    while events:
        t, kind, i = heapq.heappop(events)
        while next_sample <= min(t, duration):
            res.samples.append((next_sample, list(sent)))
            next_sample += sample
        if t > duration:
            break
        if kind == 0:
            rp = rps[i]
            rp.on_bytes_sent(frame, t)
            sent[i] += frame
            arrive = t + delay
            depth = max(0.0, free_at - arrive) * link_bps / 8
            res.max_queue_bytes = max(res.max_queue_bytes, depth)
            free_at = max(arrive, free_at) + frame * 8 / link_bps
            if wred_decide(depth, ECT0, wred, rng.random()) is WredVerdict.MARK:
                res.marks += 1
                heapq.heappush(events, (free_at + delay, 1, i))
            heapq.heappush(events, (t + rp.pace_interval(frame), 0, i))
        elif kind == 1:
            if notify.on_ce(i, t):
                heapq.heappush(events, (t + delay, 2, i))
        else:
            res.cnps[i] += 1
            rps[i].on_cnp(t)
    return res


def main(argv: list[str] | None = None) -> int:
    """Print the per-sender rate curve of one run."""
    ap = argparse.ArgumentParser(prog="python -m traffic.tools.bottleneck", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--senders", type=int, default=3, help="flows into the port (default 3)")
    ap.add_argument("--profile", default="paper", choices=PROFILES, help="DCQCN profile")
    ap.add_argument("--ecn", default="paper", choices=["book", "paper"],
                    help="switch WRED-ECN profile (book: 150 KB..3 MB 7%%; paper: 5..200 KB 1%%)")
    ap.add_argument("--gbps", type=float, default=200.0, help="port speed (default 200)")
    ap.add_argument("--ms", type=float, default=100.0, help="model milliseconds (default 100)")
    ap.add_argument("--delay-us", type=float, default=2.0,
                    help="one-way feedback delay per hop in the model, µs (default 2)")
    ap.add_argument("--every-ms", type=float, default=5.0, help="print interval (default 5)")
    a = ap.parse_args(argv)
    try:
        res = simulate(a.senders, profile=a.profile, ecn=a.ecn, link_bps=a.gbps * 1e9,
                       duration=a.ms / 1e3, delay=a.delay_us / 1e6, sample=a.every_ms / 1e3)
    except ValueError as exc:
        ap.error(str(exc))
    fair = res.link_bps / res.senders
    print(f"{a.senders} DCQCN senders ({a.profile}) into one {a.gbps:g}G port, ECN {a.ecn}; "
          f"rates in Gb/s, fair share {fair / 1e9:.1f}")
    for (ta, xa), (tb, xb) in zip(res.samples, res.samples[1:]):
        rates = [(y - x) * 8 / (tb - ta) / 1e9 for x, y in zip(xa, xb)]
        print(f"  {ta * 1e3:7.1f}-{tb * 1e3:<7.1f} ms " + " ".join(f"{r:7.1f}" for r in rates))
    print(f"  CE marks {res.marks}, CNPs per sender {res.cnps}, "
          f"deepest queue {res.max_queue_bytes / 1e3:.0f} KB")
    print("  last half: " + ", ".join(f"{s:.2f}" for s in res.fair_shares(0.5, 1.0))
          + " of a fair share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
