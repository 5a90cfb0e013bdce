"""The agent's control-plane reactions: a new FIB from the kernel (reconvergence, `fib`
events), carrier changes of its ports and the switch-down / switch-up fault (issue 14; book
ch.10 "single points of failure"), QoS sanity warnings, and the event list `show` prints.

A mixin of `switch_agent.agent.Agent`, kept apart so the data-plane module stays one
idea. What it uses of the agent is declared at the top of `AgentAdmin`: attributes only
(the ports, the FIB and flow cache, the ingress accounting, the event sink); it calls no
method the agent defines.
"""

from __future__ import annotations

import math
import socket
import time

from emucore.lbconfig import LoadBalance
from emucore.qos.qosconfig import QosConfig
from emucore.timedil import TimeDilation
from switch_agent.agentconfig import AgentConfig
from switch_agent.balancer import Balancer
from switch_agent.events import EventSink
from switch_agent.flowcache import FlowCache
from switch_agent.forward import Fib
from switch_agent.ingress import IngressBuffers
from switch_agent.port import Port


class AgentAdmin:
    """Control-plane reactions of the agent (mixed into `Agent`)."""

    # what the host class (switch_agent.agent.Agent) provides
    cfg: AgentConfig
    td: TimeDilation
    qos: QosConfig | None
    ports: dict[str, Port]
    lb: LoadBalance
    fib: Fib
    flowcache: FlowCache
    balancer: Balancer
    local: set[bytes]
    port_ip: dict[str, bytes]
    fib_table: dict | None
    backlog: set[Port]
    buffers: IngressBuffers
    sink: EventSink
    admin_up: bool
    next_wd: float
    next_lldp: float

    # -- control plane -------------------------------------------------------
    def install_fib(self, routes, neighbours, local_ips) -> None:
        """Replace the FIB (after a kernel change); empties the flow cache."""
        port_macs = {p.name: p.cfg.mac for p in self.ports.values()}
        self.fib = Fib(routes, neighbours, port_macs, self.cfg.ecmp_seed, self.cfg.svi, local_ips,
                       hash_fields=self.lb.hash, order=self.lb.order)
        self.local = set(self.fib.local)
        by_dev = {dev: socket.inet_aton(ip) for ip, dev in dict(local_ips).items()} \
            if isinstance(local_ips, dict) else {}
        self.port_ip = {}
        for p in self.ports.values():
            svi = next((d for d, t in self.cfg.svi.items() if p.name in t.values()), None)
            addr = by_dev.get(svi) if svi else by_dev.get(p.name)
            if addr:
                self.port_ip[p.name] = addr
        table = {r.prefix: r.nexthops for r in routes}
        if self.fib_table is not None and table != self.fib_table:  # reconvergence
            old = self.fib_table
            changed = sorted(k for k in set(table) | set(old) if table.get(k) != old.get(k))
            self.sink.fib({k: [h[1] for h in table.get(k, ())] for k in changed},
                          time.monotonic())
        self.fib_table = table
        self.flowcache.clear()
        self.balancer.groups.clear()  # rebuilt from the new next hops (flows keep their counts)

    def link_states(self, states: dict[str, bool], now: float) -> None:
        """The kernel's carrier of our ports (after a netlink change): a port that went
        down loses what it had queued or in flight (`link` events, docs/EVENTS.md)."""
        for name, up in states.items():
            p = self.ports.get(name)
            if p is None or p.link_up == up:
                continue
            p.link_up = up
            lost = 0 if up else self.flush_port(p, "link_down", now)
            self.event(f"{name}: link {'up' if up else 'down'}" +
                       (f", {lost} frames dropped" if lost else ""))
            self.sink.link(name, up, lost, now)

    def flush_port(self, p: Port, reason: str, now: float) -> int:
        """Drop every frame queued on or in flight from port p; how many."""
        n = 0
        for q in range(8):
            entries = p.queues.flush(q, reason)
            n += len(entries)
            self.buffers.release_entries(entries, now)
        n += len(p.inflight)
        p.inflight.clear()
        return n

    def set_admin(self, up: bool, now: float) -> int:
        """Switch down (issue 14 `switch ... down`): stop forwarding, drop every frame
        queued or in flight and stop sending LLDP and PFC; up: forward again. Returns
        the frames dropped. The serve loop discards what arrives while down."""
        dropped = 0
        if not up:
            for p in self.ports.values():
                dropped += self.flush_port(p, "switch_down", now)
            for p in self.ports.values():  # after the releases (which may queue XONs)
                p.ctrl.clear()
            self.backlog.clear()
        else:  # timers missed while down are not lateness: due again from now
            self.next_wd = self.next_lldp = -math.inf
        self.admin_up = up
        self.event(f"switch {'up' if up else 'down'}" + (f": {dropped} frames dropped"
                                                          if dropped else ""))
        self.sink.switch_admin(up, dropped, now)
        return dropped

    def event(self, text: str) -> None:
        """Log and remember an event (shown by `show` and the counters)."""
        self.sink.note(text)

    def check_qos(self) -> None:
        """Warn (log + event) about dubious QoS settings for these ports, among them a
        PFC headroom below what a port's link rate and cable delay need."""
        links = {p.name: (p.cfg.model_bps, self.td.model_time(p.delay))
                 for p in self.ports.values() if p.ingress.cfg.no_drop}
        for w in self.qos.validate(list(self.ports), links):
            self.event(f"QoS {self.qos.name}: {w}")
