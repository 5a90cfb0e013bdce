"""DCQCN (traffic/dcqcn.py): hand-computed steps for both profiles, NP limiter, convergence."""

import random

import pytest

from traffic.dcqcn import DcqcnProfile, NotificationPoint, ReactionPoint, Stage

G = 100e9  # line rate of these tests, bit/s
US = 1e-6


def approx(x):
    """Relative 1e-12."""
    return pytest.approx(x, rel=1e-12)


def test_profiles_table():
    p, n = DcqcnProfile.paper(), DcqcnProfile.nvidia()
    assert (p.g, p.alpha_init, p.alpha_period, p.rate_increase_timer, p.byte_counter,
            p.fast_recovery_steps, p.rai, p.rhai, p.min_rate, p.cnp_interval) == \
        (1 / 256, 1.0, 55e-6, 55e-6, 10_000_000, 5, 40e6, 200e6, 1e6, 50e-6)
    assert (n.g, n.alpha_init, n.alpha_period, n.rate_increase_timer, n.byte_counter,
            n.fast_recovery_steps, n.rai, n.rhai, n.min_rate, n.cnp_interval) == \
        (5 / 1024, 1023 / 1024, 1e-6, 300e-6, 2_097_088, 1, 5e6, 50e6, 1e6, 4e-6)
    assert DcqcnProfile.by_name("nvidia", rai=1e6).rai == 1e6


@pytest.mark.parametrize("kw,field", [({"g": 0}, "g"), ({"alpha_period": -1}, "alpha_period"),
                                      ({"byte_counter": 0}, "byte_counter"),
                                      ({"fast_recovery_steps": 0}, "fast_recovery_steps"),
                                      ({"cnp_interval": -1e-6}, "cnp_interval")])
def test_profile_validation(kw, field):
    with pytest.raises(ValueError, match=field):
        DcqcnProfile(**kw)
    with pytest.raises(ValueError, match="profile"):
        DcqcnProfile.by_name("cisco")
    with pytest.raises(ValueError, match="line_rate"):
        ReactionPoint(0)


def test_paper_first_cnp_halves_rate():
    rp = ReactionPoint(G, DcqcnProfile.paper())
    assert rp.rc == G and rp.pace_interval(4096) == 4096 * 8 / G
    rp.on_cnp(0.0)
    assert rp.rt == G and rp.rc == 50e9            # alpha 1 -> Rc x (1 - 1/2)
    assert rp.alpha == 1.0                          # (255/256) x 1 + 1/256
    assert rp.pace_interval(4096) == 4096 * 8 / 50e9
    assert rp.stage == Stage.FAST_RECOVERY


def test_paper_fast_recovery_alpha_decay_and_second_cut():
    rp = ReactionPoint(G, DcqcnProfile.paper())
    rp.on_cnp(0.0)
    rp.tick(54 * US)
    assert rp.rc == 50e9 and rp.alpha == 1.0        # nothing before 55 us
    rp.tick(55 * US)
    assert rp.t == 1 and rp.rc == 75e9              # (100 + 50) / 2, Rt stays
    assert rp.alpha == 255 / 256
    rp.tick(110 * US)
    assert rp.t == 2 and rp.rc == 87.5e9 and rp.rt == G
    assert rp.alpha == approx((255 / 256) ** 2)
    rp.on_cnp(120 * US)
    a = (255 / 256) ** 2
    assert rp.rt == 87.5e9
    assert rp.rc == approx(87.5e9 * (1 - a / 2))    # 44.0911 Gb/s
    assert rp.alpha == approx((255 / 256) * a + 1 / 256)
    assert rp.t == 0 and rp.bc == 0
    rp.tick(174 * US)                               # timer restarted at the cut
    assert rp.t == 0
    rp.tick(175 * US)
    assert rp.t == 1 and rp.rc == approx((87.5e9 + 87.5e9 * (1 - a / 2)) / 2)


