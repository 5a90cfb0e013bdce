"""The switch agent: one process per switch, the data plane of ARCHITECTURE.md.

rx (AF_PACKET, one raw socket per port) -> layer 2 (VLAN access ports of a rail switch,
book ch.13: intra-rail traffic is switched) or layer 3 (frames to the router MAC:
FIB + seeded ECMP, TTL - 1, MAC rewrite; `switch_agent.forward`) -> egress queue ->
shaper at the link's lab rate (`switch_agent.shaper`) -> delay line (model propagation
delay x TDF) -> tx. Frames for the switch itself (ARP, ping, LLDP) are left to the
namespace's kernel, which never forwards (net.ipv4.ip_forward = 0).

Counters per port (rx/tx packets/bytes, drops by reason) are answered over a Unix
control socket (`switch_agent.control`).
"""

from __future__ import annotations

import collections
import errno
import logging
import random
import select
import socket
import time

from switch_agent import control, io
from switch_agent.config import AgentConfig, PortConfig
from switch_agent.forward import Fib, decrement_ttl, flow_key, icmp_time_exceeded, mac_bytes
from switch_agent.shaper import Shaper

log = logging.getLogger("switch_agent")

ETH_IPV4 = b"\x08\x00"
BROADCAST = b"\xff" * 6
RX_BUDGET = 64  # frames read from one socket per wake-up, for fairness between ports


class Port:
    """Run-time state of one switch port."""

    __slots__ = ("name", "cfg", "sock", "fd", "mac", "vlan", "shaper", "queue", "qbytes",
                 "delay", "inflight", "rx_packets", "rx_bytes", "tx_packets", "tx_bytes",
                 "drops", "max_qbytes")

    def __init__(self, cfg: PortConfig, sock: socket.socket | None, mtu: int) -> None:
        self.name = cfg.ifname
        self.cfg = cfg
        self.sock = sock
        self.fd = sock.fileno() if sock else -1
        self.mac = mac_bytes(cfg.mac)
        self.vlan = cfg.vlan
        self.shaper = Shaper(cfg.lab_bps, mtu=mtu)
        self.queue: collections.deque[bytes] = collections.deque()
        self.qbytes = 0
        self.max_qbytes = 0
        self.delay = cfg.delay_lab_s
        self.inflight: collections.deque[tuple[float, bytes]] = collections.deque()
        self.rx_packets = self.rx_bytes = self.tx_packets = self.tx_bytes = 0
        self.drops: dict[str, int] = {}

    def drop(self, reason: str) -> None:
        """Count a dropped frame."""
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def counters(self) -> dict:
        """Snapshot of this port's counters."""
        return {"rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes,
                "tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
                "drops": dict(self.drops), "queue_bytes": self.qbytes,
                "max_queue_bytes": self.max_qbytes,
                "model_bps": self.cfg.model_bps, "lab_bps": self.cfg.lab_bps,
                "peer": self.cfg.peer}


