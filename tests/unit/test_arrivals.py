"""When a switch agent takes what its ports received, and at what time
(switch_agent.arrivals; issue 30): arrival order over the ports with the times clamped
into the loop's [last step, wake-up], the poll step from the guard's bound, and the
Python loop's stamps read from real sockets. C's loop follows the same rules
(tests/netns/test_fast_ring.py: its rings, their stamps and polling)."""

import math
import re
import socket
import time
from dataclasses import replace
from pathlib import Path

import pytest

from emucore import fidelity, rawsock
from switch_agent import arrivals, fastagent
from switch_agent.arrivals import arrival_order, bound_lab_s, poll_step, poll_until
from tests.unit.test_fast_pipeline import config


@pytest.mark.parametrize("batch, lo, now, want", [
    ([], 1.0, 2.0, []),
    # one port's frames keep their order; two ports' interleave by stamp
    ([(1.2, "a1"), (1.4, "a2"), (1.1, "b1"), (1.3, "b2")], 1.0, 2.0,
     [(1.1, "b1"), (1.2, "a1"), (1.3, "b2"), (1.4, "a2")]),
    # ties in the order read
    ([(1.5, "a"), (1.5, "b"), (1.5, "c")], 1.0, 2.0, [(1.5, "a"), (1.5, "b"), (1.5, "c")]),
    # a frame left from before the last step runs at it; a stamp ahead of the wake-up at it
    ([(0.5, "old"), (2.5, "ahead"), (1.5, "mid")], 1.0, 2.0,
     [(1.0, "old"), (1.5, "mid"), (2.0, "ahead")]),
    # no stamp: the wake-up's time, after the stamped ones before it
    ([(None, "x"), (1.9, "y"), (None, "z")], 1.0, 2.0, [(1.9, "y"), (2.0, "x"), (2.0, "z")]),
])
def test_arrival_order(batch, lo, now, want):
    assert arrival_order(batch, lo, now) == want


def test_times_never_go_back():
    batch = [(t, k) for k, t in enumerate((3.0, 0.2, 2.2, 5.0, 1.0, 2.2))]
    times = [t for t, _ in arrival_order(batch, 1.0, 4.0)]
    assert times == sorted(times) and times[0] == 1.0 and times[-1] == 4.0


def test_poll_until_is_a_step_later_or_the_next_deadline():
    assert poll_until(10.0, math.inf, 0.3) == 10.3
    assert poll_until(10.0, 10.1, 0.3) == 10.1
    assert poll_until(10.0, 11.0, 0.0) == 10.0


def test_poll_step_is_a_fraction_of_the_guards_bound():
    """The bound as the switch's ports see it: its shortest cable (1 ms lab in this
    config), or one MTU at its fastest port's model rate where longer or no cable."""
    cfg = config(None)
    assert arrivals.POLL_FRACTION == 0.15
    assert bound_lab_s(cfg) == 0.001
    assert math.isclose(poll_step(cfg), 0.15 * 0.001)
    # no cable delays: one MTU at the fastest model rate (400 Gb/s, the uplinks)
    bare = replace(cfg, ports=tuple(replace(p, delay_lab_s=0.0) for p in cfg.ports))
    mtu = fidelity.lag_bound_model_s(bare.mtu, 400e9)
    assert math.isclose(bound_lab_s(bare), mtu * bare.tdf)
    assert math.isclose(poll_step(bare), 0.15 * mtu * bare.tdf)
    assert math.isclose(fastagent.grid_step(bare), fastagent.GRID_FRACTION * mtu * bare.tdf)
    slow = replace(bare, tdf=20 * bare.tdf,
                   ports=tuple(replace(p, lab_bps=p.lab_bps / 20) for p in bare.ports))
    assert math.isclose(poll_step(slow), 20 * poll_step(bare))


def test_a_poll_cannot_overflow_a_ring():
    """A poll step lets at most a quarter of a ring's slots of 64-byte frames in at the
    fastest port's lab rate (the config's host ports: 200 Gb/s model at TDF 1000): long
    cables shorten it to that; an unshaped port (no lab rate) turns polling off."""
    cfg = config(None)
    fastest = 200e9 / 1000.0
    cap = arrivals.POLL_RING_FRAMES * 512 / fastest  # 655.36 us lab
    assert cap < 0.15 * 0.01
    far = replace(cfg, ports=tuple(replace(p, delay_lab_s=0.01) for p in cfg.ports))
    assert math.isclose(poll_step(far), cap)
    assert poll_step(config(None, shaped=False)) == 0.0
    one = replace(cfg, ports=(replace(cfg.ports[0], lab_bps=math.inf),) + cfg.ports[1:])
    assert poll_step(one) == 0.0


def test_the_cap_is_a_quarter_of_cs_ring():
    """POLL_RING_FRAMES mirrors switch_agent/fast/ring.h's RING_RX / 4."""
    ring_h = (Path(arrivals.__file__).parent / "fast" / "ring.h").read_text()
    slots = int(re.search(r"#define RING_RX (\d+)", ring_h).group(1))
    assert arrivals.POLL_RING_FRAMES * 4 == slots


def test_a_socket_stamps_what_it_receives():
    """SO_TIMESTAMPNS on a socket: each datagram's arrival, on the monotonic clock, between
    the send and the read (what the Python loop reads its port sockets with)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        assert rawsock.enable_rx_stamps(b)
        before = time.monotonic()
        a.send(b"x")
        time.sleep(0.01)
        offset = time.monotonic() - time.time()
        data, anc, _, _ = b.recvmsg(100, rawsock.RX_ANC)
        t = rawsock.arrival(anc, offset)
        assert data == b"x" and before - 1e-3 <= t <= time.monotonic() - 0.009
