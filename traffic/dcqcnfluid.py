"""The fixed point of DCQCN's fluid model for N equal flows into one port (pure).

Source: the fluid model of Zhu et al., "Congestion Control for Large-Scale RDMA
Deployments", SIGCOMM 2015, section 5 (N flows, rates R_C / R_T, alpha, queue q, marking
p = RED(q) seen a feedback delay later); the closed form below is derived here from its
equations and is the expression used with the authors' follow-up analysis ("ECN or Delay:
Lessons Learnt from Analysis of DCQCN and TIMELY", Zhu, Ghobadi, Misra, Padhye, CoNEXT
2016). With p the marking probability fed back, S = R_C the rate of one flow and

    a = 1 - (1-p)^(tau S)        a rate cut happens in a window of tau (CNP interval)
    b = p / ((1-p)^-B - 1)        byte-counter events per packet sent
    d = p / ((1-p)^-(T S) - 1)    timer events per packet sent
    c = b (1-p)^(F B),  e = d (1-p)^(F T S)   the same, past F fast-recovery steps

the model is

    dalpha/dt = g / tau' ((1 - (1-p)^(tau' S)) - alpha)
    dR_T/dt   = -(R_T - R_C) a / tau + R_AI S (c + e)
    dR_C/dt   = -R_C alpha a / (2 tau) + (R_T - R_C) S (b + d) / 2
    dq/dt     = N R_C - C

UNITS: the model counts PACKETS - p is a probability per packet, so S, C and R_AI are in
packets/s and B in packets (frame bytes L: S = bits/s / 8L, B = byte_counter / L); times
in seconds. At the fixed point R_C = C/N and (small p: a = p tau S, b = 1/B, d = 1/(T S),
c = b, e = d, alpha = p tau' S)

    p*^3 = R_AI (1/B + N/(C T))^2 N^2 / (tau' C^2)            (1/pkt^3 both sides)
    q*   = Kmin + p*/Pmax (Kmax - Kmin)  while p* < Pmax (the RED ramp)

`closed_form` is that formula; `exact` solves the three equations without the small-p
expansion (bisection on p). `fairness_time` is how fast unequal rates equalise near the
fixed point: a flow is cut a / tau times a second by alpha/2 of its rate while the
increases are the same for all, so a rate difference shrinks like exp(-t alpha a / 2 tau)
(the multiplicative decrease of AIMD, Chiu & Jain 1989), time constant 2 tau / (alpha a).
Nothing here runs a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from traffic.dcqcn import DcqcnProfile

__all__ = ["FixedPoint", "closed_form", "exact", "fairness_time", "queue_for"]


@dataclass(frozen=True)
class FixedPoint:
    """p (per packet), queue (bytes; None: p is past the ramp), rate per flow (bit/s),
    alpha, target rate R_T (bit/s)."""

    p: float
    queue_bytes: float | None
    rate_bps: float
    alpha: float
    rt_bps: float


def queue_for(p: float, kmin: float, kmax: float, pmax: float) -> float | None:
    """The queue depth (bytes) at which a RED ramp from Kmin (0) to Kmax (Pmax) marks with
    probability p; None if p >= Pmax (the fixed point then sits on the cliff at Kmax)."""
    if not 0 <= p < pmax:
        return None
    return kmin + p / pmax * (kmax - kmin)


def _units(n: int, c_bps: float, prof: DcqcnProfile, frame: int) -> tuple[float, float, float]:
    if n < 1 or c_bps <= 0 or frame <= 0:
        raise ValueError(f"need n >= 1, c_bps > 0, frame > 0; got {n}, {c_bps}, {frame}")
    s = c_bps / n / (8 * frame)           # one flow's share, packets/s
    return s, prof.rai / (8 * frame), prof.byte_counter / frame


def closed_form(n: int, c_bps: float, prof: DcqcnProfile, kmin: float, kmax: float,
                pmax: float, frame: int) -> FixedPoint:
    """The small-p fixed point of the module docstring for n flows into `c_bps`."""
    s, rai, b = _units(n, c_bps, prof, frame)
    k = 1 / b + 1 / (s * prof.rate_increase_timer)
    p = (rai * k * k / (prof.alpha_period * s * s)) ** (1 / 3)
    alpha = p * prof.alpha_period * s
    rt = s + rai * k / p                    # (R_T - S) p = R_AI k
    return FixedPoint(p, queue_for(p, kmin, kmax, pmax), c_bps / n, alpha, rt * 8 * frame)


def _terms(p: float, s: float, b: float, prof: DcqcnProfile) -> tuple[float, ...]:
    lq = math.log1p(-p)
    tau, f, t = prof.cnp_interval, prof.fast_recovery_steps, prof.rate_increase_timer
    a = -math.expm1(tau * s * lq)
    xb, xt = math.exp(b * lq), math.exp(t * s * lq)    # (1-p)^B, (1-p)^(T S)
    bb = p * xb / -math.expm1(b * lq)                  # = p / ((1-p)^-B - 1)
    d = p * xt / -math.expm1(t * s * lq)
    c = bb * xb ** f
    e = d * xt ** f
    alpha = -math.expm1(prof.alpha_period * s * lq)
    return a, bb, c, d, e, alpha


def exact(n: int, c_bps: float, prof: DcqcnProfile, kmin: float, kmax: float, pmax: float,
          frame: int) -> FixedPoint:
    """The fixed point of the full equations (no small-p expansion): the p in (0, 1) at
    which dR_C/dt = dR_T/dt = dalpha/dt = 0 with R_C = C/N, found by bisection on
    h(p) = alpha a^2 - tau^2 (b + d) R_AI S (c + e) (increasing in p)."""
    s, rai, b = _units(n, c_bps, prof, frame)
    tau = prof.cnp_interval

    def h(p: float) -> float:
        a, bb, c, d, e, alpha = _terms(p, s, b, prof)
        return alpha * a * a - tau * tau * (bb + d) * rai * s * (c + e)

    lo, hi = 1e-15, 1 - 1e-12
    if h(lo) > 0 or h(hi) < 0:
        raise ValueError("exact: no sign change of h on (0, 1)")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if h(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    p = math.sqrt(lo * hi)
    a, bb, c, d, e, alpha = _terms(p, s, b, prof)
    rt = s + alpha * a / (tau * (bb + d))   # dR_C/dt = 0
    return FixedPoint(p, queue_for(p, kmin, kmax, pmax), c_bps / n, alpha, rt * 8 * frame)


def fairness_time(fp: FixedPoint, prof: DcqcnProfile, frame: int) -> float:
    """Seconds for a rate difference between flows to shrink by e at fixed point `fp`:
    2 tau / (alpha a), a = 1 - (1-p)^(tau S) the chance of a cut per CNP interval tau."""
    s = fp.rate_bps / (8 * frame)
    a = -math.expm1(prof.cnp_interval * s * math.log1p(-fp.p))
    return 2 * prof.cnp_interval / (fp.alpha * a)
