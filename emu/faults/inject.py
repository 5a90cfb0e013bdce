"""Carry out a fault schedule on a live fabric (issue 14; thin I/O around emu.faults.plan).

`FaultRunner(fnet, steps)` is a thread started with the workload; its clock starts at
the workload's first data frame (a NIC's first transmitted frame, after the NICs started
and connected), and each fault happens at its model time x TDF after that, in the
namespaces of the nodes it touches:

* link / nic down, up: both ends administratively down (each end then has no carrier)
  or up again, with pyroute2 in each end's namespace. The kernel flushes a downed
  port's routes and permanent neighbours; on the way up they are put back (`replace`).
* after every change of the set of failed links, every switch's routes are recomputed
  on the fabric without them (emu.faults.plan) and pushed: routes replaced, rail subnets
  no longer reachable withdrawn. The agents follow their kernels (`fib` events).
* switch down, up: the agent stops forwarding (`admin` control request) and its links
  go down; up is the reverse.
* degrade, restore: the agents at the link's switch ends change that port's egress
  (`degrade` control request; a host end has no agent, so a host link is degraded in
  the switch -> host direction only).
* storm: PFC XOFF frames (quanta 65535) for the priority from the GPU NIC's port,
  re-sent every half pause time, until `for` runs out or `storm ... stop`; pause: one.
  They are sent from a raw socket in the host namespace, with the NIC's source MAC,
  as a malfunctioning NIC would (ch.11 "PFC storm").

The actions inside a namespace are emu.realise.nodeops', reached through `fnet.node_ops(node)`:
in this process for a node here, through its server's part for a node on another
server (emu.cluster.net, issue 17).

Every fault is written to RUNDIR/events/faults.jsonl (`fault` events: the model time it
happened, how late it was) and kept in `applied`; the faults report of a run reads
them with the agents' `link` and `fib` events (emu.faults.reconverge).
"""

from __future__ import annotations

import logging
import threading
import time

from emu.observe import reach
from emu.faults.plan import FaultState, Step, compare_reach
from emu.realise.netplan import plan_node
from emucore.eventlog import EventLog
from emucore.wire.ether import mac_bytes
from emucore.wire.pause import MAX_QUANTA, pause_frame

log = logging.getLogger("emu.faults.inject")

QUANTUM_BITS = 512  # a PFC quantum is 512 bit times (IEEE 802.1Qbb)
TRIGGER_POLL_S = 0.02


