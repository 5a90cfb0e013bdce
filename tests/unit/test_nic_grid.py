"""The NIC loop's wake-up grid (traffic.nic.datapath.grid_step, on_grid; issue 30): its
step from the fidelity guard's bound as the NIC's config gives it, deadlines rounded up
to it, and the frames a late wake-up finds due sent together - each recorded against its
own pacer time, the pacer's schedule kept. Fake clock, no sockets (TDF 1000)."""

import dataclasses

import pytest

from emucore.fidelity import lag_bound_model_s
from topologies import load
from traffic.nic.datapath import GRID_FRACTION, grid_step, on_grid
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
    # the loop's next wake-up: frame 2's pacer time rounded up to the grid, and so late
    # that frame 3 is due too (within the pacer's slack)
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

