"""PFC watchdog (switch_agent.watchdog), book ch.11 Example 11-5, SONiC semantics."""

import math

import pytest

from emucore.qos.interface import Watchdog
from emucore.qos.pfc import EgressPause
from emucore.wire.pause import build_pfc_frame
from emucore.qos.queuing import Queuing
from emucore.timedil import TimeDilation
from switch_agent.queues import PortQueues
from switch_agent.watchdog import PfcWatchdog

TD = TimeDilation(1000)  # 1 ms model = 1 s lab
P3 = 1 << 3
NEVER = [-math.inf] * 8


def wd(action="drop", detect=0.001, restore=0.002):
    return PfcWatchdog(Watchdog(True, detect, restore, action), (3,), TD, port="eth1")


def test_lab_times_come_from_time_dilation():
    w = PfcWatchdog(Watchdog(), (3,), TD)
    assert w.detect_s == pytest.approx(200.0) and w.restore_s == pytest.approx(200.0)


def test_storm_needs_pause_and_backlog_continuously():
    w = wd()
    rx = [0.0] * 8
    assert w.check(0.0, P3, 0, rx) == []  # paused, nothing waiting
    assert w.check(5.0, P3, 0, rx) == []
    assert w.check(5.0, 0, P3, rx) == []  # waiting, not paused
    assert w.check(6.0, P3, P3, rx) == []  # condition starts at 6 s
    assert w.check(6.5, P3, P3, rx) == []
    assert w.check(6.8, 0, P3, rx) == []  # broken: timer resets
    assert w.check(7.0, P3, P3, rx) == []
    assert w.check(7.9, P3, P3, rx) == []
    ev = w.check(8.0, P3, P3, rx)
    assert len(ev) == 1 and ev[0].kind == "storm" and ev[0].priority == 3
    assert ev[0].port == "eth1" and ev[0].model_time == pytest.approx(0.008)
    assert "storm detected" in str(ev[0])
    assert w.drop_mask == P3 and w.ignore_mask == 0 and w.storms_detected[3] == 1
    rx[3] = 8.5  # pause frames still arriving
    assert w.check(9.0, P3, P3, rx) == []  # already stormed: no repeat, not restored


def test_unwatched_priority_never_storms():
    w = wd()
    for t in range(10):
        assert w.check(float(t), 0x01, 0x01, NEVER) == []


def test_restore_after_quiet_time_only():
    w = wd(restore=0.002)  # 2 s lab
    rx = [0.0] * 8
    w.check(0.0, P3, P3, rx)
    assert w.check(1.0, P3, P3, rx)[0].kind == "storm"
    for t in (2.0, 3.0, 4.0):  # pauses keep arriving: stays stormed
        rx[3] = t
        assert w.check(t, P3, P3, rx) == []
    assert w.check(5.9, 0, 0, rx) == []  # 1.9 s quiet
    ev = w.check(6.0, 0, 0, rx)
    assert [e.kind for e in ev] == ["restore"]
    assert w.drop_mask == 0 and w.storms_restored[3] == 1


def test_forward_action_ignores_the_pause():
    w = wd(action="forward")
    w.check(0.0, P3, P3, NEVER)
    w.check(1.0, P3, P3, NEVER)
    assert w.ignore_mask == P3 and w.drop_mask == 0
    assert w.effective_mask(P3 | 0x01) == 0x01
    assert w.counters()["stormed"] == [3]


def test_config_validation():
    for kwargs, field in [({"detect_s": 0}, "detect_s"), ({"restore_s": -1}, "restore_s"),
                          ({"restore_s": "soon"}, "restore_s: not a duration"),
                          ({"action": "log"}, "action"), ({"enabled": 1}, "enabled")]:
        with pytest.raises(ValueError, match=field):
            Watchdog(**kwargs)
    assert Watchdog(detect_s="1ms").detect_s == pytest.approx(0.001)


def test_storm_end_to_end_with_pause_state_and_queues():
    """A peer pauses priority 3 forever: the watchdog flushes queue 3 and drops arrivals."""
    src = bytes(6)
    ep = EgressPause(400e9, TD)
    pq = PortQueues(Queuing.plain())
    w = wd(action="drop", detect=0.001, restore=0.002)
    storm = build_pfc_frame(src, P3, (0, 0, 0, 0xFFFF, 0, 0, 0, 0))
    pause_lab = TD.pause_lab_s(0xFFFF, 400e9)  # ~84 ms
    for i in range(10):
        pq.enqueue(3, bytes(1000), ingress=i)
    pq.enqueue(0, bytes(100), ingress="other")
    t, events, dropped = 0.0, [], 0
    while t < 1.5:
        ep.on_frame(storm, t)  # the storm: a new pause before the old one expires
        mask = w.effective_mask(ep.paused_mask(t))
        item = pq.dequeue(mask)
        assert item is None or item[0] != 3  # q3 never transmits during the storm
        for ev in w.check(t, ep.paused_mask(t), pq.backlog_mask(), ep.last_rx):
            events.append(ev)
            if ev.kind == "storm":
                dropped += len(pq.flush(3, "pfc_watchdog"))
                w.note_dropped(3, dropped)
        if w.drop_mask & P3:
            w.note_dropped(3)  # an arrival for the stormed queue is dropped
        t += pause_lab / 2
    assert [e.kind for e in events] == ["storm"]
    assert dropped == 10 and pq.qbytes[3] == 0 and w.dropped[3] > 10
    assert pq.counters()[3]["drops"] == {"pfc_watchdog": 10}
    # the storm stops: restored 2 s (lab) after the last pause frame
    last = ep.last_rx[3]
    assert w.check(last + 1.0, ep.paused_mask(last + 1.0), 0, ep.last_rx) == []
    assert [e.kind for e in w.check(last + 2.001, 0, 0, ep.last_rx)] == ["restore"]
