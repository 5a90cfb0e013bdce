"""The switch agent's per-frame pipeline in C (`switch_agent/fast/pipeline.c`, built as
`_pipeline`), built from the same `AgentConfig` and QoS config as the Python agent and
driven like it: `on_frame(port, frame, now)`, `service(now)` (issue 30; docs/DATAPATH.md).
Given a port's socket (`Pipeline.set_fd`), C sends on it itself; given PACKET_MMAP rings
on it too (`open_ring`, switch_agent/fast/ring.h), `Pipeline.serve` is the agent's poll
loop (switch_agent/fast/loop.h, driven by `switch_agent.fastagent` and `serve`).

The C code mirrors, under the same names, `switch_agent.agent.Agent.on_frame` / `admit` /
`enqueue` / `service` / `flush`, `forward.route_rewrite`, the classifier's tables
(`emucore.qos.classify`), `emucore.qos.pfc.IngressPfc.admit` / `release` with the pause
and resume frames of `switch_agent.ingress.IngressBuffers`, `emucore.qos.wred` (the same
draws: each port's `random.Random` state is handed to C, which runs CPython's Mersenne
Twister), `switch_agent.queues.PortQueues` / `Drr` and `switch_agent.shaper.Shaper`
(book ch.11, ch.12). tests/unit/test_fast_pipeline.py holds the two equal, also under
ASan + UBSan.

Python stays the control plane: a `switch_agent.agent.Agent` built without sockets holds
the FIB, the neighbours and the load balancer. A flow the C cache misses is decided there
(`FlowCache.decide`) and installed; an expired TTL is counted in C and answered here
(`Agent.time_exceeded`'s ICMP, queued through C); a received PFC frame pauses the egress
in C (`MacControl.on_frame`, `emucore.qos.pfc.EgressPause`); any other link-local frame
(LLDP, CBFC) goes to the control plane's `MacControl`, never approximated. The configuration
the C stages do not implement is refused (`Unsupported`, naming the field): trimming, LLR, CBFC, flowlet and spray load balancing, PFC mode auto (it needs
LLDP/DCBX) unless the caller pushes DCBX's outcome (`push_ingress`, as
`switch_agent.fastagent` does). Pause refreshes and the watchdog's poll run in C (`timers`);
LLDP announcements stay the caller's; the lag meter (`emucore.fidelity.LagMeter`) records
what C did; a degraded link (`degrade`, `restore`) loses and corrupts frames with the
Python's draws; the test drop hook (`set_drop_rate`, `switch_agent.testhook`) draws
its die in C from the Python's `random.Random(test_drop_seed)` state. Not here yet: LLR, CBFC, trimming (refused).

The event log (docs/EVENTS.md): C notes the events of its stages where the Python notes
them (`switch_agent.events.EventSink`'s calls, the queues' noted events and the pauses'
expiries) in a buffer of (kind, port, fields) records; `drain`, after every call into C,
writes them through the control plane's same `EventSink` and `EventLog`, so the file is
the Python agent's, record for record.

Measured against `emu.observe.calibrate.time_frames` with `time_frames` below (the routed
book-QoS frame; figures in the commit that added `run_frames`).
"""

from __future__ import annotations

import importlib
import random
import time
from pathlib import Path

from emucore import cbuild
from emucore.eventlog import model_us
from emucore.fidelity import BUCKET_EDGES, LagMeter
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig
from switch_agent.forward import time_exceeded_reply
from switch_agent.watchdog import WatchdogEvent

MODULE = "switch_agent.fast._pipeline"

try:  # the compiled half of this module, beside it
    _pipeline = importlib.import_module(MODULE)
except ImportError as e:
    raise ImportError(f"{MODULE} is not built: run ./setup.sh (or python -m emucore.cbuild)") from e
if Path(_pipeline.__file__) == cbuild.target(MODULE) and not cbuild.is_current(MODULE):
    raise ImportError(f"{MODULE} is not built from today's sources: run ./setup.sh")

LINK_LOCAL = "link_local"  #: on_frame's answer for a frame the Python MAC control took
#: pipeline.c's event kinds (its enum EV_*), in order
(EV_QDROP, EV_CE_FIRST, EV_WRED, EV_HEADROOM, EV_XOFF, EV_XON, EV_REFRESH, EV_PFC_RX,
 EV_PAUSE_START, EV_PAUSE_END, EV_WD, EV_CNP, EV_WIRE_DROP, EV_TEST_HOOK) = range(14)
PAUSE_END_HOW = ("expiry", "resume", "watchdog")  #: EV_PAUSE_END's b


class Unsupported(ValueError):
    """A configuration the C pipeline does not implement (the message names the field)."""


