"""The C Nic.step (traffic/fast/nicstep.c) against the Python reference
(traffic/nic/datapath.py): NICs a and b joined through socketpairs with a relay between
them (which drops, CE-marks and holds frames, and injects PFC pauses, all seeded), each
stepped at the same fake times with the same `rx`, a WRITE each way and a SEND; every step
must return the same timeout (the same float) and rx_read, send the same frames (bytes,
order), and the runs end with the same counters, events, meter records (pacer, rx, rto,
cnp), CQ waiters' notifications, MR contents, CQ entries and QP state. The C receive and
transmit are called C to C (the socketpair ends are sockets), a retransmission timer fires
(the relay holds frames past the timeout), pauses stop the data priority. Also under ASan +
UBSan."""

import random
import socket
from unittest import mock

import pytest

from emucore.wire.pause import pause_frame
from tests.unit.test_fast_dcqcn import run_sanitized
from tests.unit.test_fast_nicrx import Meter, drain
from tests.unit.test_fast_nictx import mark_ce
from tests.unit.test_nic import connected
from traffic.fast import nicstep
from traffic.nic import datapath

C = nicstep.step("fast")
SIZE = 20 * 4096 + 300


class Cond:
    """A CQ waiters' condition that counts its notify_all calls."""

    def __init__(self):
        self.notified = 0

    def notify_all(self):
        self.notified += 1


def socketpair():
    x, y = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (x, y):
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return x, y


def scenario(seed, fn):
    """One run with Nic.step dispatching to `fn` (None: the Python); its trace."""
    rng = random.Random(seed)
    data = random.Random(seed).randbytes(SIZE)
    trace, answers = [], []

    def counted(nic, now, rx):
        answers.append(fn(nic, now, rx))
        return answers[-1]

    ticks = iter(range(10**9))
    clock = lambda: 1000.0 + next(ticks) * 1e-6  # noqa: E731 - the meter's done times
    with mock.patch.object(datapath, "STEP", None if fn is None else counted), \
            connected(SIZE, data, clock=clock, timeout_s=1e-6) as c:  # 1 ms lab (TDF 1000)
        a, b = c.a, c.b
        ends, peers, events = {}, {}, []
        for name, nic in (("a", a), ("b", b)):
            mine, peer = socketpair()
            nic.raw, nic.rx_stamps = mine, False
            nic.meter, nic.cond, nic.waiters = Meter(), Cond(), 1
            nic.ev.emit = lambda ev, t, _n=name, **kw: events.append((_n, ev, t, sorted(kw.items())))
            ends[name], peers[name] = nic, peer
        a.post_send(c.qa.qpn, [
            {"wr_id": 1, "local_addr": c.ma["addr"], "length": 12 * 4096 + 100,
             "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"], "rkey": c.mb["rkey"], "imm": 9},
            {"wr_id": 2, "local_addr": c.ma["addr"], "length": 2 * 4096, "lkey": c.ma["lkey"],
             "opcode": "send"}])
        b.post_recv(c.qb.qpn, [{"wr_id": 7, "addr": c.mb["addr"] + 14 * 4096,
                                "length": 3 * 4096, "lkey": c.mb["lkey"]}])
        b.post_send(c.qb.qpn, [{"wr_id": 3, "local_addr": c.mb["addr"], "length": 5 * 4096,
                                "lkey": c.mb["lkey"], "remote_addr": c.ma["addr"] + 4096,
                                "rkey": c.ma["rkey"]}])
        held = {"a": [], "b": []}  # frames toward a / b, delivered later
        now = 100.0
        for i in range(400):
            now += rng.choice((1e-6, 2e-5, 1e-4, 5e-4)) if rng.random() < 0.97 else 0.003
            name = rng.choice("ab")
            nic, other = ends[name], "b" if name == "a" else "a"
            rx = rng.random() < 0.8
            t = nic.step(now, rx)
            out = drain(peers[name])
            trace.append((i, name, now, rx, repr(t), type(t).__name__, nic.rx_read, out))
            for f in out:
                r = rng.random()
                if r < 0.05:
                    continue  # dropped
                if r < 0.15:
                    f = bytes(mark_ce(f))
                if r > 0.9:
                    held[other].append(f)
                else:
                    peers[other].send(f)
            if rng.random() < 0.1:
                for f in held[other]:
                    peers[other].send(f)
                held[other].clear()
            if rng.random() < 0.02:  # the data priority (3) paused at a or b, or resumed
                peers[other].send(pause_frame(b"\x02" * 6, 3, rng.choice((0, 50, 0xFFFF))))
        state = {}
        for name, nic in ends.items():
            state[name] = (sorted(nic.c.items()), nic.meter.got, nic.cond.notified, nic.notified,
                           nic.port_next, nic.rr,
                           [(q.qpn, q.next_t, q.blocked, q.ready_at, q.tx_frames, q.ce_rx, q.cnp_tx,
                             q.cnp_rx, q.ep.deadline, q.ep.requester.una, q.ep.requester.max_sent)
                            for q in nic.order],
                           [cq.poll(100) for cq in nic.cqs.values()], nic.pause.mask)
        state["mr"] = (bytes(c.sb.buf[:SIZE]),)
        for nic, peer in ((a, peers["a"]), (b, peers["b"])):
            nic.raw.close()
            peer.close()
    return trace, events, state, answers


@pytest.mark.parametrize("seed", range(6))
def test_c_step_is_the_python(seed):
    got, want = scenario(seed, C), scenario(seed, None)
    assert got[3] and all(a is not NotImplemented for a in got[3])  # the C ran every step
    assert got[0] == want[0]  # per step: timeout, rx_read, the frames sent
    assert got[1] == want[1]  # events
    assert got[2] == want[2]  # counters, meter records, notifications, QPs, CQs, MR


def test_scenarios_reach_timers_pauses_and_notifications():
    """What the comparison covers (the Python run): RTOs fired, pauses, completions."""
    seen = set()
    for seed in range(6):
        trace, events, state, _ = scenario(seed, None)
        seen |= {e[1] for e in events}
        for name in "ab":
            meter, notified = state[name][1], state[name][2]
            seen |= {w for _, _, w in meter}
            seen |= {"notify"} if notified else set()
            seen |= {"rx_read"} if any(t[6] for t in trace) else set()
    assert {"rto", "pacer", "cnp", "notify", "rx_read", "pause_start", "cnp_rx"} <= seen, seen


def test_what_the_c_cannot_do_changes_nothing():
    with connected(4096, bytes(4096)) as c:
        before = dict(c.a.c), c.a.port_next
        assert C(c.a, "100.0", True) is NotImplemented
        assert (dict(c.a.c), c.a.port_next) == before


SANITIZED_CHILD = """
from tests.unit import test_fast_nicstep as t
assert t.C is mod.step, "the sanitized build is not the one in use"
for seed in range(2):
    t.test_c_step_is_the_python(seed)
t.test_what_the_c_cannot_do_changes_nothing()
import gc; gc.collect()
print("sanitized ok")
"""


def test_sanitized(tmp_path):
    """The differential scenarios against an ASan + UBSan build, in a child Python."""
    run_sanitized(nicstep.MODULE, SANITIZED_CHILD, tmp_path)