class FaultRunner:
    """Run `steps` against `fnet` (an emu.realise.net.FabricNet) from `start()` on."""

    def __init__(self, fnet, steps: tuple[Step, ...]) -> None:
        self.fnet = fnet
        self.fabric = fnet.fabric
        self.td = fnet.td
        self.steps = steps
        self.state = FaultState(self.fabric)
        #: rail subnets every switch may route (withdrawn ones are deleted)
        self.managed = {s.name: {r.dst for r in plan_node(self.fabric, s.name).routes}
                        for s in self.fabric.switches()}
        self.applied: list[dict] = []
        self.errors: list[str] = []
        self.t0 = 0.0
        self.trigger = None
        self.t0_given: float | None = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.storms: dict[str, threading.Event] = {}  # gpu -> stop flag
        self.storm_threads: list[threading.Thread] = []
        path = (str(fnet.run_dir / "events" / "faults.jsonl")
                if fnet.run_dir is not None else None)
        if path:
            (fnet.run_dir / "events").mkdir(parents=True, exist_ok=True)
        self.log = EventLog(path, "faults", self.td)

    # -- lifecycle -----------------------------------------------------------
    def start(self, trigger=None, t0: float | None = None) -> None:
        """Start the schedule: its clock starts at lab time `t0` (a lab's flows' t0), or
        now, or when `trigger()` first returns true (polled every TRIGGER_POLL_S of lab
        time, e.g. a NIC sent its first frame)."""
        self.trigger = trigger
        self.t0_given = t0
        self.thread = threading.Thread(target=self.run, name="faults", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop: faults not yet due are skipped (and listed as such), storms end."""
        self.stopping.set()
        for flag in self.storms.values():
            flag.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        for t in self.storm_threads:
            t.join(timeout=5)
        done = {a["text"] for a in self.applied}
        for st in self.steps:
            if st.fault.text not in done:
                self.applied.append({"text": st.fault.text, "at_s": st.fault.at_s,
                                     "skipped": "the workload ended first"})
        self.log.close(time.monotonic())

    def run(self) -> None:
        while self.trigger is not None and not self.stopping.is_set():
            try:
                if self.trigger():
                    break
            except Exception as exc:  # a NIC not answering yet
                log.debug("fault trigger: %s", exc)
            self.stopping.wait(TRIGGER_POLL_S)
        if self.stopping.is_set():
            return
        self.t0 = time.monotonic() if self.t0_given is None else self.t0_given
        self.log.emit("faults_start", self.t0, events=len(self.steps))
        for st in self.steps:
            due = self.t0 + self.td.lab_time(st.fault.at_s)
            if self.stopping.wait(max(0.0, due - time.monotonic())):
                return
            t = time.monotonic()
            try:
                self.apply(st)
                err = None
            except Exception as exc:  # a fault that cannot be applied is reported
                err = f"{type(exc).__name__}: {exc}"
                self.errors.append(f"{st.fault.text}: {err}")
                log.warning("fault %r: %s", st.fault.text, err)
            done = time.monotonic()
            rec = {"text": st.fault.text, "at_s": st.fault.at_s,
                   "late_model_s": self.td.model_time(t - due),
                   "took_model_s": self.td.model_time(done - t)}
            if err:
                rec["error"] = err
            self.applied.append(rec)
            self.log.emit("fault", t, text=st.fault.text, at=round(st.fault.at_s * 1e6, 3),
                          kind=st.fault.kind,
                          target=st.fault.target, action=st.fault.action,
                          late=round(rec["late_model_s"] * 1e6, 3), error=err or "")

    def reach_after(self) -> dict:
        """Ping every ordered GPU pair with the faults in effect (the reach matrix of
        L10.2) and compare with what the fabric without the failed links predicts."""
        results = reach.check_all(self.fnet, count=2)
        got = {(r.src, r.dst): reach.via_fabric(self.fabric, r) for r in results}
        return compare_reach(self.state.reach(), got)

    # -- one fault ---------------------------------------------------------------
    def apply(self, st: Step) -> None:
        f = st.fault
        if f.kind == "switch" and f.action == "down":
            self.agent(st.switch, {"cmd": "admin", "state": "down"})
        if f.kind == "link" and f.action in ("degrade", "restore"):
            self.degrade(st)
        elif f.kind == "storm" and f.action == "start":
            self.storm(st)
        elif f.kind == "storm" and st.gpu in self.storms:
            self.storms[st.gpu].set()
        elif f.kind == "pause":
            self.send_pause(st.gpu, int(f.param("prio")), int(f.param("quanta")))
        lost, back = self.state.apply(st)
        for lk in lost:
            for p in (lk.a, lk.b):
                self.set_link(p.node, p.ifname, False)
        if lost:
            self.push_routes()
        for lk in back:
            for p in (lk.a, lk.b):
                self.set_link(p.node, p.ifname, True)
            for p in (lk.a, lk.b):
                self.restore_node(p.node, p.ifname)
        if back:
            self.push_routes()  # the links are up: the routes over them again
        if f.kind == "switch" and f.action == "up":
            self.agent(st.switch, {"cmd": "admin", "state": "up"})

    def agent(self, switch: str, req: dict) -> None:
        r = self.fnet.agent_request(switch, req)
        if not r.get("ok"):
            raise RuntimeError(f"{switch}: {r.get('error')}")

    def set_link(self, node: str, ifname: str, up: bool) -> None:
        self.fnet.node_ops(node).set_link(node, ifname, up)

    def restore_node(self, node: str, ifname: str) -> None:
        self.fnet.node_ops(node).restore_port(node, ifname)

    def push_routes(self) -> None:
        """Every switch's routes on the fabric without the failed links."""
        for sw, routes in self.state.routes().items():
            if sw in self.state.down_switches:
                continue
            have = {r.dst for r in routes}
            self.fnet.node_ops(sw).set_routes(sw, list(routes),
                                              sorted(self.managed[sw] - have))

    def degrade(self, st: Step) -> None:
        f = st.fault
        lk = st.links[0]
        for p in (lk.a, lk.b):
            if self.fabric.nodes[p.node].kind != "switch":
                continue
            if f.action == "restore":
                self.agent(p.node, {"cmd": "degrade", "port": p.ifname, "restore": True})
            else:
                self.agent(p.node, {"cmd": "degrade", "port": p.ifname,
                                    "rate_model_bps": f.param("rate"),
                                    "loss": f.param("loss"), "corrupt": f.param("corrupt"),
                                    "delay_model_s": f.param("delay")})

    # -- PFC from a host -------------------------------------------------------
    def send_pause(self, gpu: str, prio: int, quanta: int) -> None:
        self.fnet.node_ops(self.fabric.gpus[gpu].host).send_frame(
            gpu, pause_frame(mac_bytes(self.fabric.gpus[gpu].mac), prio, quanta))
        self.log.emit("pfc_inject", time.monotonic(), gpu=gpu, prio=prio, quanta=quanta)

    def storm(self, st: Step) -> None:
        """XOFF for the priority, refreshed every half pause time (a stuck NIC)."""
        f = st.fault
        prio = int(f.param("prio"))
        g = self.fabric.gpus[st.gpu]
        ops = self.fnet.node_ops(g.host)
        bps = self.fabric.link_of(g.host, g.nic).model_bps
        frame = pause_frame(mac_bytes(g.mac), prio, MAX_QUANTA)
        period = self.td.lab_time(MAX_QUANTA * QUANTUM_BITS / bps) / 2
        until = (time.monotonic() + self.td.lab_time(f.param("for"))
                 if f.param("for") else float("inf"))
        flag = self.storms.setdefault(st.gpu, threading.Event())
        flag.clear()
        gpu = st.gpu

        def run() -> None:
            sent = 0
            while not flag.is_set() and not self.stopping.is_set() \
                    and time.monotonic() < until:
                try:
                    ops.send_frame(gpu, frame)
                    sent += 1
                except (OSError, RuntimeError) as exc:  # (RuntimeError: a remote part's)
                    log.warning("storm from %s: %s", gpu, exc)
                flag.wait(min(period, max(0.0, until - time.monotonic())))
            self.log.emit("storm_end", time.monotonic(), gpu=gpu, prio=prio, frames=sent)

        t = threading.Thread(target=run, name=f"storm-{gpu}", daemon=True)
        self.storm_threads.append(t)
        self.log.emit("storm_start", time.monotonic(), gpu=gpu, prio=prio,
                      period=round(self.td.model_time(period) * 1e6, 3))
        t.start()
