"""The C Nic.run (traffic/fast/nicstep.c `run`) against the Python loop of
traffic/nic/datapath.py: its next wake-up is traffic.nic.wakeup.next_wake's to the bit; two
NICs joined by a socketpair, each loop in a thread, move a WRITE with immediate each way and
end with the same memory, completions and counters as under the Python loop; the loop counts
its wake-ups, stops on `running` + wake(), hands a step's exception and a signal handler's
exception to its caller with the lock released; what it does not take (no socket, a patched
select, another kind of lock) answers NotImplemented having changed nothing. Also under
ASan + UBSan."""

import importlib
import math
import random
import select
import signal
import socket
import threading
import time
from unittest import mock

import pytest

from tests.unit.test_fast_dcqcn import run_sanitized
from tests.unit.test_nic import connected
from traffic.fast import nicstep
from traffic.nic import datapath, wakeup

RUN = nicstep.run("fast")
C = importlib.import_module(nicstep.MODULE)
SIZE = 24 * 4096 + 300
#: a's WRITE: the first A bytes of its MR into b's; b's: its last SIZE - A (zeros, never
#: written by a) into the same place of a's, after what a sends (no byte read while written)
A = 21 * 4096 + 300


def _wakes():
    rng = random.Random(5)
    rows = [(10.0, 0.5, 0.25, True), (10.0, 0.25, 0.25, True), (10.0, 0.2, 0.25, True),
            (10.0, 0.5, 0.0, True), (10.0, 0.5, 0.25, False), (10.25, 1.0, 0.25, True),
            (0.0, 3e-4, 1e-4, True), (1e5 + 1e-5, 0.05, 2.05e-4, True), (7.0, 0.0, 0.1, True),
            (123456.789, 0.05, -1.0, True), (1.0, math.inf, 0.1, True)]
    for _ in range(300):
        grid = rng.choice((0.0, 1e-4, 2.05e-4, 8.2e-4, 0.5 * 3.3e-4))
        rows.append((rng.uniform(0, 2e5), rng.choice((rng.uniform(0, 5 * grid or 1e-3), 0.05)),
                     grid, rng.random() < 0.7))
    return rows


def test_next_wake_is_the_pythons():
    for now, timeout, grid, polling in _wakes():
        want = wakeup.next_wake(now, timeout, grid, polling)
        got = C.next_wake(now, timeout, grid, polling)
        assert (got == want or math.isnan(got) and math.isnan(want)), (now, timeout, grid, polling)
        assert type(got) is float


def _joined(c):
    """a.raw and b.raw: the two ends of one socketpair (a's frames reach b and back)."""
    x, y = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (x, y):
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    c.a.raw, c.b.raw = x, y
    return x, y


def _wait_cq(nic, cq, n, until):
    got = []
    while len(got) < n and time.monotonic() < until:
        with nic.lock:
            got += nic.cqs[cq].poll(n - len(got))
        time.sleep(0.002)
    return got


def write_both_ways(run):
    """A WRITE with immediate each way between two NICs in threads, each loop `run` (None:
    the Python's); what the run ends with."""
    data = random.Random(3).randbytes(SIZE)
    answers = []

    def loop(nic):
        with mock.patch.object(datapath, "RUN", None):  # tighten_timer_slack, then ours
            answers.append(run(nic) if run is not None else nic.run())

    with connected(SIZE, data) as c:
        x, y = _joined(c)
        c.a.post_send(c.qa.qpn, [{"wr_id": 1, "local_addr": c.ma["addr"], "length": A,
                                  "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"],
                                  "rkey": c.mb["rkey"], "imm": 11}])
        c.b.post_send(c.qb.qpn, [{"wr_id": 2, "local_addr": c.mb["addr"] + A,
                                  "length": SIZE - A, "lkey": c.mb["lkey"],
                                  "remote_addr": c.ma["addr"] + A, "rkey": c.ma["rkey"],
                                  "imm": 12}])
        c.a.post_recv(c.qa.qpn, [21])
        c.b.post_recv(c.qb.qpn, [22])
        threads = [threading.Thread(target=loop, args=(n,)) for n in (c.a, c.b)]
        for t in threads:
            t.start()
        until = time.monotonic() + 60
        wa, wb = _wait_cq(c.a, c.ca, 2, until), _wait_cq(c.b, c.cb, 2, until)
        for n in (c.a, c.b):
            n.running = False
            n.wake()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        out = {"answers": answers, "wakeups": (c.a.wakeups, c.b.wakeups),
               "locked": (c.a.lock.locked(), c.b.lock.locked()),
               "b_mem": bytes(c.sb.buf[:SIZE]),
               "wcs": sorted(((w.wr_id, w.status, w.opcode, w.byte_len, w.imm) for w in wa + wb),
                             key=repr),
               "qps": [(q.tx_frames, q.ep.requester.una) for q in (c.qa, c.qb)],
               "c": [dict(n.c) for n in (c.a, c.b)],
               "data": data}
        x.close()
        y.close()
    return out


