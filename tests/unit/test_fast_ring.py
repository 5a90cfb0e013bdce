"""The fast agent's own loop (switch_agent/fast/loop.h), without root: what it returns to
Python for (a Python descriptor readable, Python's deadline, events to write, a signal),
its timers and service run on the way with frames sent on a port's descriptor, the
wake-up grid, and a socket that refuses rings leaving Python's loop in charge. The rings
themselves need AF_PACKET (tests/netns/test_fast_ring.py); also under ASan + UBSan.
Both agents' count of the frames the kernel dropped arriving (a port socket's
PACKET_STATISTICS), from sockets that report given counts.
"""

from __future__ import annotations

import json
import math
import select
import signal
import socket
import struct
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from emucore import fidelity
from switch_agent import fastagent
from switch_agent.fast import _pipeline
from switch_agent.fast.pipeline import RingSocket
from switch_agent.port import packet_stats
from tests.unit import test_fast_pipeline
from tests.unit.test_fast_pipeline import FIB, HOSTS, ROUTER, config, small_qos
from emucore.wire.ether import mac_bytes
from traffic.tools.rawgen import build_frame


def agent(cfg) -> fastagent.FastAgent:
    """A FastAgent whose ports are the ends of socket pairs (C sends on them); the peers."""
    a = fastagent.build(cfg, "fast", open_sockets=False)
    peers = {}
    for i, p in enumerate(a.py_ports):
        p.sock, peers[p.name] = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        p.sock.setblocking(False)
        peers[p.name].setblocking(False)
        a.fast.c.set_fd(i, p.sock.fileno())
    a.install_fib(*FIB)
    return a, peers


def serve(a, ep, seconds: float, up: bool = True) -> tuple[int, list, list]:
    watchdog, sent = [], []
    why, _ = a.fast.c.serve(ep.fileno(), time.monotonic() + seconds, up, a.punted, watchdog,
                            sent)
    return why, watchdog, sent


def test_the_answers_are_the_python_sides():
    assert (fastagent.SERVE_PYTHON, fastagent.SERVE_DEADLINE) == (_pipeline.SERVE_PYTHON,
                                                                  _pipeline.SERVE_DEADLINE)


def test_returns_for_python_and_its_deadline():
    """Nothing to do: back at Python's deadline, not before; a readable descriptor of
    Python's (or a port without a ring: Python reads it) ends the wait at once."""
    a, peers = agent(config(None, shaped=False))
    ep = select.epoll()
    r, w = socket.socketpair()
    ep.register(r.fileno(), select.EPOLLIN)
    t0 = time.monotonic()
    assert serve(a, ep, 0.02)[0] == _pipeline.SERVE_DEADLINE
    assert time.monotonic() - t0 >= 0.02
    w.send(b"x")
    t0, wakes = time.monotonic(), a.fast.c.loop_stats()[0]
    assert serve(a, ep, 5.0)[0] == _pipeline.SERVE_PYTHON
    assert time.monotonic() - t0 < 1.0
    assert a.fast.c.loop_stats()[0] == wakes + 1  # one wake-up: the readable descriptor


def test_a_signal_ends_the_wait():
    """A signal interrupts the wait: its Python handler runs, and Python gets control."""
    a, _ = agent(config(None, shaped=False))
    ep = select.epoll()
    seen = []
    old = signal.signal(signal.SIGALRM, lambda *_: seen.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.02)
        assert serve(a, ep, 5.0)[0] == _pipeline.SERVE_SIGNAL
    finally:
        signal.signal(signal.SIGALRM, old)
    assert seen == [1]


def test_service_sends_on_the_ports_descriptor_and_events_come_back():
    """A frame queued (an ICMP reply's way) leaves on the port's descriptor from C's loop;
    with the event log open, what C noted comes back to Python to write (the test hook's
    drop); frames C cannot send itself (no descriptor) come back to be sent."""
    with tempfile.TemporaryDirectory() as d:
        cfg = replace(config(small_qos(), shaped=False), events_path=str(Path(d) / "e.jsonl"))
        a, peers = agent(cfg)
        ep = select.epoll()
        src = mac_bytes(HOSTS["eth1"][0])
        frame = bytes(build_frame(src, mac_bytes(ROUTER), "10.0.1.11", "10.0.1.12", 200))
        a.fast.c.enqueue(1, 0, frame, 0.0, 0)
        assert serve(a, ep, 0.01)[0] == _pipeline.SERVE_DEADLINE
        assert peers["eth2"].recv(65535) == frame
        a.drop_rate = 0.999
        a.fast.c.enqueue(1, 0, frame, 0.0, 0)
        assert serve(a, ep, 1.0)[0] == _pipeline.SERVE_EVENTS
        a.fast.drain()
        a.agent.log.close(0.0)
        assert '"reason":"test_hook"' in Path(d, "e.jsonl").read_text().replace(" ", "")
        a.drop_rate = 0.0
        a.fast.c.set_fd(1, -1)
        a.fast.c.enqueue(1, 0, frame, 0.0, 0)
        why, _, sent = serve(a, ep, 1.0)
        assert why == _pipeline.SERVE_SENT and sent == [(1, frame)]


