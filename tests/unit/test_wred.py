"""WRED/ECN decision curve (emucore.qos.wred), book ch.11 Example 11-3."""

import pytest

from emucore.qos.fields import QUEUE_LIMIT_BYTES
from emucore.qos.wred import Wred, WredVerdict, ewma_depth, wred_decide

FORWARD, MARK, DROP = WredVerdict.FORWARD, WredVerdict.MARK, WredVerdict.DROP
LIMIT = 5_000_000  # the queue's tail-drop limit in the curve table
BOOK = Wred.book()
NO_ECN = Wred(150_000, 3_000_000, 7.0, ecn=False)
MID = (150_000 + 3_000_000) // 2  # p = 3.5 %
ECT0, ECT1, NOT_ECT, CE = 0b10, 0b01, 0b00, 0b11


@pytest.mark.parametrize("profile, depth, ecn, rand, want", [
    # below min: untouched whatever the dice say
    (BOOK, 0, ECT0, 0.0, FORWARD),
    (BOOK, 149_999, ECT0, 0.0, FORWARD),
    (BOOK, 149_999, NOT_ECT, 0.0, FORWARD),
    # at min: probability 0
    (BOOK, 150_000, ECT0, 0.0, FORWARD),
    # between min and max: p = 7 % x (d - min) / (max - min)
    (BOOK, MID, ECT0, 0.0349, MARK),
    (BOOK, MID, ECT0, 0.0351, FORWARD),
    (BOOK, MID, ECT1, 0.0349, MARK),
    (BOOK, MID, CE, 0.0349, MARK),
    (BOOK, MID, NOT_ECT, 0.0349, DROP),
    (BOOK, MID, NOT_ECT, 0.0351, FORWARD),
    (BOOK, 2_999_999, ECT0, 0.0699, MARK),
    (BOOK, 2_999_999, ECT0, 0.0701, FORWARD),
    # at / above max: every ECT packet marked, Not-ECT dropped
    (BOOK, 3_000_000, ECT0, 0.999, MARK),
    (BOOK, 4_000_000, ECT1, 0.999, MARK),
    (BOOK, 5_000_000, ECT0, 0.999, MARK),  # at the limit: still marked
    (BOOK, 3_000_000, NOT_ECT, 0.999, DROP),
    # above the queue limit: everything dropped
    (BOOK, 5_000_001, ECT0, 0.0, DROP),
    (BOOK, 5_000_001, CE, 0.0, DROP),
    # without `ecn` the same curve drops
    (NO_ECN, 149_999, ECT0, 0.0, FORWARD),
    (NO_ECN, MID, ECT0, 0.0349, DROP),
    (NO_ECN, MID, ECT0, 0.0351, FORWARD),
    (NO_ECN, 3_000_000, ECT0, 0.999, DROP),
])
def test_curve_regions(profile, depth, ecn, rand, want):
    assert wred_decide(depth, ecn, profile, rand, LIMIT) is want


def test_default_limit_is_the_queue_limit():
    assert wred_decide(QUEUE_LIMIT_BYTES, ECT0, BOOK, 0.999) is MARK
    assert wred_decide(QUEUE_LIMIT_BYTES + 1, ECT0, BOOK, 0.0) is DROP


def test_marking_probability_is_linear():
    n = 20_000
    rands = [(i + 0.5) / n for i in range(n)]  # a uniform grid instead of a RNG
    for frac in (0.1, 0.25, 0.5, 0.9):
        depth = 150_000 + frac * (3_000_000 - 150_000)
        marked = sum(wred_decide(depth, ECT0, BOOK, r) == MARK for r in rands)
        assert marked / n == pytest.approx(0.07 * frac, abs=1.5 / n)
        assert BOOK.probability(depth) == pytest.approx(0.07 * frac)
    assert BOOK.probability(0) == 0.0 and BOOK.probability(3_000_000) == 1.0


def test_profiles():
    b = Wred.book()
    assert (b.min_bytes, b.max_bytes, b.max_prob, b.ecn, b.weight) == (150_000, 3_000_000, 0.07, True, 0)
    p = Wred.named("paper")
    assert (p.min_bytes, p.max_bytes, p.max_prob, p.ecn) == (5_000, 200_000, 0.01, True)
    with pytest.raises(ValueError, match="wred profile"):
        Wred.named("alibaba")


def test_min_equals_max_is_a_step():
    step = Wred(100_000, 100_000, 50.0)
    assert wred_decide(99_999, ECT0, step, 0.0) == FORWARD
    assert wred_decide(100_000, ECT0, step, 0.999) == MARK


@pytest.mark.parametrize("kwargs, field", [
    ({"min_bytes": -1, "max_bytes": 10, "max_prob_pct": 10}, "min_bytes: must be >= 0"),
    ({"min_bytes": 10, "max_bytes": 5, "max_prob_pct": 10}, "min_bytes: must be <= max_bytes"),
    ({"min_bytes": 1, "max_bytes": 5, "max_prob_pct": 150}, "max_prob_pct"),
    ({"min_bytes": 1, "max_bytes": 5, "max_prob_pct": 10, "weight": 16}, "weight"),
    ({"min_bytes": 1, "max_bytes": 5, "max_prob_pct": 10, "ecn": 1}, "ecn"),
])
def test_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Wred(**kwargs)


def test_ewma():
    assert ewma_depth(123.0, 1000, 0) == 1000
    assert ewma_depth(0.0, 1024, 2) == 256
    avg = 0.0
    for _ in range(200):
        avg = ewma_depth(avg, 1000, 3)
    assert avg == pytest.approx(1000, rel=1e-6)