def check_config(cfg: AgentConfig) -> None:
    """Raise Unsupported for the first field of `cfg` the C pipeline does not implement."""
    q = cfg.qos or {}
    refused = (("qos.trim", bool(q.get("trim"))), ("qos.llr", bool(q.get("llr"))),
               ("qos.cbfc", bool(q.get("cbfc"))))
    for name, bad in refused:
        if bad:
            raise Unsupported(f"{name}: not implemented by the C pipeline")


def check_agent(agent: Agent, pfc_auto: bool = False) -> None:
    """Raise Unsupported for what the agent built from the config that C does not run
    (`pfc_auto`: PFC mode auto is run, its caller pushing DCBX's outcome, `push_ingress`)."""
    if agent.lb.mode != "ecmp":
        raise Unsupported(f"lb.mode: {agent.lb.mode!r} not implemented by the C pipeline "
                          "(flow ECMP only)")
    for p in agent.ports.values():
        if p.pfc_mode == "auto" and not pfc_auto:
            raise Unsupported(f"qos.interfaces[{p.name}].pfc_mode: 'auto' needs LLDP/DCBX, "
                              "not in the C pipeline")
        if p.queues.trim_q >= 0:
            raise Unsupported("qos.trim: not implemented by the C pipeline")


class FastPipeline:
    """The C pipeline of one switch and the Python control plane that feeds it."""

    def __init__(self, cfg: AgentConfig, control: Agent | None = None,
                 monotonic: bool = True, pfc_auto: bool = False) -> None:
        """`control`: the Python agent to take the tables from (default: one built from
        `cfg` without sockets); `monotonic`: frames sent are stamped by the monotonic
        clock for the lag meter, as `Agent.clock` does (False: the `now` of `service`,
        a fake clock's); `pfc_auto`: see `check_agent`."""
        check_config(cfg)
        self.agent = control if control is not None else Agent(cfg, open_sockets=False)
        check_agent(self.agent, pfc_auto)
        ports = list(self.agent.ports.values())
        self.names = [p.name for p in ports]
        self.index = {p.name: i for i, p in enumerate(ports)}
        a = self.agent
        self.c = c = _pipeline.Pipeline(len(ports), a.td.tdf, bytes(a.q_by_tos), bytes(a.p_by_tos),
                                        a.mac_control.qos_on)
        for i, p in enumerate(ports):
            c.set_port(i, p.mac, -1 if p.vlan is None else p.vlan, p.shaper.rate_Bps,
                       p.shaper.burst_s, p.delay, p.pause.model_bps)
            pq = p.queues
            for q in range(8):
                tier = pq.tier_of[q]
                w = pq.wred[q]
                kind = 0 if tier is None else 1 if tier is pq.weighted else 2
                c.set_queue(i, q, pq.limit[q], kind, 0 if tier is None else tier.quantum[q],
                            None if w is None else (w.min_bytes, w.max_bytes, w.max_prob,
                                                    w.weight, w.ecn))
            c.set_strict(i, tuple(pq.strict))
            c.set_rng(i, tuple(pq.rng.__self__.getstate()[1]))
            self.push_ingress(p.name)
            wd = p.watchdog
            if wd is not None:
                c.set_watchdog(i, wd.watched, wd.detect_s, wd.restore_s, wd.cfg.action == "drop",
                               a.wd_period)
        c.set_meter(BUCKET_EDGES, monotonic)
        self.tables()
        #: the event log is open: C notes its stages' events, `drain` writes them
        self.logging = a.sink.enabled
        c.set_events(self.logging)
        self.ev_ports = ports
        self.drop_rate = 0.0
        self.drop_seeded = False
        self.set_drop_rate(cfg.test_drop_rate)

    def set_drop_rate(self, rate: float) -> None:
        """`testhook.DropRate`: the test hook's drop fraction (0: off). Its die,
        `random.Random(test_drop_seed)`, is handed to C when first set above 0 and kept
        (its draws go on) while the rate is 0, as the Python hook's."""
        state = None
        if rate and not self.drop_seeded:
            state = tuple(random.Random(self.agent.cfg.test_drop_seed).getstate()[1])
            self.drop_seeded = True
        self.c.set_test_drop(rate, state)
        self.drop_rate = rate

    def drain(self) -> None:
        """Write the events C noted since the last call through the agent's EventSink
        (the EV_* kinds of pipeline.c: (kind, port, a, b, v, t, x))."""
        sink = self.agent.sink
        emit, ports = sink.emit, self.ev_ports
        for kind, i, a, b, v, t, x in self.c.events():
            p = ports[i]
            if kind == EV_QDROP:
                emit("drop", t, port=p.name, queue=a, reason=_pipeline.QUEUE_DROPS[b])
            elif kind == EV_CE_FIRST:
                emit("ce_first", t, port=p.name, queue=a, depth=v)
            elif kind == EV_WRED:
                emit(("wred_min", "wred_max")[b], t, port=p.name, queue=a,
                     dir="up" if x else "down", depth=v)
            elif kind == EV_HEADROOM:
                sink.drop(p, a, "headroom_overflow", t)
            elif kind == EV_XOFF:
                sink.xoff(p, a, v, p.ingress.cfg.pause_quanta, t)
            elif kind == EV_XON:
                sink.xon(p, a, v, t)
            elif kind == EV_REFRESH:
                sink.pfc_refresh(p, a, p.ingress.cfg.pause_quanta, t)
            elif kind == EV_PFC_RX:
                emit("pfc_rx", t, port=p.name, prio=a, quanta=v)
            elif kind == EV_PAUSE_START:
                emit("pause_start", t, port=p.name, prio=a, until=model_us(x, sink.log.td))
            elif kind == EV_PAUSE_END:
                emit("pause_end", t, port=p.name, prio=a, how=PAUSE_END_HOW[b])
            elif kind == EV_WD:
                sink.watchdog(p, b == 1, a, p.watchdog.cfg.action, t)
            elif kind == EV_CNP:
                sink.cnp_fwd(p, a, x, t)
            elif kind == EV_TEST_HOOK:
                sink.drop(p, a, "test_hook", t)
            else:  # EV_WIRE_DROP
                sink.wire_drop(p, _pipeline.PORT_DROPS[b], a, t)

    def push_ingress(self, port: str) -> int:
        """The port's ingress PFC settings, as the control plane's port has them (the
        priorities PFC is active on change with DCBX); their mask."""
        ing = self.agent.ports[port].ingress
        mask = sum(1 << k for k in range(8) if ing.enabled[k])
        self.c.set_ingress(self.index[port], mask, ing.xoff, ing.xon, ing.drop_above,
                           ing.refresh_s, tuple(map(bytes, ing.pause_frames)),
                           tuple(map(bytes, ing.resume_frames)))
        return mask

    def tables(self) -> None:
        """Push the agent's MAC, local-address and layer-2 tables; forget every flow."""
        a = self.agent
        self.c.set_tables(tuple(a.router_macs), tuple(a.dlb_macs), tuple(a.local),
                          tuple((mac, self.index[p.name]) for mac, p in a.l2.items()))
        self.c.clear_flows()

    def install_fib(self, routes, neighbours, local_ips) -> None:
        """`Agent.install_fib` on the control plane, then the C tables (flows forgotten)."""
        self.agent.install_fib(routes, neighbours, local_ips)
        self.tables()

    def on_frame(self, port: str, frame: bytes, now: float) -> str | None:
        """`Agent.on_frame`: None when handled in C (or its ICMP here); LINK_LOCAL for an
        LLDP or CBFC frame, which C counted received and the control plane's MAC control
        took (`MacControl.on_frame`: neighbours, DCBX; its drops are that port's)."""
        return self.missed(port, frame, now, self.c.on_frame(self.index[port], frame, now))

    def missed(self, port: str, frame: bytes, now: float, r: int) -> str | None:
        """`on_frame` after C's answer `r` (HANDLED or a MISS_*; also the frames C's own
        loop hands back, `Pipeline.serve`): a flow decided here and run again in C, an
        expired TTL answered, a link-local frame to the MAC control."""
        if r == _pipeline.MISS_FLOW:
            self.decide(frame, now)
            r = self.c.on_frame(self.index[port], frame, now)
        if self.logging:
            self.drain()
        if r == _pipeline.MISS_TTL:
            self.time_exceeded(port, frame, now)
        elif r == _pipeline.MISS_LINK_LOCAL:
            self.agent.mac_control.on_frame(self.agent.ports[port], frame, now)
            return LINK_LOCAL
        return None

    def decide(self, frame: bytes, now: float) -> None:
        """`FlowCache.add` for the C cache: the flow's decision made by the control plane."""
        a = self.agent
        route = a.flowcache.decide(a.fib, frame, now)
        if route.path is not None:
            self.c.install(frame, self.index[route.path.port.name], route.path.l2, -1)
        elif route.drop is not None:
            self.c.install(frame, -1, b"", _pipeline.PORT_DROPS.index(route.drop))
        else:  # check_agent refused the modes that balance per packet
            raise Unsupported("lb.mode: a balanced route reached the C pipeline")

    def from_kernel(self, svi: str, frame: bytes, now: float) -> None:
        """`Agent.from_kernel`: the switch kernel's frame into a VLAN, queued through C."""
        a = self.agent
        if len(frame) < 16 or not a.admin_up:
            return
        prio = a.prio_of(frame)
        for out in a.cpu.targets(svi, frame):
            self.c.enqueue(self.index[out.name], 0, frame, now, prio)
        if self.logging:
            self.drain()

    def time_exceeded(self, port: str, frame: bytes, now: float) -> None:
        """`Agent.time_exceeded`: the ICMP Time Exceeded, queued through C."""
        a = self.agent
        reply = time_exceeded_reply(a.fib, a.port_ip.get(port), frame)
        if reply is not None:
            out = reply[1]
            self.c.enqueue(self.index[reply[0]], 0, out, now, a.prio_of(out))
            if self.logging:
                self.drain()

    def timers(self, now: float) -> float:
        """`AgentTimers.timers` but LLDP (the caller's, `Agent.send_lldp`) and the lag
        meter: pause refreshes and the PFC watchdog's poll in C, its events noted here as
        the Python notes them; the next deadline."""
        events: list = []
        deadline = self.c.timers(now, events)
        if self.logging:
            self.drain()
        self.note_watchdog(events, now)
        return deadline

    def note_watchdog(self, events: list, now: float) -> None:
        """The watchdog's storms and restores C's timers found, noted as Python notes them."""
        for storm, i, prio in events:
            wd = self.agent.ports[self.names[i]].watchdog
            self.agent.sink.note(str(WatchdogEvent("storm" if storm else "restore",
                                                   self.names[i], prio, wd.cfg.action, now,
                                                   wd.td.model_time(now))))

    def service(self, now: float, sent: list) -> float | None:
        """`Agent.service`: the frames sent go to `sent` as (port name, frame); the next
        wake time."""
        out: list = []
        wake = self.c.service(now, out)
        if self.logging:
            self.drain()
        names = self.names
        sent.extend((names[i], f) for i, f in out)
        return wake

    def degrade(self, port: str, lab_bps: float | None, loss: float, corrupt: float,
                extra_delay_lab_s: float, seed: int = 1) -> None:
        """`Port.degrade` (the control plane's port computes it; C runs it): the rate,
        the delay, and the loss and corruption with the same draws."""
        p = self.agent.ports[port]
        p.degrade(lab_bps, loss, corrupt, extra_delay_lab_s, seed)
        self.push_link(port)

    def restore(self, port: str) -> None:
        """`Port.restore`: the nominal rate and delay, no loss."""
        self.agent.ports[port].restore()
        self.push_link(port)

    def push_link(self, port: str) -> None:
        p = self.agent.ports[port]
        imp = p.impair
        self.c.set_degrade(self.index[port], p.shaper.rate_Bps, p.delay,
                           imp.loss if imp else 0.0, imp.corrupt if imp else 0.0,
                           tuple(imp.random.__self__.getstate()[1]) if imp else None)

    def meter(self) -> LagMeter:
        """The lag meter of what C did (`Agent.meter`: frames and control frames sent,
        pause refreshes, watchdog polls; not LLDP, the caller's)."""
        m = LagMeter(self.agent.td)
        m.count, m.max_s, m.hist, port, kind = self.c.meter()
        if kind >= 0:
            p = self.agent.ports[self.names[port]] if port >= 0 else None
            m.worst_what = (p.tx_what, p.ctrl_what, p.refresh_what, "watchdog")[kind] \
                if p is not None else "watchdog"
        return m

    def state(self, port: str) -> dict:
        """The port's state under the Python stages' attribute names."""
        return self.c.state(self.index[port])

    def flows(self) -> list[tuple]:
        """The cached flows: (cache 0 TCP / 1 UDP / 2 other, key, port name or None,
        packets, bytes)."""
        return [(c, k, self.names[p] if p >= 0 else None, n, b)
                for c, k, p, n, b in self.c.flows()]


