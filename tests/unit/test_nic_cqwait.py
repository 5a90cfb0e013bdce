"""A control thread waiting in poll_cq (traffic.nic.ctl) is woken by the NIC's loop
only after an iteration that added a completion (traffic.nic.datapath, `Nic.step`): not
after every iteration, each of which would cost the loop a thread switch."""

import threading
import time

import topologies
from traffic.nic.ctl import NicControl
from traffic.nic.datapath import Nic
from traffic.nic.nicconfig import NicConfig
from traffic.workreq import WC, WCOpcode, WCStatus


def nic() -> Nic:
    fab = topologies.load("rail2x4")
    return Nic(NicConfig.for_gpu(fab, "h1g1", "/nonexistent", seed=1), open_sockets=False)


def wc(wr_id: int) -> WC:
    return WC(wr_id, WCStatus.SUCCESS, WCOpcode.RDMA_WRITE, 0, 7)


def test_waiters_are_woken_once_per_iteration_that_completed_something():
    n = nic()
    cq = n.cqs[n.create_cq()]
    woken = []
    real = n.cond.notify_all
    n.cond.notify_all = lambda: (woken.append(n.notified), real())
    with n.lock:
        n.waiters = 1  # as poll_cq while it waits
        for t in (1.0, 1.1, 1.2):
            n.step(t, rx=False)
        assert woken == []  # nothing completed: nobody woken
        cq.push(wc(1))
        n.step(1.3, rx=False)
        n.step(1.4, rx=False)
        assert woken == [1]
        cq.push(wc(2))
        cq.push(wc(3))
        n.step(1.5, rx=False)
        assert woken == [1, 3]
        n.waiters = 0
        cq.push(wc(4))
        n.step(1.6, rx=False)  # no waiter: no wake-up, the next waiter polls first
        assert woken == [1, 3]


def test_a_completion_pushed_outside_the_loop_wakes_at_the_next_iteration():
    n = nic()
    h = n.create_cq()
    ctl = NicControl.__new__(NicControl)  # poll_cq needs only the NIC (no socket)
    ctl.nic = n
    got = []

    def waiter():
        with n.lock:
            got.extend(ctl.poll_cq(h, 16, 30.0))

    t = threading.Thread(target=waiter)
    t.start()
    while True:
        with n.lock:
            if n.waiters:
                n.cqs[h].push(wc(9))  # e.g. a control thread's flush
                n.step(2.0, rx=False)
                break
    t.join(30.0)
    assert not t.is_alive() and [w["wr_id"] for w in got] == [9]
    assert got[0]["ts"] <= time.monotonic()  # when it was pushed (CQ.poll_stamped)
    assert n.notified == 1