def test_the_switch_down_runs_no_timers():
    """Down (admin_up False): no timers run (the watchdog's poll is not due), as serve."""
    a, _ = agent(config(replace(small_qos(), watchdog=test_fast_pipeline.FAST_WATCHDOG)))
    ep = select.epoll()
    assert serve(a, ep, 0.005, up=False)[0] == _pipeline.SERVE_DEADLINE
    assert a.fast.c.meter()[0] == 0  # nothing recorded: no poll
    assert serve(a, ep, 0.005)[0] == _pipeline.SERVE_DEADLINE
    assert a.fast.c.meter()[0] > 0  # the watchdog's polls, recorded


def test_a_socket_without_rings_keeps_pythons_loop():
    """A socket that is not AF_PACKET refuses the rings: open_rings says so, nothing
    changed (the sockets stay the Python agent's)."""
    a, _ = agent(config(None, shaped=False))
    socks = [p.sock for p in a.py_ports]
    assert a.open_rings(time.monotonic()) is False
    assert [p.sock for p in a.py_ports] == socks


def test_the_grid_is_a_tenth_of_the_guards_bound():
    """The guard's bound from this switch's ports (emu.observe.guard.lag_bound): its
    shortest cable (1 ms lab here), else one MTU at its fastest port's rate."""
    cfg = config(None)
    assert fastagent.GRID_FRACTION == 0.1
    assert math.isclose(fastagent.grid_step(cfg), 0.1 * 0.001)
    bare = config(None, shaped=False)  # no cable delays
    bound = fidelity.lag_bound_model_s(bare.mtu, max(p.model_bps for p in bare.ports))
    assert math.isclose(fastagent.grid_step(bare), 0.1 * bound * bare.tdf)
    assert math.isclose(bound, 9216 * 8 / 400e9)


def test_a_ring_socket_sends_through_c():
    class C:
        def ring_send(self, i, frame):
            sent.append((i, frame))
            return len(frame)

    sent = []
    r, w = socket.socketpair()
    s = RingSocket(r, C(), 3)
    assert s.send(b"abc") == 3 and sent == [(3, b"abc")] and s.fileno() == r.fileno()


class Counted:
    """A port socket whose kernel counted `drops[k]` frames dropped before its k-th
    PACKET_STATISTICS reading (a reading resets the count: packet(7))."""

    def __init__(self, drops: list[int]) -> None:
        self.drops = drops

    def getsockopt(self, level: int, opt: int, size: int) -> bytes:
        assert (level, opt, size) == (263, 6, 8)  # SOL_PACKET, PACKET_STATISTICS
        n = self.drops.pop(0) if self.drops else 0
        return struct.pack("II", 100 + n, n)  # tp_packets counts the dropped ones too


def test_frames_the_kernel_dropped_arriving_are_counted_and_logged():
    """Both agents read each port socket's count (its RX ring or receive buffer full) at
    every counters(), a reset and on exit: added up as the port's drops `rx_ring_full`,
    shown as `rx_ring_drops`, one `drop` event per reading that found some, with the
    count and no queue (none was chosen yet); a reset starts the count again."""
    assert packet_stats(socket.socketpair()[0]) == (0, 0)  # not AF_PACKET: no counts
    for mode in ("python", "fast"):
        with tempfile.TemporaryDirectory() as d:
            cfg = replace(config(None, shaped=False), events_path=str(Path(d) / "e.jsonl"))
            a = fastagent.build(cfg, mode, open_sockets=False)
            a.ports["eth2"].sock = Counted([7, 0, 4, 3, 0, 0, 2])
            snaps = [a.snapshot()["ports"] for _ in range(3)]
            assert [s["eth2"]["rx_ring_drops"] for s in snaps] == [7, 7, 11]
            assert [s["eth2"]["drops"] for s in snaps] == [{"rx_ring_full": n} for n in (7, 7, 11)]
            assert [s["eth1"]["rx_ring_drops"] for s in snaps] == [0, 0, 0]
            a.reset_counters()  # 3 more, logged: then 0 again
            assert a.snapshot()["ports"]["eth2"]["rx_ring_drops"] == 0
            a.snapshot()
            a.rx_overflow(time.monotonic())  # on exit (switch_agent.serve)
            a.close()
            events = [json.loads(line) for line in Path(d, "e.jsonl").read_text().splitlines()]
            drops = [(e["port"], e["reason"], e["queue"], e["count"]) for e in events
                     if e["ev"] == "drop"]
            assert drops == [("eth2", "rx_ring_full", None, n) for n in (7, 4, 3, 2)], mode


SANITIZED_CHILD = test_fast_pipeline.SANITIZED_CHILD[
    :test_fast_pipeline.SANITIZED_CHILD.index("from tests.unit")] + """
from tests.unit import test_fast_ring as t
for name, f in list(vars(t).items()):  # a warning adds __warningregistry__
    if name.startswith("test_") and callable(f) and name != "test_sanitized":
        f()
print("sanitized ok")
"""


def test_sanitized(asan_dir: Path, monkeypatch) -> None:
    """These tests against an ASan + UBSan build (as test_fast_pipeline runs its own)."""
    monkeypatch.setattr(test_fast_pipeline, "SANITIZED_CHILD", SANITIZED_CHILD)
    test_fast_pipeline.test_sanitized(asan_dir)
