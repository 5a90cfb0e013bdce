"""The NIC loop's wake-up grid (traffic.nic.datapath.grid_step, on_grid; issue 30): its
step from the fidelity guard's bound as the NIC's config gives it, deadlines rounded up
to it, and the frames a late wake-up finds due sent together - each recorded against its
own pacer time, the pacer's schedule kept; received frames' waits since their arrival
(kernel stamps) recorded. Fake clocks, no sockets (TDF 1000)."""

import dataclasses
import socket
import struct

import pytest

from emucore.fidelity import lag_bound_model_s
from topologies import load
from traffic.nic.wakeup import (GRID_FRACTION, RX_ANC, SO_TIMESTAMPNS, arrival, grid_step, next_wake,
                                on_grid)
from traffic.nic.nicconfig import NicConfig

from .test_nic_fidelity import T0, at, sender, snap  # noqa: F401  (sender: a fixture)


def test_nic_config_carries_its_link_cable_delay():
    fab = load("rail2x4", tdf=1000)
    cfg = NicConfig.for_gpu(fab, "h1g1", "/nonexistent")
    g = fab.gpus["h1g1"]
    assert cfg.cable_s == fab.link_of(g.host, g.nic).delay_s > 0
    assert NicConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="cable_s"):
        dataclasses.replace(cfg, cable_s=-1e-6)


@pytest.mark.parametrize("tdf", [1000, 5000, 20000])
def test_grid_is_a_fraction_of_the_bound_at_most_half_the_slack(tdf):
    cfg = NicConfig.for_gpu(load("rail2x4", tdf=tdf), "h1g1", "/nonexistent")
    slack = 0.004
    bound = max(cfg.cable_s, lag_bound_model_s(cfg.mtu, cfg.model_bps))
    assert grid_step(cfg, slack) == min(GRID_FRACTION * bound * tdf, slack / 2)
    assert grid_step(cfg, 1.0) == GRID_FRACTION * cfg.cable_s * tdf  # rail2x4: the cable
    no_cable = dataclasses.replace(cfg, cable_s=0.0)
    assert grid_step(no_cable, 1.0) == GRID_FRACTION * cfg.mtu * 8 / cfg.model_bps * tdf


def test_on_grid_rounds_up_to_a_multiple():
    assert on_grid(1.1, 0.25) == 1.25
    assert on_grid(1.0, 0.25) == 1.0
    assert on_grid(1.1, 0.0) == 1.1


def test_frames_due_by_a_late_wake_up_leave_together_each_judged_by_its_pacer(sender):
    a, q, _ = sender
    assert a.grid == grid_step(a.cfg, a.slack) > 0
    a.transmit(at(a, T0))  # frame 1, on time
    due2 = q.next_t
    # a wake-up late for frame 2, so late that frame 3 is due too (within the pacer's
    # slack): both leave on it
    g = on_grid(due2, a.grid) + 0.3 * a.grid
    a.transmit(at(a, g))
    f2, f3 = (len(f) for f in a.raw.frames[1:])
    due3 = due2 + f2 * 8 / a.link_lab_bps
    assert len(a.raw.frames) == 3 and due3 <= g
    assert q.next_t == due3 + f3 * 8 / a.link_lab_bps  # the schedule, not g + a frame
    s = snap(a)
    assert s["count"] == 3 and s["hist"][0] == 1 and s["worst"] == "pacer"
    assert s["max_lag_model_s"] == a.td.model_time(g - due2)


class NoRx:
    """A raw socket the loop must not read."""

    def recv_into(self, buf):
        raise AssertionError("read although select said nothing arrived")


def test_step_reads_the_wire_only_when_told(sender):
    a, _, _ = sender
    wire, a.raw = a.raw, NoRx()
    a.raw.send = wire.send
    a.step(at(a, T0), rx=False)
    assert len(wire.frames) == 1
    with pytest.raises(AssertionError, match="read although"):
        a.step(at(a, T0), rx=True)



def test_next_wake_is_the_deadline_itself_or_the_next_grid_point_while_polling():
    # a paced frame's deadline is not rounded to the grid all NICs share: rounding made the
    # senders' frames reach a switch port at the same instants (traffic.nic.wakeup)
    assert next_wake(1.1, 0.5, 0.25, polling=False) == 1.6
    assert next_wake(1.1, 0.5, 0.25, polling=True) == 1.25
    assert next_wake(1.1, 0.1, 0.25, polling=True) == pytest.approx(1.2)  # a deadline first
    assert next_wake(1.1, 0.5, 0.0, polling=True) == 1.6  # no grid: no polling
    # a deadline within one grid step serves the polling: no wake-up at the grid point
    # between (1.25); the frames that come meanwhile wait less than a step for it
    assert next_wake(1.2, 0.2, 0.25, polling=True) == pytest.approx(1.4)
    assert next_wake(1.2, 0.26, 0.25, polling=True) == 1.25


def stamp(t_real):
    sec = int(t_real)
    return [(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("qq", sec, round((t_real - sec) * 1e9)))]


def test_arrival_reads_the_kernel_stamp_on_the_monotonic_clock():
    assert arrival(stamp(1000.5), -990.0) == pytest.approx(10.5, abs=1e-9)
    assert arrival([(socket.SOL_SOCKET, SO_TIMESTAMPNS + 1, bytes(16))], 0.0) is None
    assert arrival([], 0.0) is None


class StampedWire:
    """A raw socket whose frames carry the kernel's arrival stamps (CLOCK_REALTIME)."""

    def __init__(self, frames):
        self.frames, self.sent = list(frames), []

    def recvmsg_into(self, bufs, ancsize):
        assert ancsize >= RX_ANC
        if not self.frames:
            raise BlockingIOError
        data, anc = self.frames.pop(0)
        bufs[0][:len(data)] = data
        return len(data), anc, 0, None

    def send(self, f):
        self.sent.append(bytes(f))


def test_received_frames_record_their_wait_since_arrival(sender):
    a, _, _ = sender
    junk = bytes(60)  # not a frame for a QP: counted, dropped
    real = 1000.0  # CLOCK_REALTIME when the monotonic clock reads T0
    a.raw = StampedWire([(junk, stamp(real - 0.002)), (junk, stamp(real - 0.0005)), (junk, [])])
    a.rx_stamps, a.realtime = True, lambda: real
    a.step(at(a, T0))
    s = snap(a)
    assert a.rx_read == 3 and a.c["rx_frames"] == 3
    assert s["count"] == 3 and s["worst"] == "rx"  # two stamped frames and the pacer's first
    assert s["max_lag_model_s"] == pytest.approx(a.td.model_time(0.002), rel=1e-6)
    assert sum(s["hist"][1:]) == 2
