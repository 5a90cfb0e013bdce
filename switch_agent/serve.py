"""The agent's poll loop (thin I/O): one epoll over the port sockets, the control socket,
the SVIs' CPU ports (what the switch's kernel sends into a VLAN: switch_agent.cpuport) and a
netlink monitor; the kernel's routes and neighbours are re-read after a change
(docs/ARCHITECTURE.md "Planes and processes"). Runs until `agent.running` is cleared.

Deadlines (a shaper slot, a delay-line release, a timer) are kept to the microsecond:
`epoll.poll` takes whole milliseconds (CPython rounds a timeout up), and one 9216-byte
frame at 200 Gbps model is 0.74 ms lab at TDF 2000, the fidelity guard's bound. So the
loop sleeps in `select` on the epoll descriptor itself (readable when any registered
descriptor is: one descriptor, a microsecond timeout), then collects the events with a
non-blocking `epoll.poll(0)`; it asks the kernel for a 1 us timer slack
(emucore.rawsock.tighten_timer_slack). Nothing spins: with no deadline it blocks.

Each frame runs at its arrival: the port sockets stamp what they receive (SO_TIMESTAMPNS)
and a wake-up's frames from every port run in arrival order at their stamps; after a
wake-up that read frames the loop sleeps `arrivals.poll_step` without watching any
descriptor and then takes what came (switch_agent.arrivals: the rules, and C's loop
follows them too).

A fast agent (switch_agent.fastagent) whose port sockets take PACKET_MMAP rings runs
`serve_rings` instead: the loop is C's (switch_agent/fast/loop.h), Python runs only for
its own descriptors and deadlines, and it answers the metrics sampler's `counters` a
port at a time with C's loop running between the ports (`AgentControl.step`, `answer_gap`).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import select
import signal
import time

from pyroute2 import IPRoute

from emucore import rawsock
from switch_agent import control, kernel
from switch_agent.arrivals import arrival_order, bound_lab_s, poll_step, poll_until
from switch_agent.agent import Agent
from switch_agent.fastagent import SERVE_PYTHON, FastAgent

log = logging.getLogger("switch_agent")

RX_BUDGET = 64  # frames read from one socket per wake-up, for fairness between ports
RELOAD_DEBOUNCE_S = 0.05  # wait this long after a netlink event before re-reading routes
#: between two steps of a `counters` answer C's loop runs this fraction of the guard's
#: bound (`answer_gap`): a step (one port, 0.1-0.5 ms of CPU here) lags C's actions by its
#: own cost only, and C has at least that long again to catch up before the next one
ANSWER_GAP_FRACTION = 0.25
ANSWER_GAP_MAX_S = 1e-3  #: ... at most: a rail switch's answer stays ~10 ms at any TDF


def wait(ep: select.epoll, timeout: float) -> list[tuple[int, int]]:
    """The events of `ep` within `timeout` seconds (< 0 or inf: no limit), waking at the
    timeout to the microsecond (select's timeval) rather than epoll's millisecond."""
    if timeout < 0 or timeout == math.inf:
        return ep.poll(-1)
    if timeout > 0 and not select.select((ep.fileno(),), (), (), timeout)[0]:
        return []
    return ep.poll(0)


def discard(port, frame: bytes, now: float) -> None:
    """A switch that is down (Agent.set_admin) drops what still arrives."""
    port.rx_packets += 1
    port.rx_bytes += len(frame)
    port.drop("switch_down")


def answer_gap(cfg) -> float:
    """Lab seconds C's loop runs between two steps of a `counters` answer
    (`AgentControl.step`): ANSWER_GAP_FRACTION of the fidelity guard's bound, at most
    ANSWER_GAP_MAX_S."""
    return min(ANSWER_GAP_FRACTION * bound_lab_s(cfg), ANSWER_GAP_MAX_S)


def serve_rings(agent: FastAgent, ep: select.epoll, ctl, nl, ipr) -> None:
    """The fast agent's loop when its ports have rings (`FastAgent.open_rings`): C's loop
    (`Pipeline.serve`, switch_agent/fast/loop.h) runs until Python has something to do -
    the control socket, netlink, LLDP, a route reload, events to write, a signal (Python's
    signal wake-up descriptor is in the epoll set) - then Python does it."""
    serve_c, epfd, punted, ctl_fd, nl_fd = (agent.fast.c.serve, ep.fileno(), agent.punted,
                                            ctl.fileno(), nl.fileno())
    cpu = agent.cpu
    wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = signal.set_wakeup_fd(wakeup_w)
    ep.register(wakeup_r, select.EPOLLIN)
    watchdog: list = []
    sent: list = []
    reload_at = None
    clock = time.monotonic
    ctl.stepping, gap, step_at = True, answer_gap(agent.cfg), 0.0
    try:
        while agent.running:
            wake = agent.python_deadline(clock())
            if reload_at is not None and reload_at < wake:
                wake = reload_at
            if ctl.pending and step_at < wake:
                wake = step_at
            why, now = serve_c(epfd, wake, agent.admin_up, punted, watchdog, sent)
            agent.served(now, watchdog, sent)
            if why == SERVE_PYTHON:
                for fd, _ in ep.poll(0):  # a port's descriptor: C has read its ring
                    if fd == ctl_fd:
                        ctl.handle()
                    elif fd in ctl.reading:
                        ctl.readable(fd)
                    elif fd == nl_fd:
                        rawsock.drain(nl)
                        reload_at = now + RELOAD_DEBOUNCE_S
                    elif fd == wakeup_r:
                        while os.read(wakeup_r, 512) == 512:
                            pass
                    elif fd in cpu.socks:
                        cpu.read(fd, agent.from_kernel, now)
            if ctl.pending and clock() >= step_at:
                ctl.step()
                step_at = clock() + gap
            if reload_at is not None and clock() >= reload_at:
                agent.link_states(kernel.port_states(ipr), clock())
                agent.install_fib(*kernel.read_control_plane(ipr))
                reload_at = None
    finally:
        signal.set_wakeup_fd(previous)
        ep.unregister(wakeup_r)
        os.close(wakeup_r)
        os.close(wakeup_w)


def serve(agent: Agent | FastAgent) -> None:
    """Serve until SIGTERM/SIGINT (the signal handler clears `agent.running`); `agent`
    is the Python agent or, on the compiled data path, `switch_agent.fastagent.FastAgent`
    (its `backlog` is always true: C keeps its own, so every wake-up ends in `service`)."""
    name = agent.cfg.name
    ep = select.epoll()
    for fd in agent.by_fd:
        ep.register(fd, select.EPOLLIN)
    ctl = control.AgentControl(agent.cfg.control, agent)
    ep.register(ctl.fileno(), select.EPOLLIN)
    ctl.ep = ep  # a client's request line is waited for in the loop, not by it
    nl = rawsock.open_netlink_monitor()
    ep.register(nl.fileno(), select.EPOLLIN)
    cpu = agent.cpu
    for fd in cpu.socks:
        ep.register(fd, select.EPOLLIN)
    ipr = IPRoute()
    if not rawsock.tighten_timer_slack():
        log.warning("%s: cannot set the timer slack: wake-ups may be up to 50 us late", name)
    agent.install_fib(*kernel.read_control_plane(ipr))
    rings = isinstance(agent, FastAgent) and agent.rings and agent.open_rings(time.monotonic())
    reload_at = None
    log.info("%s: forwarding on %s (QoS %s, data path %s)", name, ", ".join(agent.ports),
             "on" if agent.qos else "off", agent.datapath)
    ctl.ready()
    by_fd = agent.by_fd
    on_frame = agent.on_frame
    woke = agent.woke
    clock, realtime = time.monotonic, time.time
    poll, polling = poll_step(agent.cfg), False
    for port in () if rings else by_fd.values():  # (a ring stamps its slots itself)
        rawsock.enable_rx_stamps(port.sock)  # refused: the frames run at their wake-up

    def read(port, batch: list, offset: float) -> bool:
        """Up to RX_BUDGET frames of `port` into `batch` as (arrival or None, (port,
        frame)); False when the socket is gone (teardown)."""
        recvmsg = port.sock.recvmsg
        for _ in range(RX_BUDGET):
            try:
                frame, anc, _, _ = recvmsg(65535, rawsock.RX_ANC)
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno == errno.ENETDOWN:  # reported once after the port went
                    port.drop("rx_netdown")  # down: it may come back
                    return True
                log.warning("%s: %s: %s", name, port.name, exc)
                return False
            batch.append((rawsock.arrival(anc, offset), (port, frame)))
        return True

    try:
        if rings:  # returns when the agent stops
            serve_rings(agent, ep, ctl, nl, ipr)
        while agent.running:
            now = clock()
            wake = agent.timers(now) if agent.admin_up else math.inf
            if agent.backlog:
                w = agent.service(now)
                if w is not None and w < wake:
                    wake = w
            if reload_at is not None and reload_at < wake:
                wake = reload_at
            try:
                if polling and poll > 0:  # frames came at the last wake-up
                    time.sleep(max(0.0, poll_until(now, wake, poll) - clock()))
                    events = ep.poll(0)
                else:
                    events = wait(ep, -1 if wake == math.inf else max(0.0, wake - clock()))
            except InterruptedError:
                continue
            lo, now = now, clock()  # the last step's time; the wake-up's
            woke()
            offset = now - realtime()  # the stamps' clock
            batch, others = [], []
            for fd, _ in events:
                port = by_fd.get(fd)
                if port is None:
                    others.append(fd)
                elif not read(port, batch, offset):
                    ep.unregister(fd)
                    del by_fd[fd]
            handle = on_frame if agent.admin_up else discard
            for t, (port, frame) in arrival_order(batch, lo, now):
                handle(port, frame, t)
            polling = bool(batch)
            for fd in others:  # after the frames, which ran at their (earlier) arrivals
                if fd == ctl.fileno():
                    ctl.handle()
                elif fd in ctl.reading:
                    ctl.readable(fd)
                elif fd in cpu.socks:
                    cpu.read(fd, agent.from_kernel, now)
                else:
                    rawsock.drain(nl)
                    reload_at = now + RELOAD_DEBOUNCE_S  # debounce bursts of netlink events
            if reload_at is not None and now >= reload_at:
                agent.link_states(kernel.port_states(ipr), clock())
                agent.install_fib(*kernel.read_control_plane(ipr))
                reload_at = None
    finally:
        ctl.close()
        ipr.close()
        nl.close()
        agent.rx_overflow(time.monotonic())  # the sockets' last drop counts, logged
        for p in agent.ports.values():
            if p.sock:
                p.sock.close()
        cpu.close()
        log.info("%s: stopped", name)