def test_paper_additive_then_hyper():
    rp = ReactionPoint(G, DcqcnProfile.paper())
    rp.on_cnp(0.0)
    rp.on_cnp(0.0)                                  # Rt = 50G, Rc = 25G, alpha 1
    assert (rp.rt, rp.rc) == (50e9, 25e9)
    expected = [37.5e9, 43.75e9, 46.875e9, 48.4375e9]   # fast recovery, T = 1..4
    for k, rc in enumerate(expected, start=1):
        rp.tick(k * 55 * US)
        assert rp.rc == approx(rc) and rp.rt == 50e9 and rp.stage == Stage.FAST_RECOVERY
    rp.tick(5 * 55 * US)                            # T = F = 5: additive
    assert rp.stage == Stage.ADDITIVE
    assert rp.rt == 50.04e9 and rp.rc == approx((50.04e9 + 48.4375e9) / 2)
    rt, rc = rp.rt, rp.rc
    rp.on_bytes_sent(4 * 10_000_000, 5 * 55 * US)   # BC = 1..4 with T = 5: additive x 4
    for _ in range(4):
        rt += 40e6
        rc = (rt + rc) / 2
    assert rp.bc == 4 and rp.rt == approx(rt) and rp.rc == approx(rc)
    rp.on_bytes_sent(9_999_999, 5 * 55 * US)        # not yet a 5th byte-counter event
    assert rp.bc == 4
    rp.on_bytes_sent(1, 5 * 55 * US)                # BC = 5 = F: hyper, i = 5 - 5 + 1
    rt += 200e6
    rc = (rt + rc) / 2
    assert rp.stage == Stage.HYPER and rp.rt == approx(rt) and rp.rc == approx(rc)
    rp.tick(6 * 55 * US)                            # T = 6, BC = 5: i = 1 again
    rt += 200e6
    rc = (rt + rc) / 2
    assert rp.rt == approx(rt) and rp.rc == approx(rc)
    rp.on_bytes_sent(10_000_000, 6 * 55 * US)      # T = 6, BC = 6: i = 2
    rt += 2 * 200e6
    rc = (rt + rc) / 2
    assert rp.rt == approx(rt) and rp.rc == approx(rc)


def test_nvidia_profile_steps():
    p = DcqcnProfile.nvidia()
    rp = ReactionPoint(G, p)
    rp.on_cnp(0.0)
    a0 = 1023 / 1024
    assert rp.rc == approx(G * (1 - a0 / 2)) and rp.rt == G       # 50.0488 Gb/s
    a1 = (1019 / 1024) * a0 + 5 / 1024
    assert rp.alpha == approx(a1)
    rp.tick(10 * US)                                # alpha decays every 1 us
    assert rp.alpha == approx(a1 * (1019 / 1024) ** 10)
    rp.on_cnp(10 * US)
    rt, rc = G * (1 - a0 / 2), G * (1 - a0 / 2) * (1 - a1 * (1019 / 1024) ** 10 / 2)
    assert rp.rt == approx(rt) and rp.rc == approx(rc)
    rp.tick(309 * US)
    assert rp.t == 0
    rp.tick(310 * US)                               # F = 1: the first timer event is additive
    rt += 5e6
    rc = (rt + rc) / 2
    assert rp.stage == Stage.ADDITIVE and rp.rt == approx(rt) and rp.rc == approx(rc)
    rp.on_bytes_sent(32767 * 64, 310 * US)          # T = BC = 1: hyper, i = 1
    rt += 50e6
    rc = (rt + rc) / 2
    assert rp.stage == Stage.HYPER and rp.rt == approx(rt) and rp.rc == approx(rc)


def test_byte_counter_inactive_before_first_cnp():
    rp = ReactionPoint(G)
    rp.on_bytes_sent(100_000_000, 1.0)
    rp.tick(2.0)
    assert (rp.rc, rp.rt, rp.bc, rp.t, rp.alpha) == (G, G, 0, 0, 1.0)
    assert rp.next_deadline() == float("inf")


def test_clamping():
    rp = ReactionPoint(G)
    for _ in range(40):                             # 100G / 2**40 < 1 Mb/s
        rp.on_cnp(0.0)
    assert rp.rc == 1e6
    rp.on_cnp(0.0)
    assert rp.rc == 1e6 and rp.rt == 1e6
    rp = ReactionPoint(G)
    rp.on_cnp(0.0)
    rp.tick(1.0)                                    # ~18000 increase events
    assert rp.rc == G and rp.rt == G
    assert rp.next_deadline() > 1.0


