"""The switch agent: one process per switch, the data plane of docs/ARCHITECTURE.md.

rx (AF_PACKET, one raw socket per port)
 -> MAC control (`maccontrol`): PFC frames stop our egress priorities (ch.11 Step 4),
    LLDP/DCBX neighbours decide where PFC is active (`priority-flow-control mode auto`)
 -> layer 2 (access ports of a rail VLAN, ch.13: intra-rail traffic is switched) or
    layer 3 (frames to the router MAC: the flow's cached decision (`flowcache`): FIB,
    then flow ECMP, flowlet or per-packet spraying over the equal-cost next hops
    (`balancer`, ch.12); TTL - 1, MAC rewrite (`forward`); expired packets get ICMP
    Time Exceeded)
 -> classify (DSCP -> qos-group -> queue and PFC priority; `classify`)
 -> ingress PFC accounting per (ingress port, priority): pause upstream above xOFF,
    resume below xON (`pfc.IngressPfc`, `ingress`); the queue entry carries both
 -> WRED-ECN + enqueue into one of 8 egress queues (`queues`, `wred`)
 -> strict + DWRR scheduling, skipping paused priorities (`queues`, `watchdog`)
 -> shaper at the link's lab rate (`shaper`) -> delay line (propagation x TDF) -> tx.
The fidelity guard (`emucore.fidelity.LagMeter`, `Agent.meter`) records how late, in model
time, every frame left against its model schedule (the shaper slot and delay-line
release it would have had had the loop never been late), every control frame against
its due time, and every timer (PFC pause refresh, watchdog, LLDP) against its deadline.
Frames for the switch itself (ARP, ping) are left to the namespace's kernel, which
never forwards (net.ipv4.ip_forward = 0); what it sends into a rail's VLAN the agent
switches from the SVI's CPU port (`cpuport`). LLDP/DCBX is `switch_agent.dcbx`; the
poll loop (sockets, control requests, kernel changes) is `switch_agent.serve`.
Every switch event of docs/EVENTS.md (WRED crossings, first CE mark, xOFF/xON, PFC
frames sent and received, pauses, drops, watchdog, DCBX) goes, as it is handled, to the
`switch_agent.events.EventSink` the agent hands its stages (`Agent.sink`), which writes
the event log (`emucore.eventlog`, `Agent.log`). Beside the pipeline: the control plane
(`admin`), the timers (`timers`), reporting (`state`), the switch's own frames (ICMP
Time Exceeded, the kernel's: `cpuport`) and the test hook (`testhook`).
"""

from __future__ import annotations

import errno
import math
import time

from emucore import rawsock
from emucore.eventlog import EventLog
from emucore.fidelity import LagMeter
from emucore.lbconfig import LoadBalance
from emucore.qos.classify import Classification, Classifier
from emucore.qos.qosconfig import QosConfig
from emucore.qos.pfc import Admission
from emucore.qos.wred import WredVerdict
from emucore.timedil import TimeDilation
from emucore.wire.ether import mac_bytes
from emucore.wire.roce_codes import is_cnp
from emucore.wire.uet_codec import trim_frame
from switch_agent.admin import AgentAdmin
from switch_agent.agentconfig import AgentConfig
from switch_agent.cpuport import AgentOrigins, CpuPorts
from switch_agent.balancer import Balancer, Dre
from switch_agent.dcbx import Dcbx
from switch_agent.events import EventSink
from switch_agent.flowcache import FlowCache
from switch_agent.forward import Fib, flow_key, route_rewrite
from switch_agent.ingress import IngressBuffers
from switch_agent.maccontrol import MacControl
from switch_agent.port import Port
from switch_agent.state import AgentState
from switch_agent.testhook import DropRate
from switch_agent.timers import AgentTimers

ETH_IPV4 = b"\x08\x00"
LINK_LOCAL = b"\x01\x80\xc2"


