"""What the fast agent reports (the control socket's calls, switch_agent.control): the
counters and `show` of `switch_agent.state.AgentState`, from C's state.

`counters` and `show` keep their shapes and values: before answering, `sync` copies C's
state into the Python ports under the same attribute names (the counters the two sides
both move - rx, tx, drops - by C's change since the last copy, so a `reset` and the Python
side's own drops and LLDP frames still count), a port at a time (`sync_port`, so the
counters can be answered a port at a time between C's wake-ups: `snapshot_steps`), and
the fidelity guard is C's meter merged with the Python agent's (LLDP).

A mixin of `switch_agent.fastagent.FastAgent`; what it reads of it is declared at the top
of `FastState`.
"""

from __future__ import annotations

from collections.abc import Generator

from emucore import fidelity
from emucore.fidelity import BUCKET_EDGES
from switch_agent.agent import Agent
from switch_agent.state import finish

C = "c"  #: counters()["datapath"] of the fast agent
PORT_MOVED = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")  #: moved by both sides
QUEUE_COPIED = ("qbytes", "bytes", "avg", "enq_packets", "enq_bytes", "deq_packets",
                "deq_bytes", "marks", "max_qbytes", "drops", "sojourn_max", "sojourn_hist",
                "bin_seen", "bin_marked", "bin_dropped")  #: PortQueues: C's alone
INGRESS_COPIED = ("held", "max_held", "xoff_sent", "xon_sent", "headroom_drops", "refreshes")
PAUSE_COPIED = ("until", "since", "last_rx", "resumed_at", "paused_s", "pauses_rx",
                "resumes_rx", "mask", "next_expiry")


class FastState:
    """Reporting of the fast agent (mixed into `FastAgent`)."""

    # what the host class (switch_agent.fastagent.FastAgent) provides
    agent: Agent
    fast: object  # switch_agent.fast.pipeline.FastPipeline
    monotonic: bool
    py_ports: list  # the Python ports, in C's order
    moved: list[dict[str, int]]  # C's PORT_MOVED counters as last copied
    c_drops: list[dict[str, int]]
    fifo: list[list[int]]
    path_of: dict  # C's flow (cache, key) -> the balancer's tracked path

    def sync_paths(self) -> list:
        """The tracked paths' packets and bytes, from C's flows (`Balancer.paths`); the
        flows."""
        path_of, flows = self.path_of, self.fast.c.flows()
        for c, key, _, packets, nbytes in flows:
            p = path_of.get((c, key))
            if p is not None:
                p.packets, p.bytes = packets, nbytes
        return flows

    def sync(self) -> None:
        """Copy C's state into the Python ports (see the module docstring)."""
        self.sync_paths()
        for i in range(len(self.py_ports)):
            self.sync_port(i)

    def sync_port(self, i: int) -> None:
        """Port i's part of `sync`."""
        p = self.py_ports[i]
        s = self.fast.c.state(i)
        moved = self.moved[i]
        for k in PORT_MOVED:
            setattr(p, k, getattr(p, k) + s[k] - moved[k])
            moved[k] = s[k]
        last = self.c_drops[i]
        for k, n in s["drops"].items():
            if n != last.get(k, 0):
                p.drops[k] = p.drops.get(k, 0) + n - last.get(k, 0)
        self.c_drops[i] = s["drops"]
        p.shaper.lost_s = s["lost_s"]
        sq, pq = s["queues"], p.queues
        for k in QUEUE_COPIED:
            setattr(pq, k, sq[k])
        self.fifo[i] = sq["fifo"]
        si, ing = s["ingress"], p.ingress
        for k in INGRESS_COPIED:
            setattr(ing, k, si[k])
        ing.paused = [bool(x) for x in si["paused"]]
        for k in PAUSE_COPIED:
            setattr(p.pause, k, s["pause"][k])
        p.pause_tx, p.resume_tx, p.pfc_rx_frames = s["pause_tx"], s["resume_tx"], \
            s["pfc_rx_frames"]
        wd = p.watchdog
        if wd is not None:
            sw = s["watchdog"]
            wd.stormed = sw["stormed"]
            wd.storms_detected, wd.storms_restored = sw["storms_detected"], \
                sw["storms_restored"]
            wd.dropped = s["wd_dropped"]

    def meter_snapshot(self) -> dict:
        """C's lag meter and the Python agent's (LLDP, its control frames) as one."""
        return fidelity.merge((self.fast.meter().snapshot(), self.agent.meter.snapshot()))

    def snapshot(self, brief: bool = False) -> dict:
        """`AgentState.snapshot` of C's state; "datapath": "c"."""
        return finish(self.snapshot_steps(brief))

    def port_counters(self, p, now: float, brief: bool = False) -> dict:
        """`AgentState.port_counters` of C's state (`sync_port`), with the FIFOs' depths
        in packets (not in the brief ones)."""
        i = self.fast.index[p.name]
        self.sync_port(i)
        if brief:
            return p.brief(now)
        c = p.counters(now)
        for q, n in enumerate(self.fifo[i]):
            c["queues"][str(q)]["depth_packets"] = n
        return c

    def snapshot_steps(self, brief: bool = False) -> Generator[tuple[str, dict], None, dict]:
        """`AgentState.snapshot_steps` of C's state; "datapath": "c"."""
        flows = self.sync_paths()
        snap = yield from self.agent.snapshot_steps(brief)
        snap["fidelity"] = {**self.meter_snapshot(), "cpu_s": snap["fidelity"]["cpu_s"],
                            "wakeups": self.agent.wakeups + self.fast.c.loop_stats()[0]}
        snap["datapath"] = C
        if not brief:
            snap["lb"]["flow_cache"] = {"flows": len(flows), "flushes": self.fast.c.flushes()}
        return snap

    def show_state(self) -> dict:
        self.sync()
        return self.agent.show_state()

    def reset_meter(self) -> None:
        """`fidelity_reset`: both meters start a new window."""
        self.fast.c.set_meter(BUCKET_EDGES, self.monotonic)
        self.agent.meter.reset()

    def reset_counters(self) -> None:
        """`reset`: the port counters, as the Python agent's (C's changes count from
        here), and both meters."""
        self.sync()
        self.agent.reset_counters()
        self.reset_meter()

