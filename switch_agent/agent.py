"""The switch agent: one process per switch, the data plane of docs/ARCHITECTURE.md.

rx (AF_PACKET, one raw socket per port)
 -> MAC control: PFC frames stop our egress priorities (ch.11 Step 4), LLDP/DCBX
    neighbours decide where PFC is active (`priority-flow-control mode auto`)
 -> layer 2 (access ports of a rail VLAN, ch.13: intra-rail traffic is switched) or
    layer 3 (frames to the router MAC: FIB, then flow ECMP, flowlet or per-packet
    spraying over the equal-cost next hops (`switch_agent.balancer`, ch.12), TTL - 1, MAC
    rewrite; `switch_agent.forward`; expired packets get ICMP Time Exceeded)
 -> classify (DSCP -> qos-group -> queue and PFC priority; `classify`)
 -> ingress PFC accounting per (ingress port, priority): pause upstream above xOFF,
    resume below xON (`pfc.IngressPfc`)
 -> WRED-ECN + enqueue into one of 8 egress queues (`queues`, `wred`)
 -> strict + DWRR scheduling, skipping paused priorities (`queues`, `watchdog`)
 -> shaper at the link's lab rate (`shaper`) -> delay line (propagation x TDF) -> tx.
The fidelity guard (`emucore.fidelity.LagMeter`, `Agent.meter`) records how late, in model
time, every frame left against its model schedule (the shaper slot and delay-line
release it would have had had the loop never been late), every control frame against
its due time, and every timer (PFC pause refresh, watchdog, LLDP) against its deadline.
Frames for the switch itself (ARP, ping) are left to the namespace's kernel, which
never forwards (net.ipv4.ip_forward = 0). LLDP/DCBX is `switch_agent.dcbx`; the poll
loop (sockets, control requests, kernel changes) is `switch_agent.serve`.
Every switch event of docs/EVENTS.md (WRED crossings, first CE mark, xOFF/xON, PFC
frames sent and received, pauses, drops, watchdog, DCBX) is written to the event log
(`emucore.eventlog`, `Agent.log`) as it is handled; `switch_agent.events`.
"""

from __future__ import annotations

import errno
import logging
import math
import random
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
from emucore.wire.credit import build_credit_frame, parse_credit
from emucore.wire.ether import mac_bytes
from emucore.wire.pause import parse_pfc
from emucore.wire.roce import is_cnp
from emucore.wire.uet_codec import trim_frame
from switch_agent.admin import AgentAdmin
from switch_agent.agentconfig import AgentConfig
from switch_agent.dcbx import Dcbx
from switch_agent.events import pause_events, pfc_rx_events, queue_events
from switch_agent.forward import Fib, ecmp_index, flow_key, icmp_time_exceeded, route_rewrite
from switch_agent.balancer import Balancer, Dre, Path
from switch_agent.port import Port
from switch_agent.state import AgentState
from switch_agent.timers import AgentTimers

log = logging.getLogger("switch_agent")

ETH_IPV4 = b"\x08\x00"
ETH_PFC = b"\x88\x08"
#: flows remembered per cache before it is emptied (UET sprays: one flow per entropy value)
FLOW_CACHE_MAX = 65536
ETH_LLDP = b"\x88\xcc"
ETH_CBFC = b"\x88\xb5"
LINK_LOCAL = b"\x01\x80\xc2"


