"""The agent's timers: PFC pause refreshes, the PFC watchdog's polls (book ch.11, Examples
11-5 and 11-7) and LLDP/DCBX announcements - each recorded by the fidelity guard against
its deadline.

A mixin of `switch_agent.agent.Agent`.
"""

from __future__ import annotations

import math

from switch_agent.events import pause_events, queue_events


class AgentTimers:
    """Timer-driven work of the agent (mixed into `Agent`)."""

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
                    self.log.emit("pfc_tx", now, port=p.name, prio=prio,
                                  quanta=ing.cfg.pause_quanta, refresh=True)
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
                    self.event(str(ev))
                    self.log.emit("wd_storm" if ev.kind == "storm" else "wd_restore", now,
                                  port=p.name, prio=ev.priority, action=ev.action)
                    if now < p.eligible_at:  # a pause now ignored: frames may leave now
                        p.eligible_at = now
                    if ev.kind == "storm" and ev.action == "drop":
                        entries = p.queues.flush(ev.priority, "pfc_watchdog")
                        if p.queues.events:
                            queue_events(self.log, p, now)
                        for frame, tag, _queued in entries:
                            if tag is not None:
                                self.release(tag, self.p_by_tos[frame[15]], len(frame), now)
                        wd.note_dropped(ev.priority, len(entries))
                    self.backlog.add(p)
                if (evs or p.pause.expired) and self.log.enabled:  # ignored / obeyed again
                    pause_events(self.log, p, now)
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

    # -- reporting -----------------------------------------------------------