class Agent:
    """The forwarding loop of one switch."""

    def __init__(self, cfg: AgentConfig, open_sockets: bool = True) -> None:
        self.cfg = cfg
        self.ports: dict[str, Port] = {}
        for pc in cfg.ports:
            sock = io.open_port(pc.ifname) if open_sockets else None
            self.ports[pc.ifname] = Port(pc, sock, cfg.mtu)
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
        self.fib = Fib([], {}, {}, cfg.ecmp_seed)
        self.cache: dict[bytes, tuple[Port, bytes] | str] = {}  # flow -> (port, L2 header)
        self.local: set[bytes] = set()
        self.port_ip: dict[str, bytes] = {}  # ingress port -> address to answer from
        self.rng = random.Random(cfg.test_drop_seed)
        self.drop_rate = cfg.test_drop_rate
        self.backlog: set[Port] = set()
        self.started = time.monotonic()
        self.running = True
        self.other_drops: dict[str, int] = {}

    # -- control plane -------------------------------------------------------
    def install_fib(self, routes, neighbours, local_ips) -> None:
        """Replace the FIB (after a kernel change); empties the flow cache."""
        port_macs = {p.name: p.cfg.mac for p in self.ports.values()}
        self.fib = Fib(routes, neighbours, port_macs, self.cfg.ecmp_seed, self.cfg.svi, local_ips)
        self.local = set(self.fib.local)
        by_dev = {dev: socket.inet_aton(ip) for ip, dev in dict(local_ips).items()} \
            if isinstance(local_ips, dict) else {}
        self.port_ip = {}
        for p in self.ports.values():
            svi = next((d for d, t in self.cfg.svi.items() if p.name in t.values()), None)
            addr = by_dev.get(svi) if svi else by_dev.get(p.name)
            if addr:
                self.port_ip[p.name] = addr
        self.cache.clear()

    # -- data plane ----------------------------------------------------------
    def on_frame(self, port: Port, frame: bytes, now: float) -> None:
        """Process one received frame (the hot path)."""
        port.rx_packets += 1
        port.rx_bytes += len(frame)
        dst = frame[:6]
        if dst in self.router_macs:
            if dst != port.mac or frame[12:14] != ETH_IPV4:
                return  # not routed here (ARP reply to the kernel, other ethertypes)
            if frame[30:34] in self.local:
                return  # for the switch itself: the kernel answers
            key = flow_key(frame)
            hit = self.cache.get(key)
            if hit is None:
                nh = self.fib.resolve(frame[30:34], key)
                hit = nh if nh.__class__ is str else (self.ports[nh.ifname], nh.header + ETH_IPV4)
                self.cache[key] = hit
            if hit.__class__ is str:
                port.drop(hit)
                return
            body = decrement_ttl(frame)
            if body is None:
                port.drop("ttl_expired")
                self.time_exceeded(port, frame, now)
                return
            self.enqueue(hit[0], hit[1] + body, now)
            return
        if port.vlan is None:
            if dst[0] & 1 == 0:
                port.drop("not_for_us")
            return
        out = self.l2.get(dst)
        if out is not None:
            if out is not port:
                self.enqueue(out, frame, now)
            return
        # broadcast / multicast / unknown unicast: flood in the VLAN (ARP between hosts)
        if dst[:3] == b"\x01\x80\xc2":
            return  # link-local control (PFC, LLDP): never flooded
        for other in self.vlan_ports[port.vlan]:
            if other is not port:
                self.enqueue(other, frame, now)

    def time_exceeded(self, port: Port, frame: bytes, now: float) -> None:
        """Answer an expired packet with ICMP Time Exceeded (so traceroute shows hops)."""
        src = self.port_ip.get(port.name)
        if src is None or frame[23] == 1 and frame[34] == 11:
            return  # no address here, or never answer an ICMP error
        packet = icmp_time_exceeded(frame, src)
        nh = self.fib.resolve(frame[26:30], packet[12:20] + b"\x01")
        if nh.__class__ is not str:
            self.enqueue(self.ports[nh.ifname], nh.header + ETH_IPV4 + packet, now)

    def enqueue(self, out: Port, frame: bytes, now: float) -> None:
        """Put a frame on an egress port's queue (tail drop at the queue limit)."""
        if self.drop_rate and self.rng.random() < self.drop_rate:
            out.drop("test_hook")
            return
        n = len(frame)
        if out.qbytes + n > self.cfg.queue_limit_bytes:
            out.drop("queue_full")
            return
        out.queue.append(frame)
        out.qbytes += n
        if out.qbytes > out.max_qbytes:
            out.max_qbytes = out.qbytes
        self.backlog.add(out)

    def service(self, now: float) -> float | None:
        """Move frames queue -> shaper -> delay line -> wire; return the next wake time."""
        wake = None
        done = []
        for p in self.backlog:
            sh = p.shaper
            q = p.queue
            while q and sh.can_send(now):
                frame = q.popleft()
                p.qbytes -= len(frame)
                p.inflight.append((sh.depart(len(frame), now) + p.delay, frame))
            t = self.flush(p, now)
            if q:
                r = sh.ready_at(now)
                t = r if t is None or r < t else t
            if t is None:
                done.append(p)
            elif wake is None or t < wake:
                wake = t
        for p in done:
            self.backlog.discard(p)
        return wake

    def flush(self, p: Port, now: float) -> float | None:
        """Send frames whose arrival time has come; return the next due time."""
        fl = p.inflight
        send = p.sock.send if p.sock else None
        while fl:
            due, frame = fl[0]
            if due > now:
                return due
            fl.popleft()
            if send is not None:
                try:
                    send(frame)
                except OSError as exc:
                    p.drop("tx_error" if exc.errno != errno.ENOBUFS else "tx_nobufs")
                    continue
            p.tx_packets += 1
            p.tx_bytes += len(frame)
        return None

    # -- reporting -----------------------------------------------------------
    def snapshot(self) -> dict:
        """Counters of every port (the contract with `emu` metrics and `show`)."""
        return {"switch": self.cfg.name, "t_lab": time.monotonic(),
                "uptime_s": time.monotonic() - self.started, "tdf": self.cfg.tdf,
                "ports": {p.name: p.counters() for p in self.ports.values()}}

    # -- the loop ------------------------------------------------------------
    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (sets self.running = False)."""
        from switch_agent import kernel

        ep = select.epoll()
        for fd in self.by_fd:
            ep.register(fd, select.EPOLLIN)
        ctl = control.ControlServer(self.cfg.control, self)
        ep.register(ctl.fileno(), select.EPOLLIN)
        nl = io.open_netlink_monitor()
        ep.register(nl.fileno(), select.EPOLLIN)
        from pyroute2 import IPRoute

        ipr = IPRoute()
        self.install_fib(*kernel.read_control_plane(ipr))
        reload_at = None
        log.info("%s: forwarding on %s", self.cfg.name, ", ".join(self.ports))
        ctl.ready()
        by_fd = self.by_fd
        on_frame = self.on_frame
        clock = time.monotonic
        try:
            while self.running:
                now = clock()
                wake = self.service(now) if self.backlog else None
                if reload_at is not None:
                    wake = reload_at if wake is None else min(wake, reload_at)
                timeout = -1 if wake is None else max(0.0, wake - clock())
                try:
                    events = ep.poll(timeout)
                except InterruptedError:
                    continue
                now = clock()
                for fd, _ in events:
                    port = by_fd.get(fd)
                    if port is not None:
                        recv = port.sock.recv
                        for _ in range(RX_BUDGET):
                            try:
                                frame = recv(65535)
                            except BlockingIOError:
                                break
                            except OSError as exc:  # interface gone (teardown)
                                log.warning("%s: %s: %s", self.cfg.name, port.name, exc)
                                ep.unregister(fd)
                                del by_fd[fd]
                                break
                            on_frame(port, frame, now)
                    elif fd == ctl.fileno():
                        ctl.handle()
                    else:
                        io.drain(nl)
                        reload_at = now + 0.05  # debounce bursts of netlink events
                if reload_at is not None and now >= reload_at:
                    self.install_fib(*kernel.read_control_plane(ipr))
                    reload_at = None
        finally:
            ctl.close()
            ipr.close()
            nl.close()
            for p in self.ports.values():
                if p.sock:
                    p.sock.close()
            log.info("%s: stopped", self.cfg.name)

