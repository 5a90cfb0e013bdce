"""Control socket of the switch agent: one JSON request line in, one JSON reply out.

Requests: {"cmd": "ping"}, {"cmd": "counters"} (with "brief": true, only what the metrics
sampler reads: `AgentState.snapshot_steps`), {"cmd": "fib"}, {"cmd": "fidelity_reset"},
{"cmd": "show", "text": "show queuing interface eth3"} (NX-OS-like, `switch_agent.show`),
{"cmd": "mac_table"} (the rail VLANs' static MAC entries),
{"cmd": "set", "test_drop_rate": 0.01} (test hook), {"cmd": "reset"} (port counters and
the fidelity guard's lags), and the faults of issue 14: {"cmd": "admin", "state": "down"}
(switch down / up: `Agent.set_admin`), {"cmd": "degrade", "port": "eth5", "rate_model_bps",
"loss", "corrupt", "delay_model_s"} or {"cmd": "degrade", "port": "eth5", "restore": true}. The counters carry "fidelity": the agent's
emucore.fidelity.LagMeter snapshot plus "cpu_s", the process's CPU seconds, and "datapath":
"c" or "python" (switch_agent.fastagent).
Served from the agent's poll loop (no thread, so counters are read consistently). On
C's ring loop a `counters` request is answered a port at a time (`stepping`): each port's
counters are read at once and carry their own "t_lab", and C's loop runs between the
ports, so a sample stalls the switch for one port's reading instead of the whole answer
(docs/PERFORMANCE.md "What a sample costs the processes it asks"). Other requests are
answered at once, also between two steps: a `reset` or `degrade` there shows in the
ports read after it.
`request(path, payload)` (emucore.ctlsock) is the client used by `emu` and the tests.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import time
from collections.abc import Generator
from typing import TYPE_CHECKING

from emucore.ctlsock import LineServer, encode, error_reply, request, send
from switch_agent import show

if TYPE_CHECKING:  # the agent imports Scapy; clients of `request` need not
    from switch_agent.agent import Agent

__all__ = ["AgentControl", "request"]

log = logging.getLogger("switch_agent.control")


def counters_reply(steps: Generator[tuple[str, dict], None, dict]) -> Generator[None, None, bytes]:
    """The encoded `counters` reply (`encode({"ok": True, **snapshot})`, the ports last) of
    `AgentState.snapshot_steps`: a step per port, each port's counters encoded in its
    own step, and the rest of the snapshot and its encoding in the last."""
    parts = []
    while True:
        try:
            name, c = next(steps)
        except StopIteration as stop:
            snap = stop.value
            break
        parts.append(f"{json.dumps(name)}: {json.dumps(c)}")
        yield
    head = json.dumps({"ok": True, **{k: v for k, v in snap.items() if k != "ports"}})
    return f"{head[:-1]}, \"ports\": {{{', '.join(parts)}}}}}\n".encode()


class AgentControl(LineServer):
    """The agent's control socket at `path`: a non-blocking listener its poll loop
    serves (`handle`, from emucore.ctlsock.LineServer)."""

    def __init__(self, path: str, agent: Agent) -> None:
        super().__init__(path, backlog=16, blocking=False)
        self.agent = agent
        #: answer `counters` a port at a time (`defer`, `step`): the fast agent's loop
        #: (switch_agent.serve.serve_rings) runs C's loop between the steps
        self.stepping = False
        self.pending: list[tuple[socket.socket, Generator[None, None, bytes]]] = []

    def defer(self, conn: socket.socket, data: bytes) -> bool:
        """A `counters` request, when stepping: answered by `step`s."""
        if not self.stepping:
            return False
        try:
            req = json.loads(data or b"{}")
        except ValueError:
            return False  # answered at once, with the error
        if not (isinstance(req, dict) and req.get("cmd") == "counters"):
            return False
        self.pending.append((conn, counters_reply(
            self.agent.snapshot_steps(bool(req.get("brief"))))))
        return True

    def step(self) -> None:
        """One step of the oldest deferred `counters` answer; sent when it is complete."""
        conn, steps = self.pending[0]
        try:
            next(steps)
            return
        except StopIteration as stop:
            out = stop.value
        except Exception as exc:  # as `answer`: a failed request must not kill the agent
            out = encode(error_reply(exc))
        self.pending.pop(0)
        send(conn, out)

    def close(self) -> None:
        """`LineServer.close`; deferred answers are abandoned (their clients see EOF)."""
        for conn, _ in self.pending:
            conn.close()
        self.pending.clear()
        super().close()

    def reply(self, req: dict) -> dict:
        """The reply to one request: `dispatch`'s."""
        return self.dispatch(req)

    def dispatch(self, req: dict) -> dict:
        """Answer one request."""
        a = self.agent
        cmd = req.get("cmd")
        if cmd == "ping":
            return {"ok": True, "switch": a.cfg.name, "pid": os.getpid()}
        if cmd == "counters":
            return {"ok": True, **a.snapshot(brief=bool(req.get("brief")))}
        if cmd == "fib":
            return {"ok": True, "routes": [
                {"prefix": f"{ipaddress.ip_address(net)}/{plen}",
                 "nexthops": [list(h) for h in hops]}
                for plen in a.fib._lens for net, hops in a.fib._by_len[plen].items()]}
        if cmd == "mac_table":  # the rail VLANs' layer-2 entries, as data
            return {"ok": True, "entries": a.mac_table()}
        if cmd == "show":
            try:
                return {"ok": True, "text": show.dispatch(str(req.get("text", "")),
                                                          a.show_state())}
            except ValueError as exc:
                return {"ok": False, "error": str(exc)}
        if cmd == "set":
            if "test_drop_rate" in req:
                rate = float(req["test_drop_rate"])
                if not 0.0 <= rate < 1.0:
                    return {"ok": False, "error": f"test_drop_rate: must be in [0, 1), got {rate}"}
                a.drop_rate = rate
            return {"ok": True}
        if cmd == "admin":  # switch down / up (issue 14 faults)
            state = req.get("state")
            if state not in ("up", "down"):
                return {"ok": False, "error": f"state: 'up' or 'down', got {state!r}"}
            return {"ok": True, "dropped": a.set_admin(state == "up", time.monotonic())}
        if cmd == "degrade":  # a degraded link's egress (issue 14 faults)
            port = a.ports.get(str(req.get("port")))
            if port is None:
                return {"ok": False, "error": f"port: no port {req.get('port')!r}"}
            if req.get("restore"):
                port.restore()
                a.port_changed(port.name)
            else:
                try:
                    loss, corrupt = float(req.get("loss", 0)), float(req.get("corrupt", 0))
                    delay = float(req.get("delay_model_s", 0))
                    rate = req.get("rate_model_bps")
                    rate = float(rate) if rate is not None else None
                except (TypeError, ValueError) as exc:
                    return {"ok": False, "error": f"degrade: {exc}"}
                if not (0 <= loss < 1 and 0 <= corrupt < 1 and loss + corrupt < 1 and delay >= 0
                        and (rate is None or rate > 0)):
                    return {"ok": False, "error": "degrade: loss, corrupt in [0, 1), delay >= 0,"
                                                  " rate > 0"}
                port.degrade(a.td.lab_rate(rate) if rate is not None else None, loss, corrupt,
                             a.td.lab_time(delay), a.cfg.test_drop_seed)
                a.port_changed(port.name)
            a.event(f"{port.name}: {'restored' if req.get('restore') else 'degraded'} "
                    f"({json.dumps({k: v for k, v in req.items() if k != 'cmd'})})")
            return {"ok": True}
        if cmd == "fidelity_reset":  # the run's measurement window starts now
            a.reset_meter()
            return {"ok": True}
        if cmd == "reset":
            a.reset_counters()
            return {"ok": True}
        return {"ok": False, "error": f"unknown command {cmd!r}"}