def test_long_idle_tick_is_cheap_and_exact():
    rp = ReactionPoint(G, DcqcnProfile.nvidia())
    rp.on_cnp(0.0)
    a = rp.alpha
    rp.tick(0.5)                                    # 500000 alpha periods in one call
    assert rp.alpha == approx(a * (1019 / 1024) ** 500000) and rp.rc == G


def test_notification_point_limiter():
    np_ = NotificationPoint(DcqcnProfile.paper())
    table = [  # qpn, now, expect CNP
        (1, 0.0, True), (1, 10 * US, False), (2, 10 * US, True), (1, 49.9 * US, False),
        (1, 50 * US, True), (2, 59.9 * US, False), (2, 60 * US, True), (1, 60 * US, False),
    ]
    for qpn, now, want in table:
        assert np_.on_ce(qpn, now) is want, (qpn, now)
    assert np_.cnps == 4 and np_.ce_seen == 8
    nv = NotificationPoint(DcqcnProfile.nvidia())
    assert [nv.on_ce(7, t * US) for t in (0, 3.9, 4, 7, 8)] == [True, False, True, False, True]


def simulate(n, profile, c=40e9, dt=5e-6, duration=0.3, start_gap=2e-3, seed=1):
    """N senders into one port of capacity c, fluid queue, paper ECN marking (Kmin 5 KB,
    Kmax 200 KB, Pmax 1 %) per 1 KB packet; senders start start_gap apart at line rate.
    Returns the mean Rc of each sender over the last third."""
    rng = random.Random(seed)
    rps = [ReactionPoint(c, profile) for _ in range(n)]
    notif = NotificationPoint(profile)
    q, steps = 0.0, int(duration / dt)
    acc, cnt = [0.0] * n, 0
    for s in range(steps):
        now = s * dt
        p = 0.0 if q <= 5e3 else 1.0 if q >= 200e3 else (q - 5e3) / 195e3 * 0.01
        total = 0.0
        for i, rp in enumerate(rps):
            if now < i * start_gap:
                continue
            b = rp.rc * dt / 8
            rp.on_bytes_sent(b, now)
            total += b
            if p and rng.random() < 1 - (1 - p) ** (b / 1000) and notif.on_ce(i, now):
                rp.on_cnp(now)
        q = max(0.0, q + total - c * dt / 8)
        if s >= 2 * steps // 3:
            cnt += 1
            for i, rp in enumerate(rps):
                acc[i] += rp.rc
    return [a / cnt for a in acc]


@pytest.mark.parametrize("n,profile", [(4, "paper"), (2, "nvidia")])
def test_senders_converge_to_fair_share(n, profile):
    c = 40e9
    rates = simulate(n, DcqcnProfile.by_name(profile), c=c)
    assert 0.9 * c < sum(rates) < 1.02 * c
    for r in rates:
        assert abs(r - c / n) < 0.2 * c / n, [round(x / 1e9, 2) for x in rates]


def test_on_rate_reports_each_change_at_its_model_time():
    """The RNIC's `rate` events: the cut at the CNP, timer increases caught up late by
    tick at the times they were due, a byte-counter increase at the send; none before
    the first CNP, none when the rate does not move."""
    rp = ReactionPoint(G)
    calls = []
    rp.on_rate = lambda t, rate, why: calls.append((t, rate, why))
    rp.on_bytes_sent(20_000_000, 5 * US)       # not active yet: no increase
    rp.on_cnp(10 * US)                          # alpha 1: halved
    rp.tick(130 * US)                           # timer events due at 65 and 120 us
    rp.on_bytes_sent(10_000_000, 131 * US)      # one byte-counter event
    assert [why for _, _, why in calls] == ["cut", "increase", "increase", "increase"]
    assert [t for t, _, _ in calls] == [approx(10 * US), approx(65 * US), approx(120 * US),
                                        approx(131 * US)]
    assert [r for _, r, _ in calls] == [50e9, 75e9, 87.5e9, 93.75e9]
    flat = ReactionPoint(G, DcqcnProfile(min_rate=G))  # clamped: the rate never moves
    flat.on_rate = lambda *a: calls.append(a)
    flat.on_cnp(0.0)
    flat.tick(1e-3)
    assert len(calls) == 4 and flat.cuts == 1 and flat.increases > 0
