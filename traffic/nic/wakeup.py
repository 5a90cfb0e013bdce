"""When the NIC's data-path loop wakes up (traffic.nic.datapath.Nic.run; issue 30): a
wake-up, not the Python, was most of a NIC's CPU per frame (emu.bench.nicloop), so

* deadlines are NOT on the grid: a paced frame leaves at its pacer time. Rounding the
  senders' deadlines up to one grid (624e8ed did, halving a sender's wake-ups) made every
  NIC's frames reach a switch port at the same instants, and the frame enqueued second
  at an instant finds the first in the queue and is marked more often: a DCQCN incast
  then splits by that order (emu.bench.dcqcnsim with the 0.37 us grid: the sender
  enqueued first leads in 25 of 32 WRED draws, 14 of 32 without; the fabric's 2:1 under
  the grid 0.788 / 1.074 of C/2; docs/DCQCN_PARAMS.md). Issue 31's fair share outranks
  the CPU;
* receiving on the grid: after a wake-up that read frames, the loop does not wait for
  the next frame but for the next grid point (`next_wake`), and reads all that came
  meanwhile - only where the kernel stamps each frame's arrival (SO_TIMESTAMPNS,
  socket(7); `enable_rx_stamps`, `arrival`), so each frame's wait from its arrival is
  recorded ("rx") against the guard's bound, not hidden. Otherwise it wakes per frame;
* a deadline serves the polling: after a wake-up that read frames, a deadline at most
  one grid step away is the next wake-up, not the grid point before it; the frames that
  come meanwhile wait less than one step, as for a grid point. Where a NIC sends and
  receives (an AllReduce ring), this merges its receive polls into its pacer wake-ups
  (emu.bench.nicloop --both, docs/PERFORMANCE.md). Not watching the wire before every
  near deadline (also after wake-ups that read nothing) merged a little more, but then
  each wake-up of a pure sender paid a read that found nothing, and measured worse there.

The bound is the guard's (emu.observe.guard.bound_model_s) as the NIC sees it: its link's
cable delay, or one path-MTU frame at its link's model rate if longer.
"""

from __future__ import annotations

import math

from emucore.fidelity import lag_bound_model_s
from emucore.rawsock import RX_ANC, SO_TIMESTAMPNS, arrival, enable_rx_stamps
from traffic.nic.nicconfig import NicConfig

__all__ = ["GRID_FRACTION", "grid_step", "on_grid", "next_wake", "enable_rx_stamps",
           "arrival", "RX_ANC", "SO_TIMESTAMPNS"]

#: while receiving, the loop polls on a grid of this fraction of the fidelity guard's
#: bound (`grid_step`; switch_agent.fastagent's C loop rounds its deadlines to 0.1). A
#: grid shorter than one frame's serialisation shares no wake-up between frames
#: (rail2x4: 4 KB at 200 Gb/s is 0.17 us of the 1 us bound), so the NIC's is 0.5: each
#: frame waits at most half the bound, which leaves half the bound for the wake-up's own
#: lateness (the guard measured a p99 of 0.13 us at TDF 20000 on rail2x4)
GRID_FRACTION = 0.5


def grid_step(cfg: NicConfig, slack: float) -> float:
    """The wake-up grid of the loop, lab seconds: GRID_FRACTION of the fidelity guard's
    bound as this NIC sees it - its link's cable delay, or one path-MTU frame at its
    link's model rate if longer - and at most half the pacer's `slack`, so a frame that
    waits for a grid point keeps its pacer schedule (`pace`) instead of restarting."""
    bound = max(lag_bound_model_s(cfg.mtu, cfg.model_bps), cfg.cable_s)
    return min(GRID_FRACTION * bound * cfg.tdf, slack / 2)


def on_grid(t: float, grid: float) -> float:
    """`t` rounded up to a multiple of `grid` (unchanged without a grid)."""
    return math.ceil(t / grid) * grid if grid > 0 else t


def next_wake(now: float, timeout: float, grid: float, polling: bool) -> float:
    """When the loop wakes next, lab seconds: its next deadline (`now` + `timeout`), not
    rounded (a frame leaves at its pacer time: see the module docstring); while `polling`
    (frames came this wake-up, their arrivals stamped) and the deadline more than one
    grid step away, no later than the next grid point after `now`."""
    wake = now + timeout
    if polling and grid > 0 and timeout > grid:  # a deadline within a step serves
        wake = min(wake, (math.floor(now / grid) + 1) * grid)
    return wake
