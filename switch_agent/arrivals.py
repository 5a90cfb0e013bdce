"""When a switch agent takes what its ports received, and at what time (issue 30; the
NIC's counterpart is traffic.nic.wakeup). Pure logic: `switch_agent.serve`'s Python loop
and C's (switch_agent/fast/loop.h, the same rules under the same names) follow it.

* **A frame runs at its arrival.** The kernel stamps each frame it hands a port socket
  (a PACKET_MMAP slot's tp_sec / tp_nsec; SO_TIMESTAMPNS on a socket Python reads,
  emucore.rawsock.arrival), and the pipeline takes the frame at that stamp, not at the
  wake-up that read it. A frame read late is queued, shaped and put on the delay line as
  of its arrival (the shaper books a late start at the time the wire was free,
  switch_agent.shaper), so its release is late only when the wait outlasted what the
  queue, the serialisation and the cable's delay leave - and then the lag meter records
  it against the fidelity guard's bound. Before, a frame ran at its wake-up's time: every
  wait since the arrival moved the model and was recorded nowhere.
* **In arrival order** (`arrival_order`): the frames one wake-up read, from every port,
  run by stamp, ties in the order read (port by port as the wait reported them, each
  port's frames in its order); a frame's time is its stamp clamped to no earlier than
  the loop's last step (a frame left over from an earlier wake-up: the pipeline's clock
  never goes back) and no later than the wake-up (a stamp ahead of the clock that read
  it); a frame without a stamp runs at the wake-up.
* **Polling** (`poll_until`): after a wake-up that read frames, the loop does not watch
  the ports again until POLL_FRACTION of the guard's bound later (or its next deadline,
  if that is sooner: a release or a timer is never postponed) and then takes everything
  that came meanwhile, so frames at load share wake-ups. The frames wait at most that
  long, which their stamps keep out of the model as above. A wake-up that read nothing
  waits on the ports again.
* **A poll never overflows a port's ring** (`poll_step`): the step is no longer than
  POLL_RING_FRAMES minimum-size frames take at the fastest port's lab rate, a quarter of
  the RX ring (switch_agent/fast/ring.h's RING_RX). Its peer paces what it sends to that
  rate, so the kernel cannot drop a frame for want of a slot while the loop sleeps. An
  unshaped fabric (`emu run --no-shaping`, `emu bench forward`: no lab rate, so nothing
  bounds how fast frames come) does not poll: there a 0.75 ms poll let a TCP stream's
  bursts overflow the 1024-slot ring (9,228 drops in 4 s at MTU 1500) and cut `bench
  forward` from 2.4 to 1.0 Gbit/s.

The bound (`bound_lab_s`) is the guard's as the switch sees it (emu.observe.guard): the
shortest cable's delay, or one MTU frame at the fastest port's model rate if longer.
"""

from __future__ import annotations

import math

from emucore.fidelity import lag_bound_model_s
from switch_agent.agentconfig import AgentConfig

__all__ = ["POLL_FRACTION", "POLL_RING_FRAMES", "MIN_FRAME_BITS", "bound_lab_s", "poll_step",
           "poll_until", "arrival_order"]

#: after a wake-up that read frames, the ports are watched again this fraction of the
#: guard's bound later (`poll_step`). The frames that came meanwhile run at their stamps,
#: so the wait costs the model nothing while it is shorter than the cable's delay (the
#: bound on a fabric whose cables are longer than an MTU's serialisation, rail2x4's
#: 1 us); what it does delay is a pause a frame's arrival sends upstream (xOFF). 0.15:
#: as many frames per wake-up as 0.3 on rail2x4 at TDF 1500-2000 (~3), the pause half as
#: late (docs/PERFORMANCE.md "Arrival stamps and polling")
POLL_FRACTION = 0.15

#: a poll step is at most this many minimum-size frames at the fastest port's lab rate:
#: a quarter of the 1024 slots of a port's RX ring (switch_agent/fast/ring.h RING_RX;
#: tests/unit/test_arrivals.py holds the two together). On rail2x4 0.15 of the bound is
#: ~58 such frames at any TDF (0.15 us model of a 200 Gb/s port), so this binds only
#: where cables are long (L11.13's 10 us ones at 400 Gb/s: ~1,170)
POLL_RING_FRAMES = 256
#: the shortest Ethernet frame, 64 bytes
MIN_FRAME_BITS = 64 * 8


def bound_lab_s(cfg: AgentConfig) -> float:
    """The fidelity guard's bound as this switch's ports see it, lab seconds: the
    shortest cable's delay, or one MTU frame at the fastest port's model rate if longer
    (or if no cable has a delay)."""
    mtu = lag_bound_model_s(cfg.mtu, max(p.model_bps for p in cfg.ports))
    cable = min((p.delay_lab_s for p in cfg.ports if p.delay_lab_s > 0), default=0.0)
    return max(mtu * cfg.tdf, cable)


def poll_step(cfg: AgentConfig) -> float:
    """How long after a wake-up that read frames the loop looks at the ports again,
    lab seconds: POLL_FRACTION of `bound_lab_s`, at most POLL_RING_FRAMES minimum-size
    frames at the fastest port's lab rate; 0.0 (no polling) when a port is unshaped."""
    fastest = max(p.lab_bps for p in cfg.ports)
    if not math.isfinite(fastest):
        return 0.0
    return min(POLL_FRACTION * bound_lab_s(cfg), POLL_RING_FRAMES * MIN_FRAME_BITS / fastest)


def poll_until(now: float, wake: float, step: float) -> float:
    """When a loop that read frames at `now` looks at its ports again: `step` later, or
    at its next deadline `wake` if that is sooner."""
    return min(wake, now + step)


def arrival_order(batch: list, lo: float, now: float) -> list:
    """The frames one wake-up read, as [(time, item)] in the order the pipeline runs
    them. `batch`: [(stamp or None, item)] in the order read, stamps on the loop's
    monotonic clock; `lo`: the time of the loop's last step; `now`: the wake-up's. By
    stamp (None: `now`), ties in the order read; each time clamped into [lo, now]."""
    keyed = sorted(((now if s is None else s, k) for k, (s, _) in enumerate(batch)))
    return [(min(max(s, lo), now), batch[k][1]) for s, k in keyed]
