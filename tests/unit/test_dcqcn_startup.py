"""How an incast's first CNPs set the senders' shares for tens of milliseconds (issue 31).

DCQCN's rules (Zhu et al., SIGCOMM 2015; docs/DCQCN_PARAMS.md): a QP starts at line rate
C with alpha = 1, so its first cut halves Rc and leaves Rt = C; its rate-increase timer
(55 us, paper profile) then runs from that CNP, while the notification point sends the
next CNP no sooner than `cnp_interval` (50 us) later. If that second CNP comes before the
timer, the second cut starts from Rc = C/2 and leaves Rt = C/2; if it comes after, fast
recovery has already raised Rc to 3C/4 and the cut leaves Rt = 3C/4 - half as much again.
Rates converge afterwards only at DCQCN's fairness time (~21-26 ms, traffic.dcqcnfluid),
so a sender whose second CNP is late by those 5 us keeps a lead through a fabric run.

The fabric's 3:1 (docs/DCQCN_PARAMS.md "Why the first-posted sender leads") is replayed
here: the CNP arrival times of its event log (model us) into the reaction point, Python and
C; the rates it logged follow from the rules by hand.
"""

import pytest

from traffic import dcqcn
from traffic.dcqcn import DcqcnProfile
from traffic.fast import dcqcn as fast

C = 200e9
PAPER = DcqcnProfile.paper()
G = PAPER.g
RPS = [pytest.param(dcqcn.ReactionPoint, id="python"),
       pytest.param(fast.classes("fast")[1], id="c")]


def replay(rp_class, cnps_us):
    """A paper-profile reaction point at 200 G fed CNPs at `cnps_us` (model us); the
    (time us, Rc, why) of every rate change and the final point."""
    rp = rp_class(C, PAPER)
    log = []
    rp.on_rate = lambda t, rc, why: log.append((round(t * 1e6, 2), rc, why))
    for t in cnps_us:
        rp.on_cnp(t * 1e-6)
    return rp, log


@pytest.mark.parametrize("rp_class", RPS)
def test_the_fabric_3to1_start_replayed(rp_class):
    # rail1 eth4, `emu run rail2x4 --workload incast --from h1g1,h2g1,h3g1 --size 384MB
    # --qos paper --tdf 8000` (commit 0d67549): h1g1's first CE-marked frame was marked at
    # 33 KB (a WRED draw on the ramp), the others' only once the queue passed Kmax, 10 us
    # later at the receiver; a PFC pause then left the queue below Kmax around t + 50 us
    a, log_a = replay(rp_class, [5.85, 65.23, 115.32])    # h1g1: 2nd CNP 59.4 us after
    b, log_b = replay(rp_class, [15.99, 66.15, 116.35])   # h2g1: 50.2 us after
    a2 = 1.5 * C / 2 * (1 - (1 - G) / 2)   # cut from 3C/4 (one fast-recovery step at +55 us)
    a3 = a2 * (1 - ((1 - G) ** 2 + G) / 2)  # alpha: decayed once, raised by the 2nd CNP
    assert [(t, why) for t, _, why in log_a] == [
        (5.85, "cut"), (60.85, "increase"), (65.23, "cut"), (115.32, "cut")]
    assert [rc for _, rc, _ in log_a] == pytest.approx([C / 2, 3 * C / 4, a2, a3], rel=1e-15)
    assert [(t, rc, why) for t, rc, why in log_b] == [
        (15.99, C / 2, "cut"), (66.15, C / 4, "cut"), (116.35, C / 8, "cut")]
    # the rates the fabric's NICs logged (their `rate` events) are these
    assert (a2, a3) == pytest.approx((75292968750.0, 37792966514.82582), rel=1e-12)
    # h1g1 leaves its start with 1.5 x the others' target rate (and so their rate):
    # 1.13 / 0.77 / 0.77 of C/3 over the first 2.5 ms on the fabric
    assert (a.rt, b.rt) == (a2, C / 4)
    assert a.rt / b.rt == pytest.approx(3 * (1 - (1 - G) / 2), rel=1e-15)


@pytest.mark.parametrize("rp_class", RPS)
def test_the_second_cnp_against_the_increase_timer(rp_class):
    # the target rate after two CNPs `gap` apart: C/2 while the gap is shorter than the
    # rate-increase timer (the 2nd cut comes first), 3C/4 from it on (Rt = Rc at a cut)
    timer = PAPER.rate_increase_timer * 1e6
    for gap in (PAPER.cnp_interval * 1e6, timer - 0.01, timer + 0.01, timer + 4.9):
        rp, _ = replay(rp_class, [10.0, 10.0 + gap])
        assert rp.rt == (C / 2 if gap < timer else 3 * C / 4), gap