class RingSocket:
    """A port socket with PACKET_MMAP rings: a send goes through C's TX ring (a socket with
    a TX ring sends from nothing else); the rest is the socket's."""

    def __init__(self, sock, c, i: int) -> None:
        self.sock, self.ring_send, self.i = sock, c.ring_send, i

    def send(self, frame) -> int:
        return self.ring_send(self.i, frame)

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


def time_frames(fast: FastPipeline, frame: bytes, n: int, port: str = "eth1",
                clock=time.perf_counter, in_c: bool = False) -> float:
    """Seconds per frame through the C pipeline, driven as `emu.observe.calibrate.
    time_frames` drives the Python agent: `n` frames at time 0, a service every 16 -
    each call from Python, or (`in_c`) the same loop run inside C (`run_frames`)."""
    c, i, sent = fast.c, fast.index[port], []
    on_frame, service = c.on_frame, c.service
    if on_frame(i, frame, 0.0) == _pipeline.MISS_FLOW:  # the flow's decision, untimed
        fast.decide(frame, 0.0)
    service(0.0, sent)
    t0 = clock()
    if in_c:
        c.run_frames(i, frame, n)
        return (clock() - t0) / n
    for k in range(n):
        on_frame(i, frame, 0.0)
        if k & 15 == 15:
            service(0.0, sent)
            sent.clear()
    service(0.0, sent)
    return (clock() - t0) / n