class Agent(AgentAdmin, AgentTimers, AgentState, AgentOrigins):
    """The forwarding loop of one switch."""

    drop_rate = DropRate()  #: the test hook's drop fraction (switch_agent.testhook)

    def __init__(self, cfg: AgentConfig, open_sockets: bool = True) -> None:
        self.cfg = cfg
        self.td = TimeDilation(cfg.tdf)
        #: the event log (docs/EVENTS.md) and the sink the stages write it through
        self.log = EventLog(cfg.events_path, cfg.name, self.td)
        self.sink = EventSink(self.log)
        self.events = self.sink.recent  # configuration / watchdog / LLDP events, newest last
        self.backlog: set[Port] = set()  # ports with frames or control frames to send
        self.buffers = IngressBuffers(self.backlog, self.sink)
        self.qos = QosConfig.from_dict(cfg.qos) if cfg.qos is not None else None
        cls = Classifier(self.qos.classification if self.qos else
                         Classification("plain", (), 0))
        self.q_by_tos = list(cls.queue_by_tos)
        self.p_by_tos = list(cls.priority_by_tos)
        #: UET packet trimming (emucore.qos.trim); trimmed headers ride its queue everywhere
        self.trim = self.qos.trim if self.qos is not None else None
        #: link-level retry, modelled (emucore.qos.llr): a port runs it once LLDP agreed
        self.llr = self.qos.llr if self.qos is not None else None
        self.llr_lab_s = self.td.lab_time(self.llr.timeout_s) if self.llr else 0.0
        if self.trim is not None:
            for tos in range(256):
                if self.trim.is_trimmed(tos):
                    self.q_by_tos[tos] = self.p_by_tos[tos] = self.trim.queue
        self.ports: dict[str, Port] = {}
        for pc in cfg.ports:
            sock = rawsock.open_port(pc.ifname) if open_sockets else None
            self.ports[pc.ifname] = Port(pc, sock, cfg.mtu, self.td, self.qos,
                                         cfg.queue_limit_bytes, cfg.test_drop_seed)
        self.by_fd = {p.fd: p for p in self.ports.values() if p.fd >= 0}
        self.vlan_ports: dict[int, list[Port]] = {}
        for p in self.ports.values():
            if p.vlan is not None:
                self.vlan_ports.setdefault(p.vlan, []).append(p)
        self.l2: dict[bytes, Port] = {}
        for table in cfg.svi.values():
            for mac, ifname in table.items():
                self.l2[mac_bytes(mac)] = self.ports[ifname]
        self.cpu = CpuPorts(cfg, self.ports, self.l2, open_sockets)  # `from_kernel`
        self.router_macs = {p.mac for p in self.ports.values()}
        self.lb = (LoadBalance.from_dict(cfg.lb, "lb") if cfg.lb is not None else
                   self.qos.load_balance if self.qos is not None and self.qos.load_balance
                   else LoadBalance())
        self.balancer = Balancer(self.lb, self.ports, cfg.tdf, cfg.test_drop_seed, cfg.name)
        #: DLB virtual next-hop MACs: routed here like our own (ch.12 Example 12-1)
        self.dlb_macs = {mac_bytes(m) for m in cfg.dlb_macs}
        if self.lb.dlb_mac:
            self.dlb_macs.add(mac_bytes(self.lb.dlb_mac))
        self.router_macs |= self.dlb_macs
        if self.lb.mode == "flowlet" and self.lb.estimator == "bytes":
            for p in self.ports.values():
                p.dre = Dre(p.cfg.model_bps / 8 / cfg.tdf, self.td.lab_time(self.lb.ewma_tau_s))
        self.fib = Fib([], {}, {}, cfg.ecmp_seed, hash_fields=self.lb.hash, order=self.lb.order)
        self.flowcache = FlowCache(self.balancer, self.sink)  # flow -> its Route
        self.local: set[bytes] = set()
        self.fib_table: dict | None = None  # prefix -> next hops last installed
        self.port_ip: dict[str, bytes] = {}  # ingress port -> address to answer from
        self.drop_rate = cfg.test_drop_rate
        self.clock = time.monotonic  # when frames actually leave (a fake clock in tests)
        self.meter = LagMeter(self.td)  # the fidelity guard: lag of every scheduled action
        self.started = time.monotonic()
        self.running = True
        self.admin_up = True  # False: switch down (set_admin), nothing is forwarded
        self.wd_period = min((p.watchdog.detect_s / 4 for p in self.ports.values()
                              if p.watchdog), default=math.inf)
        self.next_wd = -math.inf  # at once (not a deadline: no lag recorded)
        self.lldp_period = cfg.lldp_interval_lab_s if self.qos else math.inf
        self.next_lldp = -math.inf  # announce at once
        self.dcbx = Dcbx(cfg.name, self.qos, len(self.ports)) if self.qos else None
        self.lldp_ports = [p for p in self.ports.values() if p.name not in cfg.lldp_off]
        self.mac_control = MacControl(self.qos is not None, self.dcbx, self.backlog, self.sink)
        if self.sink.enabled:  # the stages note their events only while the log is open
            for p in self.ports.values():
                p.queues.note_events()
                p.pause.expired = []
            self.balancer.on_path = self.sink.flowlet
            self.balancer.on_spray = self.sink.spray
        if self.qos is not None:
            self.check_qos()

    # -- data plane ----------------------------------------------------------
    def on_frame(self, port: Port, frame: bytes, now: float) -> None:
        """Process one received frame (the hot path)."""
        port.rx_packets += 1
        n = len(frame)
        port.rx_bytes += n
        if n < 34 and (n < 14 or frame[12:14] == ETH_IPV4):  # shorter than its IPv4 header
            port.drop("malformed")
            return
        dst = frame[:6]
        if dst in self.router_macs:
            if dst != port.mac and dst not in self.dlb_macs or frame[12:14] != ETH_IPV4:
                return  # not routed here (ARP reply to the kernel, other ethertypes)
            if frame[30:34] in self.local:
                return  # for the switch itself: the kernel answers
            flows = self.flowcache  # its keys: switch_agent.flowcache
            cache = flows.fast.get(frame[23]) if frame[14] == 0x45 else None
            if cache is not None:  # IHL 5 TCP/UDP: the flow is (src, dst, ports) here
                key = frame[26:38]
            else:
                cache, key = flows.flows, flow_key(frame)
            route = cache.get(key)
            if route is None:
                route = flows.add(cache, key, self.fib, frame, now)
            path = route.path
            if path is None:
                if route.drop is not None:
                    port.drop(route.drop)
                    return
                path = route.balanced.pick(now)  # flowlet or spray
            out = route_rewrite(frame, path.l2)
            if out is None:
                port.drop("ttl_expired")
                self.time_exceeded(port, frame, now)
                return
            path.packets += 1
            path.bytes += len(frame)
            self.admit(port, path.port, out, now)
            return
        if dst[:3] == LINK_LOCAL:
            self.mac_control.on_frame(port, frame, now)
            return
        if port.vlan is None:
            if dst[0] & 1 == 0:
                port.drop("not_for_us")
            return
        out = self.l2.get(dst)
        if out is not None:
            if out is not port:
                self.admit(port, out, frame, now)
            return
        # broadcast / multicast / unknown unicast: flood in the VLAN (ARP between hosts)
        prio = self.prio_of(frame)
        for other in self.vlan_ports[port.vlan]:
            if other is not port:
                self.enqueue(other, 0, frame, None, 0, now, prio)

    def prio_of(self, frame: bytes) -> int:
        """The PFC priority of a frame queued without `admit` (0 if not IPv4)."""
        return self.p_by_tos[frame[15]] if frame[12:14] == ETH_IPV4 else 0

    def trimmed(self, out: Port, frame: bytes, cut: bytes, now: float) -> None:
        """A UET frame was trimmed on its way to `out`: counters, and an event for the
        1st, 257th, 513th, ... of the port (docs/EVENTS.md `trim`)."""
        out.trimmed += 1
        out.trimmed_bytes += len(frame) - len(cut)
        if out.trimmed & 0xFF == 1 and self.sink.enabled:
            self.sink.trim(out, cut, out.queues.qbytes[self.q_by_tos[frame[15]]], now)

    def admit(self, inp: Port, out: Port, frame: bytes, now: float) -> None:
        """Classify, account at the ingress (PFC), then WRED + enqueue at the egress."""
        if frame[12:14] != ETH_IPV4:
            self.enqueue(out, 0, frame, None, 0, now, 0)
            return
        tos = frame[15]
        trim = self.trim
        if trim is not None and trim.trimmable[tos]:
            d = trim.dscp_for(tos, out.queues.qbytes[self.q_by_tos[tos]], len(frame),
                              out.cfg.edge)
            if d is not None:
                cut = trim_frame(frame, trim.keep, d)
                if cut is not None:
                    self.trimmed(out, frame, cut, now)
                    frame, tos = cut, cut[15]
        q = self.q_by_tos[tos]
        wd = out.watchdog
        if wd is not None and wd.drop_mask >> q & 1:
            wd.note_dropped(q)
            out.queues.drop(q, "pfc_watchdog")
            if out.queues.events:
                self.sink.queues(out, now)
            return
        ing = inp.ingress
        prio = self.p_by_tos[tos]
        if ing.enabled[prio]:
            r = ing.admit(prio, len(frame), now)
            if r is Admission.HEADROOM_DROP:
                inp.drop("headroom_overflow")
                self.sink.drop(inp, q, "headroom_overflow", now)
                return
            if r is Admission.XOFF:
                self.buffers.xoff(inp, prio, now)
            self.enqueue(out, q, frame, inp, tos, now, prio)
        elif inp.cbfc is not None and prio in inp.cbfc.vcs:  # CBFC: its credits come back
            self.enqueue(out, q, frame, inp, tos, now, prio)
        else:
            self.enqueue(out, q, frame, None, tos, now, prio)

    def enqueue(self, out: Port, q: int, frame: bytes, ingress: Port | None, tos: int,
                now: float, prio: int) -> None:
        """WRED + enqueue on an egress queue (an `Entry` carrying `ingress` and `prio`);
        a dropped frame releases its ingress bytes."""
        pq = out.queues
        verdict = pq.enqueue(q, frame, ingress, tos, now, prio)
        if pq.events:
            self.sink.queues(out, now)
        if verdict is WredVerdict.DROP:
            if ingress is not None:
                self.buffers.release(ingress, prio, len(frame), now)
            return
        if pq.packets == 1:  # the port was idle: this frame may leave from now
            out.eligible_at = now
        dre = out.dre
        if dre is not None:
            dre.add(len(frame), now)
        self.backlog.add(out)

    def service(self, now: float) -> float | None:
        """Move frames queue -> shaper -> delay line -> wire; return the next wake time.

        A frame booked at `now` after the wire sat idle would have started, had the loop
        been on time, at max(free_at, eligible_at), the time the port could first have
        sent it: the shaper books it from there when that is within its burst_s of now
        (the lost service is made up, `Shaper.book`), else from now - and then the
        difference makes its model-schedule release time earlier than its booked one."""
        wake = None
        done = []
        sink = self.sink
        release = self.buffers.release
        us = 1e6 / self.cfg.tdf  # lab seconds -> model µs
        for p in list(self.backlog):  # release() may add ingress ports meanwhile
            sh = p.shaper
            pq = p.queues
            blocked = False
            if pq.packets:
                mask = p.paused_mask(now)
                if p.pause.expired:  # a pause ran out: in the event log at its expiry
                    sink.pauses(p, now)
                while pq.packets and sh.can_send(now):
                    item = pq.dequeue(mask)
                    if item is None:
                        blocked = True
                        break
                    if pq.events:
                        sink.queues(p, now)
                    q, frame, ingress, queued, prio = item  # a queues.Entry
                    cb = p.cbfc
                    if cb is not None and cb.consume(prio, len(frame)):
                        mask = p.paused_mask(now)  # out of credits: the channel stops
                        sink.cbfc_block(p, prio, cb.credits[prio], now)
                    if ingress is not None:
                        release(ingress, prio, len(frame), now)
                    booked, start = sh.book(len(frame), now, p.eligible_at)
                    due = sh.free_at + p.delay
                    if booked != start:  # booked from now, too late: model due earlier
                        p.inflight.append((due, frame, due - booked + start))
                    else:
                        p.inflight.append((due, frame, due))
                    wait = (start - queued) * us if start > queued else 0.0
                    pq.note_sojourn(q, wait)
                    if len(frame) < 100 and is_cnp(frame):  # its wait: ch.11 L2468-2476
                        sink.cnp_fwd(p, q, wait, now)
            t = self.flush(p, now)
            if pq.packets:
                if blocked:  # every backlogged queue paused: eligible again at the expiry
                    r = p.eligible_at = p.pause.next_expiry
                else:
                    r = sh.ready_at(now)
                if t is None or r < t:
                    t = r
            if t is None:
                done.append(p)
            elif wake is None or t < wake:
                wake = t
        for p in done:
            self.backlog.discard(p)
        return wake

    def flush(self, p: Port, now: float) -> float | None:
        """Send control frames and frames whose arrival time has come; next due time.
        Each frame sent records its lag: sent (the clock, once per line) - model due."""
        nxt = None
        send = p.sock.send if p.sock else None
        record = self.meter.record
        for line, what in ((p.ctrl, p.ctrl_what), (p.inflight, p.tx_what)):
            if not line:
                continue
            sent_at = None
            while line:
                due, frame, model_due = line[0]
                if due > now:
                    nxt = due if nxt is None or due < nxt else nxt
                    break
                line.popleft()
                if p.impair is not None and line is p.inflight:  # a degraded link
                    lost = p.impair.verdict()
                    if lost is not None and p.llr and p.llr_streak < self.llr.max_replays:
                        p.replay(frame, model_due, now, self.llr_lab_s)  # LLR: sent again
                        if p.llr_replays & 0xFF == 1:
                            self.sink.llr_replay(p, lost, now)
                        nxt = line[0][0] if nxt is None or line[0][0] < nxt else nxt
                        break
                    if lost is not None:
                        if p.llr:
                            p.llr_exhausted += 1
                            p.llr_streak = 0
                        p.drop(lost)
                        self.sink.wire_drop(p, lost, self.queue_of(frame), now)
                        continue
                if send is not None:
                    try:
                        send(frame)
                    except OSError as exc:
                        reason = "tx_error" if exc.errno != errno.ENOBUFS else "tx_nobufs"
                        p.drop(reason)
                        if line is p.inflight:  # a data frame (not PFC, LLDP)
                            self.sink.wire_drop(p, reason, self.queue_of(frame), now)
                        continue
                if line is p.inflight:
                    p.llr_streak = 0
                p.tx_packets += 1
                p.tx_bytes += len(frame)
                if sent_at is None:
                    sent_at = self.clock()
                record(model_due, sent_at, what)
        return nxt

    def queue_of(self, frame: bytes) -> int:
        """The egress queue the event log names for a frame lost on the wire."""
        return self.q_by_tos[frame[15]] if frame[12:14] == ETH_IPV4 else 0
