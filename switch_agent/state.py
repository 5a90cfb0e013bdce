"""What the agent reports: counters for the metrics sampler and `show` (the contract with
`emu`), the `show` state dict and the rail VLANs' MAC table (ch.13 Fig 13-4), and the last
pause expiries written to the event log when it stops.

A mixin of `switch_agent.agent.Agent`.
"""

from __future__ import annotations

import time

from switch_agent.events import pause_events


class AgentState:
    """Reporting of the agent (mixed into `Agent`)."""

    def snapshot(self) -> dict:
        """Counters of every port (the contract with `emu` metrics and `show`); the
        event log is flushed (the metrics sampler asks every interval)."""
        now = time.monotonic()
        snap = {"switch": self.cfg.name, "t_lab": now, "uptime_s": now - self.started,
                "tdf": self.cfg.tdf, "qos": self.qos is not None,
                "ports": {p.name: p.counters(now) for p in self.ports.values()},
                "events": list(self.events[-20:]),
                "fidelity": {**self.meter.snapshot(), "cpu_s": time.process_time()},
                "lb": {"mode": self.lb.mode, "describe": self.lb.describe(),
                       "paths": self.balancer.paths(),
                       "flowlets": self.balancer.flowlet_counts(),
                       "untracked": self.balancer.untracked,
                       "flow_cache": {"flows": len(self.cache) + sum(map(len, self.fast.values())),
                                      "flushes": self.cache_flushes}}}
        if self.log.enabled:
            for p in self.ports.values():
                if p.pause.expired:  # expiries the counters noticed
                    pause_events(self.log, p, now)
            self.log.flush()
        return snap

    def close(self) -> None:
        """Write the pause expiries not yet noticed and close the event log (on exit)."""
        now = time.monotonic()
        if self.log.enabled:
            for p in self.ports.values():
                pause_events(self.log, p, now)
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