def test_the_c_loop_moves_writes_as_the_python_loop():
    got, want = write_both_ways(RUN), write_both_ways(None)
    assert got["answers"] == [None, None] and want["answers"] == [None, None]  # the C ran
    assert got["b_mem"] == got["data"][:A] + bytes(SIZE - A) and want["b_mem"] == got["b_mem"]
    assert len(got["wcs"]) == 4 and got["wcs"] == want["wcs"]
    assert got["qps"] == want["qps"]
    assert got["c"] == want["c"]
    assert min(got["wakeups"]) > 0 and got["locked"] == (False, False)


def _idle_nic():
    """A NIC with nothing to send (its loop sleeps 0.05 s a wake-up) and a socket as raw."""
    cm = connected(4096, bytes(4096))
    c = cm.__enter__()
    x, y = _joined(c)
    return cm, c, (x, y)


def _close(cm, socks):
    for s in socks:
        s.close()
    cm.__exit__(None, None, None)


def test_running_false_and_wake_stop_the_loop_which_counts_its_wake_ups():
    cm, c, socks = _idle_nic()
    try:
        t = threading.Thread(target=lambda: c.a.__setattr__("answer", RUN(c.a)))
        t.start()
        deadline = time.monotonic() + 30
        while c.a.wakeups < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        c.a.running = False
        c.a.wake()
        t.join(30)
        assert not t.is_alive() and c.a.answer is None
        assert c.a.wakeups >= 2 and not c.a.lock.locked()
    finally:
        _close(cm, socks)


def _raised(fn, nic):
    try:
        fn(nic)
    except Exception as e:  # noqa: BLE001 - what the loop let through
        return type(e), str(e)
    return None


def test_an_exception_in_the_step_reaches_the_caller_with_the_lock_released():
    got = []
    for fn in (RUN, None):
        cm, c, socks = _idle_nic()
        try:
            c.a.pause = None  # the step's pause.paused_mask(now): AttributeError
            with mock.patch.object(datapath, "RUN", None):
                got.append(_raised(fn or datapath.Nic.run, c.a))
            assert not c.a.lock.locked()
        finally:
            _close(cm, socks)
    assert got[0] == got[1] and got[0][0] is AttributeError, got


def test_a_signal_handlers_exception_ends_the_loop():
    """The handler runs in the main thread while the loop waits in select (EINTR)."""
    class Stop(Exception):
        pass

    def handler(*_):
        raise Stop("alarm")

    cm, c, socks = _idle_nic()
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.12)
        with pytest.raises(Stop, match="alarm"):
            RUN(c.a)
        assert c.a.wakeups >= 1 and not c.a.lock.locked()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        _close(cm, socks)


class _Select:
    def select(self, *args):
        return select.select(*args)


def test_what_the_c_loop_does_not_take_answers_not_implemented_changing_nothing():
    cm, c, socks = _idle_nic()
    try:
        a = c.a
        for patch in (mock.patch.object(a, "raw", None),
                      mock.patch.object(a, "lock", threading.RLock()),
                      mock.patch.object(a, "grid", 1),
                      mock.patch.object(datapath, "select", _Select()),
                      mock.patch.object(datapath, "next_wake", lambda *x: wakeup.next_wake(*x))):
            with patch:
                before = (a.wakeups, dict(a.c), a.running)
                assert RUN(a) is NotImplemented
                assert (a.wakeups, dict(a.c), a.running) == before
        assert not a.lock.locked()
    finally:
        _close(cm, socks)


SANITIZED_CHILD = """
from tests.unit import test_fast_nicrun as t
assert t.RUN is mod.run, "the sanitized build is not the one in use"
t.test_next_wake_is_the_pythons()
got = t.write_both_ways(t.RUN)
assert got["answers"] == [None, None], got["answers"]
assert got["b_mem"] == got["data"][:t.A] + bytes(t.SIZE - t.A)
t.test_running_false_and_wake_stop_the_loop_which_counts_its_wake_ups()
t.test_an_exception_in_the_step_reaches_the_caller_with_the_lock_released()
t.test_a_signal_handlers_exception_ends_the_loop()
t.test_what_the_c_loop_does_not_take_answers_not_implemented_changing_nothing()
import gc; gc.collect()
print("sanitized ok")
"""


def test_sanitized(tmp_path):
    """The loop's tests against an ASan + UBSan build, in a child Python."""
    run_sanitized(nicstep.MODULE, SANITIZED_CHILD, tmp_path)
