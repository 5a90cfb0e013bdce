"""The running agent with its per-frame work in C (issue 30; docs/DATAPATH.md): which data
path an agent takes (`choose`, from `emucore.datapath`'s mode), and `FastAgent`, what
`switch_agent.serve` drives when it is the C one.

`FastAgent` holds the Python `Agent` (with its sockets: the control plane) and a
`switch_agent.fast.pipeline.FastPipeline` built on it. Frames go to C; a flow C misses,
an expired TTL and LLDP come back to the Python agent (FastPipeline). C's frames leave
through the port sockets from C (`Pipeline.set_fd`: a failed send is dropped, counted and
logged as `Agent.flush` does), one `service` per wake-up; LLDP announcements and what
the Python MAC control queues leave through the Python agent's `service`, as before.
Pause refreshes and the watchdog's poll run in C (`FastPipeline.timers`), LLDP in Python;
the priorities LLDP/DCBX make PFC active on (`pfc_mode auto`) are pushed to C as they change.

The control socket sees the Python agent (attributes it does not find here come from
there); `counters` and `show` keep their shapes and values (`switch_agent.faststate`: C's
state copied into the Python ports). A route reload, a degraded link and a
fidelity reset go to both, and so do the flushes of a switch or link going down
(`flush_port`). What C does not implement is refused, never approximated; the test drop
hook runs in C. The event log is the Python agent's: what C's stages noted is
written through the Python agent's `EventSink` after every call into C (`FastPipeline.drain`).

Unless $EMU_FAST_RINGS=0, the poll loop is C's too (`open_rings`, `python_deadline`,
`punted`, `served`; `switch_agent.serve.serve_rings`): PACKET_MMAP rings on the port
sockets, wake-ups on a grid of GRID_FRACTION of the fidelity guard's bound (`grid_step`).
"""

from __future__ import annotations

import errno
import logging
import math
import os

from emucore import datapath
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig
from switch_agent.arrivals import bound_lab_s, poll_step
from switch_agent.faststate import C, PORT_MOVED, FastState
from switch_agent.forward import flow_key

log = logging.getLogger("switch_agent")

PYTHON = "python"  #: counters()["datapath"] of the Python agent (C's: faststate.C)
#: C's loop rounds its next wake-up up to a grid of this fraction of the fidelity guard's
#: bound (`grid_step`), so deadlines close together share one wake-up: an action is made
#: at most 1/10 of the bound later by it, 9/10 of the bound is left for the wake-up's
#: own lateness, so a run the guard passes without the grid passes with it unless its
#: p99 lag was already within 10 % of the bound (DATAPATH budget: 5-10 % of the bound)
GRID_FRACTION = 0.1
#: loop.h's answers: one of Python's descriptors is readable; Python's deadline came
SERVE_PYTHON, SERVE_DEADLINE = 0, 1
#: the fast agent runs C's loop on PACKET_MMAP rings; $EMU_FAST_RINGS=0: Python's poll
#: loop on its port sockets (as before the rings)
RINGS = os.environ.get("EMU_FAST_RINGS", "1") != "0"
MAC_CONTROL = b"\x01\x80\xc2"  #: the link-local group C's control frames (PFC) go to


def grid_step(cfg: AgentConfig) -> float:
    """The wake-up grid of C's loop, lab seconds: GRID_FRACTION of the fidelity guard's
    bound as this switch's ports see it (`switch_agent.arrivals.bound_lab_s`)."""
    return GRID_FRACTION * bound_lab_s(cfg)


def choose(mode: str) -> str:
    """The agent's data path for a datapath mode: C for `fast` and `auto`, Python for
    `python` (under `auto`, `build` still takes Python for a configuration C refuses)."""
    return PYTHON if datapath.mode(mode) == "python" else C


def build(cfg: AgentConfig, mode: str | None = None, open_sockets: bool = True,
          monotonic: bool = True) -> Agent | FastAgent:
    """The agent `serve` drives: the Python `Agent`, or a `FastAgent` when `mode` (else
    $EMU_DATAPATH) chooses C. `fast` with a configuration C does not implement raises
    `Unsupported` naming the field, before any socket is opened; `auto` then runs the
    Python agent and logs why. A missing build is NotBuilt under both."""
    if choose(mode) == PYTHON:
        return Agent(cfg, open_sockets=open_sockets)
    datapath.require_built("switch_agent.fast._pipeline")
    from switch_agent.fast import pipeline  # only built when asked for
    try:
        pipeline.check_config(cfg)
        pipeline.check_agent(Agent(cfg, open_sockets=False), pfc_auto=True)  # no sockets
    except pipeline.Unsupported as exc:
        if datapath.mode(mode) == "fast":
            raise
        log.info("%s: data path python (auto): %s", cfg.name, exc)
        return Agent(cfg, open_sockets=open_sockets)
    return FastAgent(Agent(cfg, open_sockets=open_sockets), monotonic)


