"""The switch agent's fidelity guard (emucore.fidelity.LagMeter in `Agent.meter`): with a
fake clock that keeps time exactly nothing is late; a loop that stalls records exactly
the stall, in model time (TDF 1000: 1 ms lab = 1 us model), once, on the action it
delayed. And the poll loop's wait wakes to the microsecond without spinning."""

import math
import os
import select
import time
import types

import pytest

from emucore.fidelity import HIST_LEN
from emucore.wire.pause import pause_frame
from switch_agent import control
from switch_agent.serve import wait

from .fakes import mac
from .test_agent_qos import H, frame, make_agent, qos

SER = 9000 / 1e6  # a 9000-byte frame on a 1 MB/s lab port (make_agent): 9 ms lab
MS = 1e-3
US = 1e-6


class Clock:
    """The agent's `clock`: the lab time the driver says it is."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def with_clock(a):
    a.clock = Clock()
    return a


def drive(a, t, until, stall=None):
    """Run the agent as serve() does - timers, service, sleep until the wake time - from
    lab time `t` to `until`; with stall = (t0, t1) the loop sleeps through [t0, t1): a
    wake-up due in it happens at t1."""
    while True:
        if stall is not None and t >= stall[0]:
            t, stall = max(t, stall[1]), None
        a.clock.t = t
        wake = a.timers(t)
        if a.backlog:
            w = a.service(t)
            if w is not None and w < wake:
                wake = w
        if wake > until:
            return
        t = wake


def snap(a):
    return a.meter.snapshot()


def lags(a):
    """{bucket: count} of the late actions (bucket 0, on time, left out)."""
    return {i: n for i, n in enumerate(snap(a)["hist"]) if n and i}


def test_on_time_run_records_no_lag():
    a = with_clock(make_agent())
    for _ in range(5):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    drive(a, 0.0, 1.0)
    s = snap(a)
    assert len(a.ports["eth4"].sock.sent) == 5
    assert s["count"] == 5 and s["hist"][0] == 5 and s["max_lag_model_s"] == 0.0
    assert s["p99_lag_model_s"] == 0.0 and s["worst"] == ""


#: the shaper's catch-up window (Shaper.burst_s): 2 MTU of 9216 B at 1 MB/s, 18.432 ms
WINDOW = 2 * 9216 / 1e6


def test_backlog_serviced_10ms_late_catches_up_within_the_window():
    a = with_clock(make_agent())
    for _ in range(5):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    assert a.ports["eth4"].shaper.burst_s == pytest.approx(WINDOW, rel=1e-12)
    drive(a, 10 * MS, 1.0)  # the loop's first look at the backlog comes 10 ms late (< WINDOW)
    s = snap(a)
    # booked from the ideal start 0: frame 1 (due 9 ms) leaves at 10 ms, 1 ms late;
    # frames 2..5 (due 18, 27, 36, 45 ms) on their slots - the idle 10 ms is made up
    assert len(a.ports["eth4"].sock.sent) == 5
    assert s["count"] == 5 and s["hist"][0] == 4
    assert s["max_lag_model_s"] == pytest.approx(1 * US, rel=1e-9)
    assert s["worst"] == "eth4 tx" and sum(lags(a).values()) == 1
    assert a.ports["eth4"].shaper.free_at == pytest.approx(5 * SER, rel=1e-12)


def test_backlog_serviced_past_the_window_books_from_now():
    a = with_clock(make_agent())
    for _ in range(5):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    drive(a, 20 * MS, 1.0)  # 20 ms late: more than WINDOW (18.432 ms) behind
    s = snap(a)
    # frame 1 starts at 20 ms (model 0); frames 2..5 follow it back to back on its slots
    assert s["count"] == 5 and s["hist"][0] == 4
    assert s["max_lag_model_s"] == pytest.approx(20 * US, rel=1e-9)
    assert s["worst"] == "eth4 tx" and sum(lags(a).values()) == 1
    assert a.ports["eth4"].shaper.free_at == pytest.approx(20 * MS + 5 * SER, rel=1e-12)


def test_delay_line_released_late_records_the_lateness():
    a = with_clock(make_agent())
    a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    a.service(0.0)  # booked on time: leaves at 9 ms
    a.clock.t = SER + 2 * MS
    a.service(SER + 2 * MS)  # the wake-up for it comes 2 ms late
    s = snap(a)
    assert s["count"] == 1 and s["max_lag_model_s"] == pytest.approx(2 * US, rel=1e-9)


def test_a_stall_mid_backlog_delays_one_frame():
    a = with_clock(make_agent())
    for _ in range(6):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    # frame k leaves at 9k ms; bookings run up to the shaper's burst (2 frames of 9216 B,
    # 18.432 ms) ahead, so frame 6 is booked at 26.568 ms: the loop asleep from 20 to
    # 30 ms books it at 30 ms, still ahead of its slot (45 ms), and releases frame 3
    # (due 27 ms) 3 ms late; frame 4 (36 ms) leaves on time
    drive(a, 0.0, 1.0, stall=(20 * MS, 30 * MS))
    s = snap(a)
    assert len(a.ports["eth4"].sock.sent) == 6
    assert s["count"] == 6 and s["hist"][0] == 5
    assert s["max_lag_model_s"] == pytest.approx(3 * US, rel=1e-9)


def paused_backlog(n):
    """An agent whose eth4 holds `n` frames of priority 3, paused at 0 by its peer for
    65535 quanta; (agent, the pause's expiry)."""
    a = with_clock(make_agent())
    eth4 = a.ports["eth4"]
    a.mac_control.on_frame(eth4, pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
    for _ in range(n):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    expiry = eth4.pause.next_expiry
    assert expiry == a.td.pause_lab_s(0xFFFF, 200e9)
    assert a.service(0.0) == expiry  # every queued frame paused: wake at the expiry
    return a, expiry


def test_pause_expiry_acted_on_late():
    a, expiry = paused_backlog(3)
    drive(a, expiry + 4 * MS, 1.0)  # the wake-up at the expiry comes 4 ms late (< WINDOW)
    s = snap(a)
    # booked from the expiry (eligible_at): frame 1 due expiry + 9 ms, after the wake-up
    assert s["count"] == 3 and s["hist"][0] == 3 and s["max_lag_model_s"] == 0.0
    assert a.ports["eth4"].shaper.free_at == pytest.approx(expiry + 3 * SER, rel=1e-12)


def test_pause_expiry_acted_on_past_the_window():
    a, expiry = paused_backlog(3)
    drive(a, expiry + 30 * MS, 1.0)  # 30 ms late: more than WINDOW behind
    s = snap(a)
    assert s["count"] == 3 and s["hist"][0] == 2
    assert s["max_lag_model_s"] == pytest.approx(30 * US, rel=1e-9)


def test_resume_makes_queued_frames_eligible_at_once():
    a, _ = paused_backlog(1)
    a.mac_control.on_frame(a.ports["eth4"], pause_frame(mac(H[3]), 3, 0), 50 * US)  # resume
    drive(a, 50 * US + 1 * MS, 1.0)  # serviced 1 ms after the resume arrived (< WINDOW)
    assert snap(a)["max_lag_model_s"] == 0.0  # booked from the resume, due 9 ms after it
    assert a.ports["eth4"].shaper.free_at == pytest.approx(50 * US + SER, rel=1e-12)
    b, expiry = paused_backlog(1)
    b.mac_control.on_frame(b.ports["eth4"], pause_frame(mac(H[3]), 3, 0), 50 * US)
    drive(b, 50 * US + 30 * MS, 1.0)  # 30 ms after the resume (> WINDOW), before the expiry
    assert 50 * US + 30 * MS < expiry
    assert snap(b)["max_lag_model_s"] == pytest.approx(30 * US, rel=1e-9)


def test_pause_frame_sent_late_after_xoff():
    a = with_clock(make_agent())
    n_xoff = 3_200_000 // 9000 + 1  # the book's xOFF, 3200 KB, crossed by this frame
    for _ in range(n_xoff):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    a.clock.t = 7 * MS
    a.flush(a.ports["eth1"], 7 * MS)  # the pause goes out 7 ms after the crossing
    s = snap(a)
    assert a.ports["eth1"].pause_tx[3] == 1
    assert s["count"] == 1 and s["worst"] == "eth1 ctrl"
    assert s["max_lag_model_s"] == pytest.approx(7 * US, rel=1e-9)


def test_pause_refresh_fired_late():
    a = with_clock(make_agent())
    for _ in range(3_200_000 // 9000 + 1):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    ing = a.ports["eth1"].ingress
    due = ing.refresh_at[3]
    assert due == ing.refresh_s
    a.timers(due + 3 * MS)
    s = snap(a)
    assert s["count"] == 1 and s["worst"] == "eth1 pfc refresh"
    assert s["max_lag_model_s"] == pytest.approx(3 * US, rel=1e-9)


def test_lldp_and_watchdog_timers_fired_late():
    a = with_clock(make_agent(qos(detect_s=0.2, restore_s=0.2)))
    a.next_lldp = -math.inf
    a.timers(0.0)  # the first announcement and check are "at once": not deadlines
    assert snap(a)["count"] == 0
    period = a.wd_period
    assert period == pytest.approx(0.2 * 1000 / 4)  # detect_s / 4, lab
    assert a.next_lldp == a.cfg.lldp_interval_lab_s == 1.0
    a.timers(1.0 + 5 * MS)  # LLDP 5 ms late
    a.next_lldp = math.inf
    a.timers(period + 2 * MS)  # watchdog 2 ms late
    s = snap(a)
    assert s["count"] == 2 and s["worst"] == "lldp"
    assert s["max_lag_model_s"] == pytest.approx(5 * US, rel=1e-9)
    assert sum(lags(a).values()) == 2


def test_counters_carry_the_fidelity_snapshot_and_reset_clears_it():
    a = with_clock(make_agent())
    drive(a, 10 * MS, 1.0)
    for _ in range(2):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    drive(a, 10 * MS, 1.0)
    c0 = time.process_time()
    a.woke(), a.woke()  # the poll loop's wake-ups (switch_agent.serve)
    fid = control.AgentControl.dispatch(types.SimpleNamespace(agent=a), {"cmd": "counters"})[
        "fidelity"]
    assert set(fid) == {"count", "max_lag_model_s", "p99_lag_model_s", "hist", "worst", "cpu_s",
                        "wakeups"}
    assert fid["wakeups"] == 2
    assert fid["count"] == 2 and len(fid["hist"]) == HIST_LEN
    assert 0 < fid["cpu_s"] <= time.process_time() and fid["cpu_s"] >= c0 - 1e-3
    zero = {"count": 0, "max_lag_model_s": 0.0, "p99_lag_model_s": 0.0,
            "hist": [0] * HIST_LEN, "worst": ""}
    ctl = types.SimpleNamespace(agent=a)
    assert control.AgentControl.dispatch(ctl, {"cmd": "fidelity_reset"})["ok"]
    assert snap(a) == zero and a.ports["eth1"].rx_packets == 2  # only the guard's window
    drive(a, 10 * MS, 1.0)
    a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    drive(a, 10 * MS, 1.0)
    assert control.AgentControl.dispatch(ctl, {"cmd": "reset"})["ok"]
    assert snap(a) == zero and a.ports["eth1"].rx_packets == 0


# -- the poll loop's wait (switch_agent.serve.wait) ------------------------------------

def test_wait_returns_ready_events_at_once():
    ep = select.epoll()
    r, w = os.pipe()
    try:
        ep.register(r, select.EPOLLIN)
        assert wait(ep, 0.0) == []
        os.write(w, b"x")
        assert wait(ep, 5.0) == [(r, select.EPOLLIN)]
        assert wait(ep, -1) == [(r, select.EPOLLIN)]
        assert wait(ep, math.inf) == [(r, select.EPOLLIN)]
    finally:
        ep.close()
        os.close(r)
        os.close(w)


def test_wait_wakes_to_the_microsecond_without_spinning():
    """A timeout 300 us ahead: epoll alone rounds it up to 1 ms, so a median lateness
    under 500 us shows the sub-millisecond path (typically 50-100 us here, the kernel's
    wake-up latency on a shared machine); sleeping uses a small fraction of the CPU a
    busy wait would (all of it)."""
    ep = select.epoll()
    try:
        late = []
        c0, t0 = time.process_time(), time.monotonic()
        for _ in range(200):
            due = time.monotonic() + 300 * US
            wait(ep, due - time.monotonic())
            late.append(time.monotonic() - due)
        cpu, wall = time.process_time() - c0, time.monotonic() - t0
        late.sort()
        assert late[0] >= 0.0 and late[100] < 500 * US, late[::20]
        assert cpu < 0.5 * wall
        c0 = time.process_time()
        wait(ep, 0.2)  # idle: blocks
        assert time.process_time() - c0 < 0.02
    finally:
        ep.close()
