"""The NIC's fidelity guard (emucore.fidelity.LagMeter in `Nic.meter`): with a fake clock
(TDF 1000: 1 ms lab = 1 us model) a NIC that acts when due records no lag; one that
acts late records exactly how late, on the pacer, a retransmission timeout, a CNP."""

from types import SimpleNamespace

import pytest

from emucore.fidelity import HIST_LEN
from emucore.qos.classify import mark_ce
from emucore.wire.pause import pause_frame
from traffic.nic import ctl as nic_ctl

from .test_nic import _pair, _qp, connected

MS = 1e-3
US = 1e-6
T0 = 10.0


class Clock:
    """A NIC's `clock`: the lab time the test says it is."""

    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def sender():
    """NIC h1g1 with one QP in RTS towards h4g2 (DCQCN off) and a 3-frame WRITE posted at
    T0; the peer never answers. Yields (nic, qp, a post_send work request); the clock
    reads T0."""
    _, a, b = _pair(dcqcn="off")
    a.clock = Clock(T0)
    size = 2 * 4096 + 100
    sa, ma, _, qa = _qp(a, size, bytes(size))
    a.to_rtr(qa, 0x42, 0, b.cfg.ip, 4096)
    a.to_rts(qa)
    wr = {"wr_id": 1, "local_addr": ma["addr"], "length": size, "lkey": ma["lkey"],
          "remote_addr": 0, "rkey": 1}
    a.post_send(qa.qpn, [wr])
    yield a, qa, wr
    a.dereg_mr(ma["lkey"])
    a.shms.clear()
    sa.close()
    sa.unlink()


def at(nic, t):
    nic.clock.t = t
    return t


def snap(nic):
    return nic.meter.snapshot()


def send_all(a, q, now=T0):
    """Transmit as the loop does, each frame when the pacer allows it, until the QP has
    nothing left to send; returns the time it found that out."""
    while not q.blocked:
        a.transmit(at(a, now))
        now = max(q.next_t, a.port_next - a.slack)
    return now


def test_pacer_on_time_records_no_lag(sender):
    a, q, _ = sender
    send_all(a, q)
    s = snap(a)
    assert len(a.raw.frames) == 3
    assert s["count"] == 3 and s["hist"][0] == 3 and s["max_lag_model_s"] == 0.0


def test_pacer_late_records_the_lateness_once(sender):
    a, _, _ = sender
    a.transmit(at(a, T0))
    # the next wake-up comes 2 ms after the port allowed frame 2: more than the pacer's
    # 1 ms slack, so it restarts its grid from now and frame 3 is on time again
    now = at(a, a.port_next + 2 * MS)
    a.transmit(now)
    a.transmit(at(a, a.port_next))
    s = snap(a)
    assert len(a.raw.frames) == 3 and a.slack == 1 * MS
    assert s["count"] == 3 and s["hist"][0] == 2 and s["worst"] == "pacer"
    assert s["max_lag_model_s"] == pytest.approx(2 * US, rel=1e-9)


def test_pause_expiry_acted_on_late(sender):
    a, _, _ = sender
    a.on_frame(memoryview(pause_frame(b"\x02" * 6, 3, 0xFFFF)), T0)
    a.transmit(T0)
    assert a.raw.frames == []
    end = T0 + a.td.pause_lab_s(0xFFFF, 200e9)
    a.transmit(at(a, end + 4 * MS))  # the wake-up at the expiry comes 4 ms late
    s = snap(a)
    assert len(a.raw.frames) == 1 and s["count"] == 1
    assert s["max_lag_model_s"] == pytest.approx(4 * US, rel=1e-9)


def test_work_posted_to_an_idle_qp_is_due_when_posted(sender):
    a, q, wr = sender
    now = at(a, send_all(a, q) + 5.0)  # long after the pacer's slot
    assert q.blocked and q.ready_at == T0
    a.post_send(q.qpn, [{**wr, "wr_id": 2, "length": 100}])
    assert q.ready_at == now
    a.transmit(now)  # posted and sent at once
    s = snap(a)
    assert len(a.raw.frames) == 4 and s["count"] == 4 and s["hist"][0] == 4


def test_retransmission_timeout_fired_late(sender):
    a, q, _ = sender
    send_all(a, q)
    d = q.ep.deadline
    assert d == T0 + a.td.lab_time(a.cfg.timeout_s)  # armed by the first frame
    a.step(at(a, d + 3 * MS))  # fires 3 ms late; the go-back-N frame leaves at once
    s = snap(a)
    assert q.ep.requester.counters.timeouts == 1 and len(a.raw.frames) == 4
    assert s["count"] == 5 and s["hist"][0] == 4 and s["worst"] == "rto"
    assert s["max_lag_model_s"] == pytest.approx(3 * US, rel=1e-9)


def test_a_timer_that_cannot_fire_does_not_make_the_loop_spin(sender):
    a, q, _ = sender
    a.transmit(at(a, T0))
    d = q.ep.deadline
    q.ep.qp.to_error()  # out of RTS: on_timer leaves the deadline as it is
    q.ep.requester.deadline = d
    assert a.step(at(a, d + 1.0)) > 0
    assert snap(a)["count"] == 1  # only the first frame: the timer did not fire


def test_cnp_sent_late_and_counters():
    with connected(100, bytes(100), clock=Clock(T0)) as c:
        a, b = c.a, c.b
        a.post_send(c.qa.qpn, [{"wr_id": 1, "local_addr": c.ma["addr"], "length": 100,
                                 "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"],
                                 "rkey": c.mb["rkey"]}])
        a.transmit(T0)
        m = bytearray(mark_ce(a.raw.frames[0]))  # CE, as a switch marks it
        b.clock.t = T0 + 1 * MS  # received at T0, its CNP leaves 1 ms later
        b.on_frame(memoryview(m), T0)
        fid = b.counters()["fidelity"]
    assert set(fid) == {"count", "max_lag_model_s", "p99_lag_model_s", "hist", "worst", "cpu_s"}
    assert fid["count"] == 1 and fid["worst"] == "cnp" and len(fid["hist"]) == HIST_LEN
    assert fid["max_lag_model_s"] == pytest.approx(1 * US, rel=1e-9) and fid["cpu_s"] > 0


def test_control_fidelity_reset_starts_a_new_window(sender):
    a, _, _ = sender
    a.transmit(at(a, T0))
    a.transmit(at(a, a.port_next + 2 * MS))
    assert snap(a)["count"] == 2 and snap(a)["max_lag_model_s"] > 0
    ctl = SimpleNamespace(nic=a)
    assert nic_ctl.NicControl.dispatch(ctl, {"cmd": "fidelity_reset"}) == {}
    s = snap(a)
    assert s["count"] == 0 and s["max_lag_model_s"] == 0.0 and sum(s["hist"]) == 0