def flow_cache_key(frame: bytes) -> tuple[int, bytes]:
    """The C flow cache's (cache, key) of a routed frame, as `FastPipeline.flows` names
    them (`switch_agent.flowcache`: 0 TCP, 1 UDP by addresses and ports; 2 the rest)."""
    if frame[14] == 0x45 and frame[23] in (6, 17):
        return (0 if frame[23] == 6 else 1, frame[26:38])
    return 2, flow_key(frame)


class FastAgent(FastState):
    """The Python agent as control plane, its per-frame work in C."""

    datapath = C
    #: C keeps its own backlog: `serve` calls `service` on every wake-up
    backlog = True
    #: `serve` runs C's loop on PACKET_MMAP rings (`open_rings`) when the sockets take them
    rings = RINGS

    def __init__(self, agent: Agent, monotonic: bool = True) -> None:
        from switch_agent.fast.pipeline import FastPipeline
        self.agent = agent
        self.fast = FastPipeline(agent.cfg, control=agent, monotonic=monotonic, pfc_auto=True)
        self.monotonic = monotonic
        self.ports = agent.ports
        self.by_fd = agent.by_fd
        self.cfg = agent.cfg
        self.py_ports = [agent.ports[n] for n in self.fast.names]
        self.moved = [dict.fromkeys(PORT_MOVED, 0) for _ in self.py_ports]  # C's, last copied
        self.c_drops: list[dict[str, int]] = [{} for _ in self.py_ports]
        self.fifo: list[list[int]] = [[0] * 8 for _ in self.py_ports]
        self.out: list = []
        for i, p in enumerate(self.py_ports):  # C sends on the port sockets itself
            if hasattr(p.sock, "fileno"):
                self.fast.c.set_fd(i, p.sock.fileno())
        self.pfc_masks = [self.fast.push_ingress(n) for n in self.fast.names]
        #: the control plane's flushes (switch down, a link down) flush C's queues too
        self.py_flush_port, agent.flush_port = agent.flush_port, self.flush_port
        agent.port_counters = self.port_counters  # the snapshot's ports: C's state
        #: C's flow (cache, key) -> the balancer's tracked path its decision made
        self.path_of: dict[tuple[int, bytes], object] = {}
        self.decide, self.fast.decide = self.fast.decide, self.tracked_decide

    def tracked_decide(self, frame: bytes, now: float) -> None:
        """`FastPipeline.decide`, noting the path the balancer tracks for the flow."""
        tracked = self.agent.balancer.tracked
        n = len(tracked)
        self.decide(frame, now)
        if len(tracked) > n:
            self.path_of[flow_cache_key(frame)] = tracked[-1]

    def __getattr__(self, name: str):  # the control plane's attributes and methods
        return getattr(self.agent, name)

    # -- the poll loop's calls (switch_agent.serve) ----------------------------------
    @property
    def admin_up(self) -> bool:
        return self.agent.admin_up

    @property
    def running(self) -> bool:
        return self.agent.running

    @running.setter
    def running(self, value: bool) -> None:
        self.agent.running = value

    def on_frame(self, port, frame: bytes, now: float) -> None:
        """`FastPipeline.on_frame`; after an LLDP frame, the priorities DCBX made PFC
        active on (`pfc_mode auto`) are pushed to C."""
        if self.fast.on_frame(port.name, frame, now) is not None:
            self.push_pfc(port)

    def from_kernel(self, svi: str, frame: bytes, now: float) -> None:
        """`Agent.from_kernel`, queued through C (`FastPipeline.from_kernel`)."""
        self.fast.from_kernel(svi, frame, now)

    def punted(self, i: int, frame: bytes, now: float, miss: int) -> None:
        """A frame C's loop handed back (`Pipeline.serve`): as `on_frame` after C's `miss`."""
        port = self.py_ports[i]
        if self.fast.missed(port.name, frame, now, miss) is not None:
            self.push_pfc(port)

    def push_pfc(self, port) -> None:
        i = self.fast.index[port.name]
        ing = port.ingress
        if self.pfc_masks[i] != sum(1 << k for k in range(8) if ing.enabled[k]):
            self.pfc_masks[i] = self.fast.push_ingress(port.name)

    # -- C's own loop on PACKET_MMAP rings (switch_agent/fast/loop.h) ------------------
    def open_rings(self, now: float) -> bool:
        """TPACKET_V2 RX and TX rings on every data port's socket; False (nothing changed)
        when a socket refuses them. What the sockets received before goes to `on_frame`;
        the Python agent's own sends (LLDP) go through C's TX ring from now on."""
        from switch_agent.fast.pipeline import RingSocket
        c = self.fast.c
        for i, p in enumerate(self.py_ports):
            try:
                c.open_ring(i)
            except (OSError, ValueError) as exc:
                if i:  # the rings of the ports before stay: a broken start, said so
                    raise
                log.warning("%s: no PACKET_MMAP rings (%s): Python's poll loop", self.cfg.name,
                            exc)
                return False
            sock = p.sock
            while True:
                try:
                    frame = sock.recv(65535)
                except OSError:
                    break
                self.on_frame(p, frame, now)
            p.sock = RingSocket(sock, c, i)
        c.set_grid(grid_step(self.cfg))
        c.set_poll(poll_step(self.cfg))
        log.info("%s: C's poll loop on PACKET_MMAP rings (wake-up grid %.1f us, poll %.1f us)",
                 self.cfg.name, grid_step(self.cfg) * 1e6, poll_step(self.cfg) * 1e6)
        return True

    def python_deadline(self, now: float) -> float:
        """LLDP's timer and the Python agent's own control frames (`timers`, `service`
        without C's): when Python must run next."""
        a = self.agent
        wake = self.lldp_timer(now) if a.admin_up else math.inf
        if a.backlog:
            w = a.service(now)
            if w is not None and w < wake:
                wake = w
        return wake

    def served(self, now: float, watchdog: list, sent: list) -> None:
        """After C's loop returned: its events written, its watchdog's noted, frames of
        ports without a ring sent (`service`'s)."""
        if self.fast.logging:
            self.fast.drain()
        if watchdog:
            self.fast.note_watchdog(watchdog, now)
            watchdog.clear()
        if sent:
            self.send(sent, now)

    def timers(self, now: float) -> float:
        """C's timers (pause refreshes, the watchdog), then LLDP's (`AgentTimers.timers`)."""
        return min(self.fast.timers(now), self.lldp_timer(now))

    def lldp_timer(self, now: float) -> float:
        """LLDP's timer (`AgentTimers.timers`): announce when due; the next time it is."""
        a = self.agent
        if now >= a.next_lldp:
            if a.next_lldp > -math.inf:
                a.meter.record(a.next_lldp, now, "lldp")
            a.next_lldp = now + a.lldp_period
            a.send_lldp(now)
        return a.next_lldp

    def service(self, now: float) -> float | None:
        """C's `service`, its frames sent on the port sockets (`Agent.flush`'s send and
        its errors), then the Python agent's control frames; the next wake time."""
        out = self.out
        wake = self.fast.c.service(now, out)
        self.send(out, now)
        if self.fast.logging:
            self.fast.drain()
        if self.agent.backlog:
            w = self.agent.service(now)
            if w is not None and (wake is None or w < wake):
                wake = w
        return wake

    def send(self, out: list, now: float) -> None:
        """C's frames for the ports without a descriptor (a test's sockets), sent here."""
        ports = self.py_ports
        for i, frame in out:
            p = ports[i]
            try:
                p.sock.send(frame)
            except OSError as exc:  # C counted it sent: it was dropped
                reason = "tx_error" if exc.errno != errno.ENOBUFS else "tx_nobufs"
                p.drop(reason)
                p.tx_packets -= 1
                p.tx_bytes -= len(frame)
                if frame[:3] != MAC_CONTROL:  # a data frame (C's control frames: PFC)
                    self.agent.sink.wire_drop(p, reason, self.agent.queue_of(frame), now)
        out.clear()

    def install_fib(self, routes, neighbours, local_ips) -> None:
        """Both flow caches emptied together (`FastPipeline.install_fib`); the paths
        of the flows forgotten keep their counts, as in Python."""
        self.sync_paths()
        self.path_of.clear()
        self.fast.install_fib(routes, neighbours, local_ips)

    def port_changed(self, name: str) -> None:
        """A degraded or restored link (the Python port computed it): C runs it."""
        self.fast.push_link(name)

    def flush_port(self, p, reason: str, now: float) -> int:
        """`AgentAdmin.flush_port` on both sides: C's queues and delay line, and what
        the Python port holds; how many frames."""
        n = self.fast.c.flush_port(self.fast.index[p.name], reason, now)
        if self.fast.logging:
            self.fast.drain()
        return n + self.py_flush_port(p, reason, now)

    def set_admin(self, up: bool, now: float) -> int:
        """`AgentAdmin.set_admin` (its flushes reach C through `flush_port`), then C's
        control frames and backlog emptied (down) or its watchdog timer restarted (up)."""
        dropped = self.agent.set_admin(up, now)
        if up:
            self.fast.c.switch_up()
        else:
            self.fast.c.switch_down()
        return dropped

    @property
    def drop_rate(self) -> float:
        return self.fast.drop_rate

    @drop_rate.setter
    def drop_rate(self, rate: float) -> None:
        """The test hook (`switch_agent.testhook`), run in C (`FastPipeline.set_drop_rate`)."""
        self.fast.set_drop_rate(rate)
