"""REPS (traffic/uet/ev.py) as uet-htsim's `UecMpReps` and `CircularBufferREPS` do it:
the ring of recycled EVs, the freeze after a timeout, the explore burst after it, the
lifetime of a remembered EV."""

import random

import pytest

from traffic.uet.ev import Entropy
from traffic.uet.nscc import NsccConfig
from traffic.uet.uetconfig import UetConfig

LO, HI = 49152, 65535


def reps(**kw):
    return Entropy("reps", random.Random(1), (LO, HI), kw.pop("slots", 4), **kw)


def learn(e, evs, now=0.0):
    for ev in evs:
        e.feedback(ev, ecn=False, now=now)


def test_recycles_the_earliest_fresh_ev_once():
    e = reps()
    learn(e, [1, 2, 3])
    e.feedback(4, ecn=True)                        # marked: not remembered
    assert e.remembered == [1, 2, 3]
    assert [e.next() for _ in range(3)] == [1, 2, 3] and e.recycled == 3
    assert LO <= e.next() <= HI and e.fresh == 1   # none fresh: a random one


def test_a_full_ring_keeps_the_latest():
    e = reps()                                     # 4 slots
    learn(e, [1, 2, 3, 4, 5, 6])
    assert e.remembered == [3, 4, 5, 6]
    assert [e.next() for _ in range(4)] == [3, 4, 5, 6]


def test_lifetime_reuses_an_ev():
    e = reps(lifetime=2)
    learn(e, [7, 8])
    assert [e.next() for _ in range(4)] == [7, 7, 8, 8]


def test_a_timeout_freezes_on_known_paths_then_explores():
    e = reps(freeze_s=10e-3, explore=3)
    learn(e, [1, 2, 3])
    assert e.next() == 1                           # 1 is no longer fresh
    e.timeout(1e-3)
    assert e.frozen and e.thaw_at == pytest.approx(11e-3) and e.freezes == 1
    e.timeout(2e-3)                                # frozen already: nothing
    assert e.freezes == 1
    # frozen: the remembered EVs in turn, fresh or not, again and again
    assert [e.next() for _ in range(7)] == [1, 2, 3, 1, 2, 3, 1]
    e.feedback(9, ecn=False, now=5e-3)             # unmarked ACKs still refill the ring
    assert [e.next() for _ in range(4)] == [2, 3, 9, 1]
    e.feedback(10, ecn=False, now=11.5e-3)         # first ACK after the freeze: explore
    assert not e.frozen and e.remembered == [10]   # the ring emptied, then this one
    before = e.fresh
    evs = [e.next() for _ in range(3)]             # 3 random EVs though 10 is fresh
    assert e.fresh == before + 3 and all(LO <= v <= HI for v in evs)
    assert e.next() == 10
    e.timeout(12e-3)                               # freezes again (not exploring now)
    assert e.frozen and e.freezes == 2


def test_no_freeze_while_exploring_or_without_trimming():
    e = reps(freeze_s=1e-3, explore=2)
    e.timeout(0.0)
    e.feedback(5, ecn=False, now=2e-3)             # thaw: exploring 2 packets
    e.timeout(2e-3)
    assert not e.frozen
    off = reps(trimming=False)                     # uet-htsim freezes only with trimming
    off.timeout(0.0)
    assert not off.frozen and off.freezes == 0
    never = reps(freeze_s=0.0)                     # 0: freezing off
    never.timeout(0.0)
    assert not never.frozen


def test_from_the_uet_config_and_dilated():
    cfg = UetConfig(ev="reps", reps_slots=2, reps_freeze_s=5e-3, reps_explore=4,
                    reps_lifetime=3, nscc=NsccConfig(trimming=True))
    e = Entropy.of(cfg, random.Random(1))
    assert (len(e.ring), e.freeze_s, e.explore_n, e.lifetime) == (2, 5e-3, 4, 3)
    assert Entropy.of(UetConfig(ev="reps"), random.Random(1)).freeze_s == 0.0  # no trimming
    assert cfg.dilated(10).reps_freeze_s == pytest.approx(50e-3)
    for field, value in (("reps_freeze_s", -1.0), ("reps_explore", -1), ("reps_lifetime", 0)):
        with pytest.raises(ValueError, match=field):
            UetConfig(**{field: value})


def test_other_modes_ignore_feedback_and_timeouts():
    obl = Entropy("oblivious", random.Random(1))
    obl.feedback(50000, ecn=False, now=0.0)
    obl.timeout(0.0)
    assert not obl.frozen and obl.recycled == 0
