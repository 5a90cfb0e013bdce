"""What the agent reports: counters for the metrics sampler and `show` (the contract with
`emu`), the `show` state dict and the rail VLANs' MAC table (ch.13 Fig 13-4), and the last
pause expiries written to the event log when it stops.

A mixin of `switch_agent.agent.Agent`. What it reads of the agent is declared at the top
of `AgentState`: attributes only; it calls no method the agent defines.
"""

from __future__ import annotations

import time
from collections.abc import Generator

from emucore import rtsched
from emucore.eventlog import EventLog
from emucore.fidelity import LagMeter
from emucore.lbconfig import LoadBalance
from emucore.qos.qosconfig import QosConfig
from switch_agent.agentconfig import AgentConfig
from switch_agent.balancer import Balancer
from switch_agent.events import EventSink
from switch_agent.flowcache import FlowCache
from switch_agent.port import Port


def finish(steps: Generator) -> object:
    """What a generator returns, its steps run at once (`AgentState.snapshot`)."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


class AgentState:
    """Reporting of the agent (mixed into `Agent`)."""

    # what the host class (switch_agent.agent.Agent) provides
    cfg: AgentConfig
    qos: QosConfig | None
    ports: dict[str, Port]
    events: list[str]
    meter: LagMeter
    lb: LoadBalance
    balancer: Balancer
    flowcache: FlowCache
    log: EventLog
    sink: EventSink
    started: float
    #: the data path the agent's frames take (switch_agent.fastagent.FastAgent: "c")
    datapath = "python"
    #: the poll loop's wake-ups since start (switch_agent.serve: `woke`), in the counters'
    #: "fidelity" (with the ports' rx_packets: frames per wake-up, `emu bench tdf`)
    wakeups = 0

    def woke(self) -> None:
        """The poll loop woke up (switch_agent.serve)."""
        self.wakeups += 1

    def snapshot(self, brief: bool = False) -> dict:
        """Counters of every port (the contract with `emu` metrics and `show`); the
        event log is flushed (the metrics sampler asks every interval). `brief`: see
        `snapshot_steps`."""
        return finish(self.snapshot_steps(brief))

    def port_counters(self, p: Port, now: float, brief: bool = False) -> dict:
        """One port's part of the snapshot (`Port.counters`, or `Port.brief`; the compiled
        path's first copies C's state, switch_agent.faststate)."""
        return p.brief(now) if brief else p.counters(now)

    def snapshot_steps(self, brief: bool = False) -> Generator[tuple[str, dict], None, dict]:
        """`snapshot` a port at a time: yields (port name, its counters) after each port,
        read at its own "t_lab", and returns the snapshot. The fast agent's loop answers
        the sampler so, running C's loop between the steps (switch_agent.control).
        `brief`: what the metrics sampler reads between two full snapshots - the ports'
        `Port.brief`, the fidelity guard's and the tracked paths' counts ("brief": true)."""
        now = time.monotonic()
        self.rx_overflow(now)
        ports = {}
        for p in self.ports.values():
            t = time.monotonic()
            c = ports[p.name] = self.port_counters(p, t, brief)
            c["t_lab"] = t
            if self.sink.enabled and p.pause.expired:  # expiries the counters noticed
                self.sink.pauses(p, t)
            yield p.name, c
        fid = {**self.meter.snapshot(), "cpu_s": time.process_time(), "wakeups": self.wakeups}
        if brief:
            snap = {"switch": self.cfg.name, "t_lab": now, "datapath": self.datapath,
                    "brief": True, "ports": ports, "fidelity": fid,
                    "lb": {"paths": self.balancer.paths()}}
        else:
            snap = {"switch": self.cfg.name, "t_lab": now, "uptime_s": now - self.started,
                    "tdf": self.cfg.tdf, "datapath": self.datapath, "sched": rtsched.current(),
                    "qos": self.qos is not None,
                    "ports": ports, "events": list(self.events[-20:]), "fidelity": fid,
                    "lb": {"mode": self.lb.mode, "describe": self.lb.describe(),
                           "paths": self.balancer.paths(),
                           "flowlets": self.balancer.flowlet_counts(),
                           "untracked": self.balancer.untracked,
                           "flow_cache": {"flows": len(self.flowcache),
                                          "flushes": self.flowcache.flushes}}}
        self.log.flush()
        return snap

    def rx_overflow(self, now: float) -> None:
        """The frames each port's socket had no room for since the last reading (the
        kernel's count, `Port.rx_overflow`): counted as the port's drops and logged, read at
        every `snapshot`, `reset` and on exit (`switch_agent.serve`, before the sockets
        close)."""
        for p in self.ports.values():
            n = p.rx_overflow()
            if n:
                self.sink.rx_ring_full(p, n, now)

    def reset_meter(self) -> None:
        """The fidelity guard starts a new measurement window (`fidelity_reset`)."""
        self.meter.reset()

    def reset_counters(self) -> None:
        """`reset`: the ports' rx/tx and drop counters, and the fidelity guard's lags
        (it measures the same window)."""
        self.rx_overflow(time.monotonic())  # logged; the counts start again from here
        for p in self.ports.values():
            p.rx_packets = p.rx_bytes = p.tx_packets = p.tx_bytes = 0
            p.drops.clear()
        self.meter.reset()

    def port_changed(self, name: str) -> None:
        """A port's link was degraded or restored (the compiled path pushes it to C)."""

    def close(self) -> None:
        """Write the pause expiries not yet noticed and close the event log (on exit)."""
        now = time.monotonic()
        if self.sink.enabled:
            for p in self.ports.values():
                self.sink.pauses(p, now)
        self.log.close(now)

    def show_state(self) -> dict:
        """The state dict of `switch_agent.show`."""
        now = time.monotonic()
        lldp = {}
        for p in self.ports.values():
            if p.neighbor is not None:
                lldp[p.name] = {**p.neighbor.to_dict(), "age_s": round(now - p.neighbor_seen, 1)}
        return {"switch": self.cfg.name, "qos": self.qos.to_dict() if self.qos else None,
                "ports": {p.name: p.show_state(now) for p in self.ports.values()},
                "lldp": lldp, "mac_table": self.mac_table()}

    def mac_table(self) -> list[dict]:
        """The layer-2 entries of the rail VLANs: {vlan, mac, port} (static, ch.13)."""
        return [{"vlan": self.ports[ifname].vlan, "mac": mac, "port": ifname}
                for table in self.cfg.svi.values() for mac, ifname in table.items()
                if self.ports[ifname].vlan is not None]