class Agent(AgentAdmin, AgentTimers, AgentState):
    """The forwarding loop of one switch."""

    def __init__(self, cfg: AgentConfig, open_sockets: bool = True) -> None:
        self.cfg = cfg
        self.td = TimeDilation(cfg.tdf)
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
        self.router_macs = {p.mac for p in self.ports.values()}
        self.lb = (LoadBalance.from_dict(cfg.lb, "lb") if cfg.lb is not None else
                   self.qos.load_balance if self.qos is not None and self.qos.load_balance
                   else LoadBalance())
        self.balancer = Balancer(self.lb, self.ports, cfg.tdf, cfg.test_drop_seed)
        #: DLB virtual next-hop MACs: routed here like our own (ch.12 Example 12-1)
        self.dlb_macs = {mac_bytes(m) for m in cfg.dlb_macs}
        if self.lb.dlb_mac:
            self.dlb_macs.add(mac_bytes(self.lb.dlb_mac))
        self.router_macs |= self.dlb_macs
        if self.lb.mode == "flowlet" and self.lb.estimator == "bytes":
            for p in self.ports.values():
                p.dre = Dre(p.cfg.model_bps / 8 / cfg.tdf, self.td.lab_time(self.lb.ewma_tau_s))
        self.fib = Fib([], {}, {}, cfg.ecmp_seed, hash_fields=self.lb.hash, order=self.lb.order)
        #: flow -> its decision: a Path, a FlowLb (flowlet / spray) or a drop reason
        self.cache: dict[bytes, Path | object | str] = {}
        # the common case's cache, keyed by one slice (src, dst IP, ports) per protocol:
        # IHL 5 TCP/UDP frames need no flow_key (~1 us) to find their decision
        self.fast: dict[int, dict[bytes, Path | object | str]] = {6: {}, 17: {}}
        self.cache_flushes = 0  # a cache reached FLOW_CACHE_MAX and was emptied
        self.local: set[bytes] = set()
        self.fib_table: dict | None = None  # prefix -> next hops last installed
        self.port_ip: dict[str, bytes] = {}  # ingress port -> address to answer from
        self.rng = random.Random(cfg.test_drop_seed)
        self.drop_rate = cfg.test_drop_rate
        self.backlog: set[Port] = set()
        self.clock = time.monotonic  # when frames actually leave (a fake clock in tests)
        self.meter = LagMeter(self.td)  # the fidelity guard: lag of every scheduled action
        self.started = time.monotonic()
        self.running = True
        self.admin_up = True  # False: switch down (set_admin), nothing is forwarded
        self.next_refresh = math.inf
        self.wd_period = min((p.watchdog.detect_s / 4 for p in self.ports.values()
                              if p.watchdog), default=math.inf)
        self.next_wd = -math.inf  # at once (not a deadline: no lag recorded)
        self.lldp_period = cfg.lldp_interval_lab_s if self.qos else math.inf
        self.next_lldp = -math.inf  # announce at once
        self.dcbx = Dcbx(cfg.name, self.qos, len(self.ports)) if self.qos else None
        self.lldp_ports = [p for p in self.ports.values() if p.name not in cfg.lldp_off]
        #: the event log (docs/EVENTS.md); the stages note their events only while it is open
        self.log = EventLog(cfg.events_path, cfg.name, self.td)
        if self.log.enabled:
            for p in self.ports.values():
                p.queues.note_events()
                p.pause.expired = []
            self.balancer.on_path = self.flowlet_event
            self.balancer.on_spray = self.spray_event
        self.events: list[str] = []  # configuration / watchdog / LLDP events, newest last
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
            cache = self.fast.get(frame[23]) if frame[14] == 0x45 else None
            if cache is not None:  # IHL 5 TCP/UDP: the flow is (src, dst, ports) here
                key = frame[26:38]
            else:
                cache, key = self.cache, flow_key(frame)
            hit = cache.get(key)
            if hit is None:
                if len(cache) >= FLOW_CACHE_MAX:  # bounded: UET sprays a flow per EV
                    cache.clear()
                    self.cache_flushes += 1
                hit = cache[key] = self.route(frame, now)
            if hit.__class__ is not Path:
                if hit.__class__ is str:
                    port.drop(hit)
                    return
                hit = hit.pick(now)  # flowlet or spray
            out = route_rewrite(frame, hit.l2)
            if out is None:
                port.drop("ttl_expired")
                self.time_exceeded(port, frame, now)
                return
            hit.packets += 1
            hit.bytes += len(frame)
            self.admit(port, hit.port, out, now)
            return
        if dst[:3] == LINK_LOCAL:
            self.on_control(port, frame, now)
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
        for other in self.vlan_ports[port.vlan]:
            if other is not port:
                self.enqueue(other, 0, frame, None, 0, now)

    def route(self, frame: bytes, now: float) -> Path | object | str:
        """A new flow's decision (cached per flow): the FIB's equal-cost next hops, the
        ECMP hash member, then the load-balancing mode (`switch_agent.balancer.Balancer`)."""
        members = self.fib.members(frame[30:34])
        if members.__class__ is str:
            return members
        key5 = flow_key(frame)
        n = len(members)
        idx = ecmp_index(key5, self.fib.seed, n, self.fib.hash_fields) if n > 1 else 0
        d = self.balancer.decide(members, key5, idx)
        if n > 1 and d.__class__ is Path and self.log.enabled:
            self.log.emit("path", now, flow=d.flow, port=d.port.name, mode="ecmp")
        return d

    def flowlet_event(self, flow: str, port: str, prev: str, load: float, now: float) -> None:
        """A flow started a flowlet (flowlet mode): its port, the previous flowlet's
        ("" for the first) and that port's load against the threshold (> 1: over)."""
        self.log.emit("flowlet", now, flow=flow, port=port, prev=prev, load=round(load, 3))

    def spray_event(self, flow: str, port: str, n: int, now: float) -> None:
        """A sampled packet of a sprayed flow: the n-th took this port (spray mode)."""
        self.log.emit("spray", now, flow=flow, port=port, n=n)

    def trimmed(self, out: Port, frame: bytes, cut: bytes, now: float) -> None:
        """A UET frame was trimmed on its way to `out`: counters, and an event for the
        1st, 257th, 513th, ... of the port (docs/EVENTS.md `trim`)."""
        out.trimmed += 1
        out.trimmed_bytes += len(frame) - len(cut)
        if self.log.enabled and out.trimmed & 0xFF == 1:
            self.log.emit("trim", now, port=out.name, n=out.trimmed, dscp=cut[15] >> 2,
                          depth=out.queues.qbytes[self.q_by_tos[frame[15]]],
                          last_hop=out.cfg.edge)

    def admit(self, inp: Port, out: Port, frame: bytes, now: float) -> None:
        """Classify, account at the ingress (PFC), then WRED + enqueue at the egress."""
        if frame[12:14] != ETH_IPV4:
            self.enqueue(out, 0, frame, None, 0, now)
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
                queue_events(self.log, out, now)
            return
        ing = inp.ingress
        prio = self.p_by_tos[tos]
        if ing.enabled[prio]:
            r = ing.admit(prio, len(frame), now)
            if r is Admission.HEADROOM_DROP:
                inp.drop("headroom_overflow")
                self.log.emit("drop", now, port=inp.name, queue=q, reason="headroom_overflow")
                return
            if r is Admission.XOFF:
                inp.send_ctrl(ing.pause_frames[prio], now)
                inp.pause_tx[prio] += 1
                self.backlog.add(inp)
                self.log.emit("xoff", now, port=inp.name, prio=prio, bytes=ing.held[prio])
                self.log.emit("pfc_tx", now, port=inp.name, prio=prio,
                              quanta=ing.cfg.pause_quanta, refresh=False)
            self.enqueue(out, q, frame, inp, tos, now)
        elif inp.cbfc is not None and prio in inp.cbfc.vcs:  # CBFC: its credits come back
            self.enqueue(out, q, frame, inp, tos, now)
        else:
            self.enqueue(out, q, frame, None, tos, now)

    def enqueue(self, out: Port, q: int, frame: bytes, tag: Port | None, tos: int,
                now: float) -> None:
        """WRED + enqueue on an egress queue; a dropped frame releases its ingress bytes."""
        pq = out.queues
        if self.drop_rate and self.rng.random() < self.drop_rate:
            out.drop("test_hook")
            self.log.emit("drop", now, port=out.name, queue=q, reason="test_hook")
            verdict = WredVerdict.DROP
        else:
            verdict = pq.enqueue(q, frame, tag, tos, now)
            if pq.events:
                queue_events(self.log, out, now)
        if verdict is WredVerdict.DROP:
            if tag is not None:
                self.release(tag, self.p_by_tos[tos], len(frame), now)
            return
        if pq.packets == 1:  # the port was idle: this frame may leave from now
            out.eligible_at = now
        dre = out.dre
        if dre is not None:
            dre.add(len(frame), now)
        self.backlog.add(out)

    def release(self, inp: Port, prio: int, nbytes: int, now: float) -> None:
        """A frame admitted at `inp` left the switch: free its bytes; resume below xON
        (PFC) or return the credits once `update` bytes are owed (CBFC)."""
        cb = inp.cbfc
        if cb is not None and prio in cb.vcs:
            n = cb.freed(prio, nbytes)
            if n:
                inp.send_ctrl(build_credit_frame(inp.mac, prio, n), now)
                self.backlog.add(inp)
            return
        ing = inp.ingress
        if ing.release(prio, nbytes, now):
            inp.send_ctrl(ing.resume_frames[prio], now)
            inp.resume_tx[prio] += 1
            self.backlog.add(inp)
            self.log.emit("xon", now, port=inp.name, prio=prio, bytes=ing.held[prio])
            self.log.emit("pfc_tx", now, port=inp.name, prio=prio, quanta=0, refresh=False)

    def on_control(self, port: Port, frame: bytes, now: float) -> None:
        """IEEE 802.1 link-local frames: PFC pauses and LLDP (never forwarded)."""
        et = frame[12:14]
        if et == ETH_PFC:
            port.pfc_rx_frames += 1
            pfc = parse_pfc(frame)
            if pfc is None:
                return
            log = self.log
            if log.enabled:
                pfc_rx_events(log, port, pfc[0], pfc[1], now)
            if self.qos is not None:
                port.pause.on_pfc(pfc[0], pfc[1], now)
                if log.enabled:
                    pause_events(log, port, now)
                self.backlog.add(port)  # the paused set changed: re-evaluate the scheduler
                if now < port.eligible_at:  # a resume: queued frames may leave from now
                    port.eligible_at = now
        elif et == ETH_CBFC:
            upd = parse_credit(frame)
            if upd is None:
                port.drop("bad_cbfc")
                return
            if port.cbfc is None:  # the partner agreed first: its initial grant, kept
                port.cbfc_early[upd[0]] += upd[1]
                return
            if port.cbfc.grant(*upd):  # credits back: the channel may send again
                self.backlog.add(port)
                if now < port.eligible_at:
                    port.eligible_at = now
                self.log.emit("cbfc_resume", now, port=port.name, prio=upd[0],
                              credits=port.cbfc.credits[upd[0]])
        elif et == ETH_LLDP and self.dcbx is not None:
            was_on = bool(port.pfc_active)
            text = self.dcbx.receive(port, frame, now)
            if text:
                self.event(text)
                self.backlog.add(port)  # CBFC's initial grants may be queued
                if bool(port.pfc_active) != was_on:
                    self.log.emit("pfc_oper", now, port=port.name, on=not was_on)

    def time_exceeded(self, port: Port, frame: bytes, now: float) -> None:
        """Answer an expired packet with ICMP Time Exceeded (so traceroute shows hops)."""
        src = self.port_ip.get(port.name)
        if src is None or frame[23] == 1 and (len(frame) < 35 or frame[34] == 11):
            return  # no address here, or never answer an ICMP error
        packet = icmp_time_exceeded(frame, src)
        nh = self.fib.resolve(frame[26:30], packet[12:20] + b"\x01")
        if nh.__class__ is not str:
            self.enqueue(self.ports[nh.ifname], 0, nh.header + ETH_IPV4 + packet, None, 0, now)

    def service(self, now: float) -> float | None:
        """Move frames queue -> shaper -> delay line -> wire; return the next wake time.

        A frame booked at `now` starts at the shaper's slot, max(free_at, now); had the
        loop been on time it would have started at max(free_at, eligible_at), the time
        the port could first have sent it. The difference (a port left idle by a late
        wake-up) makes its model-schedule release time earlier than its booked one."""
        wake = None
        done = []
        p_by_tos = self.p_by_tos
        us = 1e6 / self.cfg.tdf  # lab seconds -> model µs
        for p in list(self.backlog):  # release() may add ingress ports meanwhile
            sh = p.shaper
            pq = p.queues
            blocked = False
            if pq.packets:
                mask = p.paused_mask(now)
                if p.pause.expired:  # a pause ran out: in the event log at its expiry
                    pause_events(self.log, p, now)
                while pq.packets and sh.can_send(now):
                    item = pq.dequeue(mask)
                    if item is None:
                        blocked = True
                        break
                    if pq.events:
                        queue_events(self.log, p, now)
                    q, frame, tag, queued = item
                    cb = p.cbfc
                    if cb is not None:
                        vc = p_by_tos[frame[15]] if frame[12:14] == ETH_IPV4 else 0
                        if cb.consume(vc, len(frame)):
                            mask = p.paused_mask(now)  # out of credits: the channel stops
                            self.log.emit("cbfc_block", now, port=p.name, prio=vc,
                                          credits=cb.credits[vc])
                    if tag is not None:
                        self.release(tag, p_by_tos[frame[15]], len(frame), now)
                    free = sh.free_at
                    due = sh.depart(len(frame), now) + p.delay
                    if now > free and now > p.eligible_at:  # booked late: model due earlier
                        start = free if free > p.eligible_at else p.eligible_at
                        p.inflight.append((due, frame, due - now + start))
                    else:
                        start = free if free > now else now
                        p.inflight.append((due, frame, due))
                    wait = (start - queued) * us if start > queued else 0.0
                    pq.note_sojourn(q, wait)
                    if len(frame) < 100 and is_cnp(frame):  # its wait: ch.11 L2468-2476
                        self.log.emit("cnp_fwd", now, port=p.name, queue=q,
                                      sojourn=round(wait, 3))
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
                        if self.log.enabled and p.llr_replays & 0xFF == 1:
                            self.log.emit("llr_replay", now, port=p.name, n=p.llr_replays,
                                          why=lost)
                        nxt = line[0][0] if nxt is None or line[0][0] < nxt else nxt
                        break
                    if lost is not None:
                        if p.llr:
                            p.llr_exhausted += 1
                            p.llr_streak = 0
                        p.drop(lost)
                        self.log.emit("drop", now, port=p.name, reason=lost,
                                      queue=self.q_by_tos[frame[15]]
                                      if frame[12:14] == ETH_IPV4 else 0)
                        continue
                if send is not None:
                    try:
                        send(frame)
                    except OSError as exc:
                        reason = "tx_error" if exc.errno != errno.ENOBUFS else "tx_nobufs"
                        p.drop(reason)
                        if line is p.inflight:  # a data frame (not PFC, LLDP)
                            self.log.emit("drop", now, port=p.name, reason=reason,
                                          queue=self.q_by_tos[frame[15]]
                                          if frame[12:14] == ETH_IPV4 else 0)
                        continue
                if line is p.inflight:
                    p.llr_streak = 0
                p.tx_packets += 1
                p.tx_bytes += len(frame)
                if sent_at is None:
                    sent_at = self.clock()
                record(model_due, sent_at, what)
        return nxt

