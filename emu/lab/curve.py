"""The `curve` check of a lab: a queue's WRED marks (or drops) per depth bin against
the exact binomial interval of the configured curve (Example 11-3; ch.11 Fig 11-2),
from the agent's WRED counters (switch_agent.queues WRED_BIN_BYTES). Pure;
tests/unit/test_lab_checks.py.
"""

from __future__ import annotations

import math

from emu.lab.evidence import Evidence
from emu.lab.expect import value
from emucore.qos.wred import Wred


def binom_interval(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The exact central interval [lo, hi] holding a Binomial(n, p) count with
    probability >= 1 - alpha."""
    if p <= 0:
        return 0, 0
    if p >= 1:
        return n, n
    lp, lq = math.log(p), math.log1p(-p)
    lg = math.lgamma(n + 1)
    cdf, lo, hi = 0.0, None, n
    for k in range(n + 1):
        cdf += math.exp(lg - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)
        if lo is None and cdf > alpha / 2:
            lo = k
        if cdf >= 1 - alpha / 2:
            hi = k
            break
    return lo or 0, hi


def curve_bins(ev: Evidence, spec: dict) -> list[dict]:
    """Per depth bin of a queue: arrivals, counted (marked or dropped), expected p and
    the interval; `ok` None where the bin has too few arrivals to judge."""
    port = spec.get("port")
    if port not in ev.links:
        raise ValueError(f"curve.port: no link {port!r}")
    node, ifname = ev.links[port]
    p = ev.counters.get(node, {}).get("ports", {}).get(ifname)
    if p is None:
        raise ValueError(f"curve.port: no counters of {port}")
    bins = p.get("wred_bins", {}).get(str(spec.get("queue", 3)))
    if bins is None:
        raise ValueError(f"curve.queue: queue {spec.get('queue', 3)} of {port} saw no arrivals")
    of = spec.get("of", "marked")
    if of not in ("marked", "dropped"):
        raise ValueError(f"curve.of: marked or dropped, got {of!r}")
    w = bins["bin_bytes"]
    wred = Wred(int(value(spec.get("min", "150KB"))), int(value(spec.get("max", "3000KB"))),
                100 * float(spec.get("pmax", 0.07)), 0, True)  # the book's curve, Ex 11-3
    min_seen = int(spec.get("min_seen", 20))
    judged = sum(1 for n in bins["seen"] if n >= min_seen)
    alpha = 0.01 / max(judged, 1)
    out = []
    for b, (n, k) in enumerate(zip(bins["seen"], bins[of])):
        if n == 0:
            continue
        a, z = b * w, (b + 1) * w
        # the bin's mean probability (arrivals taken as spread evenly over the bin)
        pe = sum(wred.probability(a + (i + 0.5) * w / 16) for i in range(16)) / 16
        ci = binom_interval(n, pe, alpha)
        out.append({"bin": b, "from": a, "to": z, "seen": n, of: k, "p": pe, "interval": ci,
                    "ok": (ci[0] <= k <= ci[1]) if n >= min_seen else None})
    return out

