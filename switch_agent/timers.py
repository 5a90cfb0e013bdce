"""The agent's timers: PFC pause refreshes, the PFC watchdog's polls (book ch.11, Examples
11-5 and 11-7) and LLDP/DCBX announcements - each recorded by the fidelity guard against
its deadline.

A mixin of `switch_agent.agent.Agent`. What it uses of the agent is declared at the top
of `AgentTimers`: attributes only (the ports, the timer deadlines, the ingress accounting,
the event sink); it calls no method the agent defines.
"""

from __future__ import annotations

import math

from emucore.fidelity import LagMeter
from switch_agent.dcbx import Dcbx
from switch_agent.events import EventSink
from switch_agent.ingress import IngressBuffers
from switch_agent.port import Port


class AgentTimers:
    """Timer-driven work of the agent (mixed into `Agent`)."""

    # what the host class (switch_agent.agent.Agent) provides
    ports: dict[str, Port]
    backlog: set[Port]
    buffers: IngressBuffers
    sink: EventSink
    meter: LagMeter
    dcbx: Dcbx | None
    lldp_ports: list[Port]
    wd_period: float
    next_wd: float
    lldp_period: float
    next_lldp: float

    def timers(self, now: float) -> float:
        """Pause refreshes, watchdog, LLDP; returns the next timer deadline."""
        nxt = math.inf
        record = self.meter.record
        for p in self.ports.values():
            ing = p.ingress
            if now >= ing.next_refresh:
                for due in ing.refresh_at:
                    if due <= now:
                        record(due, now, p.refresh_what)
                for prio in ing.tick(now):
                    p.send_ctrl(ing.pause_frames[prio], now)
                    p.pause_tx[prio] += 1
                    self.backlog.add(p)
                    self.sink.pfc_refresh(p, prio, ing.cfg.pause_quanta, now)
            if ing.next_refresh < nxt:
                nxt = ing.next_refresh
        if now >= self.next_wd:
            if self.next_wd > -math.inf:
                record(self.next_wd, now, "watchdog")
            self.next_wd = now + self.wd_period
            for p in self.ports.values():
                wd = p.watchdog
                if wd is None:
                    continue
                evs = wd.check(now, p.pause.paused_mask(now), p.queues.backlog_mask(),
                               p.pause.last_rx)
                for ev in evs:
                    self.sink.note(str(ev))
                    self.sink.watchdog(p, ev.kind == "storm", ev.priority, ev.action, now)
                    if now < p.eligible_at:  # a pause now ignored: frames may leave now
                        p.eligible_at = now
                    if ev.kind == "storm" and ev.action == "drop":
                        entries = p.queues.flush(ev.priority, "pfc_watchdog")
                        if p.queues.events:
                            self.sink.queues(p, now)
                        self.buffers.release_entries(entries, now)
                        wd.note_dropped(ev.priority, len(entries))
                    self.backlog.add(p)
                if (evs or p.pause.expired) and self.sink.enabled:  # ignored / obeyed again
                    self.sink.pauses(p, now)
        if now >= self.next_lldp:
            if self.next_lldp > -math.inf:
                record(self.next_lldp, now, "lldp")
            self.next_lldp = now + self.lldp_period
            self.send_lldp(now)
        return min(nxt, self.next_wd, self.next_lldp)

    def send_lldp(self, now: float) -> None:
        """Advertise ourselves with the DCBX TLVs of our QoS config on every port that
        transmits LLDP (not those of `lldp_off`)."""
        if self.dcbx is None:
            return
        for p in self.lldp_ports:
            self.dcbx.announce(p, now)
            self.backlog.add(p)
