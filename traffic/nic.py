"""The emulated RDMA NIC (RNIC): one process per GPU NIC, in the host namespace.

    python -m traffic.nic CONFIG.json [--log FILE]

Book ch.9 (Figures 9-5/9-6: the NIC turns a work request into BTH/RETH frames, the
receiving NIC checks P_Key and R_Key and places the payload in registered memory, then
completes on the CQ), ch.11 (Figure 11-3: ECN-marked data makes the receiving NIC send a
CNP with DSCP 48; the sending NIC lowers its rate, DCQCN; PFC pauses stop priority 3)
and ch.12 (Figures 12-1..12-3 WRITE FIRST/MIDDLE/LAST, 12-7 WRITE ONLY for spraying).

* Wire: an AF_PACKET raw socket on the NIC interface (PACKET_IGNORE_OUTGOING, as the
  switch agent). The kernel also sees every RoCE frame: a UDP socket bound to
  (nic_ip, 4791) exists so it never answers with ICMP port-unreachable. It is not
  read: its receive buffer is the minimum, the kernel drops the copies silently, and
  the NIC pays no system call per frame for them.
* Transport: traffic.rc (go-back-N RC, write-only mode), verbs objects of traffic.verbs
  over the worker's shared memory; retransmission timeouts are model seconds, converted
  to lab time with fabric.timedil (never multiplied here).
* Frames: one fabric.wire.templates.FrameTemplate per QP (towards the peer QP) builds the
  data frames (DSCP 24, ECT), the ACK/NAKs of the responder and the CNPs (DSCP 48).
* DCQCN (traffic.dcqcn, model time): a NotificationPoint answers CE-marked data with at
  most one CNP per QP per cnp_interval; a ReactionPoint per QP sets its rate. A pacer
  spaces each QP's frames by size / rate and the port's by size / link lab rate.
* PFC: received 802.1Qbb frames (fabric.qos.pfc.EgressPause) stop data on priority 3.
* Control: JSON lines on a Unix socket (traffic.nic_client), one thread per client; CM
  (traffic.cm REQ/REP/RTU) over TCP on the NIC's IP, port 18515 by default; both in
  traffic.nic_ctl. One lock guards all NIC state; the data path holds it for one loop
  iteration at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import logging
import math
import random
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric.timedil import TimeDilation
from fabric.rawsock import PACKET_IGNORE_OUTGOING, SOL_PACKET
from fabric.qos.pfc import EgressPause
from traffic.dcqcn import DcqcnProfile, NotificationPoint, ReactionPoint
from traffic.rc import RcConfig, RcEndpoint
from fabric.wire.roce import OP_ACK, OP_CNP, ROCE_UDP_PORT, udp_sport
from fabric.wire.templates import FrameTemplate, RoceFields, parse
from traffic.verbs import PATH_MTUS, WR, Context, RocePkt, VerbsError, WROpcode
from traffic.nic_client import CM_PORT, access_from_json, attach_untracked

log = logging.getLogger("traffic.nic")
ETH_P_ALL = 0x0003
PFC_PRIORITY = 3  # book ch.11: RoCE data in qos-group 3, PFC priority 3


@dataclass(frozen=True)
class NicConfig:
    """Start-up configuration of one NIC process (written as JSON by FabricNet.start_nics)."""

    gpu: str
    ifname: str
    ip: str
    mac: str
    gateway_mac: str
    control: str                              #: Unix socket path
    model_bps: float = 200e9                  #: the NIC's link, model bit/s
    tdf: float = 5000.0
    neighbours: dict = field(default_factory=dict)  #: same-subnet ip -> mac
    prefix_len: int = 24
    mtu: int = 4096                           #: path MTU (payload bytes per packet)
    dcqcn: str = "paper"                      #: paper, nvidia or off
    timeout_s: float = 4.096e-6 * 2 ** 8      #: local ACK timeout, model s (IB exp. 8)
    retry_cnt: int = 7
    window: int = 256                         #: packets in flight per QP
    ackreq_every: int = 16
    cm_port: int = CM_PORT
    seed: int | None = None

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        for name in ("gpu", "ifname", "ip", "mac", "gateway_mac", "control"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name}: must be a non-empty string, got {getattr(self, name)!r}")
        try:
            ipaddress.IPv4Address(self.ip)
        except ValueError as e:
            raise ValueError(f"ip: not an IPv4 address: {self.ip!r}") from e
        if self.mtu not in PATH_MTUS:
            raise ValueError(f"mtu: must be one of {PATH_MTUS}, got {self.mtu!r}")
        if self.dcqcn not in ("paper", "nvidia", "off"):
            raise ValueError(f"dcqcn: paper, nvidia or off, got {self.dcqcn!r}")
        for name in ("model_bps", "tdf", "timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name}: must be a positive number, got {v!r}")
        if not 0 <= self.retry_cnt <= 7:
            raise ValueError(f"retry_cnt: must be 0..7, got {self.retry_cnt!r}")
        if not 0 < self.cm_port < 65536:
            raise ValueError(f"cm_port: must be 1..65535, got {self.cm_port!r}")
        if not 0 <= self.prefix_len <= 32:
            raise ValueError(f"prefix_len: must be 0..32, got {self.prefix_len!r}")
        RcConfig(window=self.window, ackreq_every=self.ackreq_every)  # validates both

    @classmethod
    def from_json(cls, text: str) -> "NicConfig":
        """Parse and validate; unknown keys are errors naming them."""
        d = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"config: unknown field(s) {bad}")
        return cls(**d)

    def to_json(self) -> str:
        """JSON text (the file the NIC process reads)."""
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def for_gpu(cls, fabric: Any, gpu: str, control: str, **kw: Any) -> "NicConfig":
        """The configuration of one GPU's NIC in a topologies.Fabric."""
        g = fabric.gpus[gpu]
        port = fabric.ports[(g.host, g.nic)]
        nbrs = {p.ip: p.mac for p in fabric.gpus.values() if p.rail == g.rail and p.name != gpu}
        return cls(gpu=gpu, ifname=g.nic, ip=g.ip, mac=g.mac, gateway_mac=g.gateway_mac,
                   control=control, model_bps=fabric.link_of(g.host, g.nic).model_bps,
                   tdf=fabric.tdf, neighbours=nbrs, prefix_len=int(port.ip.split("/")[1]), **kw)

    def next_hop_mac(self, ip: str) -> str:
        """Destination MAC towards `ip`: the peer's on the same subnet, else the gateway's."""
        mask = (0xFFFFFFFF << (32 - self.prefix_len)) & 0xFFFFFFFF
        a, b = (int.from_bytes(socket.inet_aton(x), "big") for x in (self.ip, ip))
        if (a ^ b) & mask == 0 and ip in self.neighbours:
            return self.neighbours[ip]
        return self.gateway_mac


# ---- pure helpers: frames <-> descriptors, pacing ---------------------------------
def frame_of(t: FrameTemplate, p: RocePkt) -> bytes:
    """The wire frame of a transport descriptor, built from the QP's template."""
    reth = (p.va, p.rkey, p.dlen) if p.va is not None else None
    aeth = (p.syndrome, p.msn or 0) if p.syndrome is not None else None
    return t.build(p.opcode, p.psn, p.ackreq, reth, p.imm, aeth, p.payload, becn=p.becn)


def pkt_of(f: RoceFields) -> RocePkt:
    """The transport descriptor of a parsed frame (the payload stays a view of it)."""
    return RocePkt(f.opcode, f.dqpn, f.psn, f.ackreq, f.becn, f.fecn, f.pkey, f.va, f.rkey,
                   f.dlen, f.syndrome, f.msn, f.imm, f.payload, f.src_ip, f.dst_ip)


def pace(next_t: float, now: float, nbytes: int, rate_bps: float, slack: float) -> float:
    """Earliest start of the next frame after one of `nbytes` sent at `now` by a sender
    allowed to start at `next_t`: spaced by its serialisation at `rate_bps`; a sender
    more than `slack` behind restarts from now instead of bursting to catch up."""
    base = next_t if next_t >= now - slack else now
    return max(base, now - slack) + nbytes * 8 / rate_bps


def _get(table: dict, key: int, what: str) -> Any:
    if key not in table:
        raise VerbsError(f"{what} {key:#x}")
    return table[key]


@dataclass(eq=False)
class NicQp:
    """One QP as the NIC drives it: transport, template, DCQCN, pacing, counters."""

    ep: RcEndpoint
    start_psn: int
    write_only: bool
    tmpl: FrameTemplate | None = None
    rp: ReactionPoint | None = None
    next_t: float = 0.0
    blocked: bool = False
    peer: dict | None = None      # what the peer exposed (remote_ip, remote_qpn, rkey, ...)
    expose: Any = None            # our MR offered to the peer
    tx_frames: int = 0
    tx_wire_bytes: int = 0
    ce_rx: int = 0
    cnp_tx: int = 0
    cnp_rx: int = 0
    connected: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    @property
    def qpn(self) -> int:
        """The QP number."""
        return self.ep.qp.qpn

    def snapshot(self, td: TimeDilation) -> dict:
        """Counters for the control socket."""
        rq, rs = self.ep.requester.counters, self.ep.responder.counters
        return {"state": self.ep.qp.state.value, "peer": self.peer,
                "tx_bytes": rq.bytes, "tx_packets": rq.packets, "retransmits": rq.retransmitted,
                "timeouts": rq.timeouts, "acks_rx": rq.acks, "naks_rx": rq.naks,
                "completions": rq.completions, "tx_frames": self.tx_frames,
                "tx_wire_bytes": self.tx_wire_bytes, **{f"rx_{k}": v for k, v in
                                                        dataclasses.asdict(rs).items()},
                "ce_rx": self.ce_rx, "cnps_sent": self.cnp_tx, "cnps_rx": self.cnp_rx,
                "rate_model_bps": self.rp.rc if self.rp else None,
                "dcqcn": self.rp.snapshot() if self.rp else None}


class Nic:
    """The NIC: verbs objects, QPs, the data path loop and its counters."""

    def __init__(self, cfg: NicConfig, open_sockets: bool = True) -> None:
        """Create the device; with open_sockets, bind the raw and UDP sockets."""
        self.cfg = cfg
        self.td = TimeDilation(cfg.tdf)
        self.rng = random.Random(cfg.seed)
        self.ctx = Context(self.rng)
        self.pds: dict[int, Any] = {}
        self.cqs: dict[int, Any] = {}
        self.qps: dict[int, NicQp] = {}
        self.shms: dict[int, Any] = {}  # lkey -> SharedMemory
        self.order: list[NicQp] = []
        self.rr = 0
        self.profile = None if cfg.dcqcn == "off" else DcqcnProfile.by_name(cfg.dcqcn)
        self.np = NotificationPoint(self.profile) if self.profile else None
        self.pause = EgressPause(cfg.model_bps, self.td)
        self.link_lab_bps = self.td.lab_rate(cfg.model_bps)
        self.slack = max(0.001, 2 * 9216 * 8 / self.link_lab_bps)
        self.port_next = 0.0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.waiters = 0
        self.running = True
        self.c = {"rx_frames": 0, "rx_bytes": 0, "tx_frames": 0, "tx_bytes": 0,
                  "tx_errors": 0, "rx_other": 0, "rx_unknown_qp": 0, "pfc_rx": 0,
                  "closed_qps_tx_bytes": 0}  # payload sent by QPs destroyed since
        self.raw = self.udp = None
        self._buf = bytearray(16384)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        if open_sockets:
            self._open()

    def _open(self) -> None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        # no PACKET_QDISC_BYPASS: it would hide our frames from captures of this interface
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            s.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
        s.bind((self.cfg.ifname, ETH_P_ALL))
        s.setblocking(False)
        self.raw = s
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # kernel minimum: copies dropped
        u.bind((self.cfg.ip, ROCE_UDP_PORT))
        self.udp = u

    # -- verbs (called under self.lock by the control threads) -----------------------
    def alloc_pd(self) -> int:
        """ibv_alloc_pd."""
        pd = self.ctx.alloc_pd()
        self.pds[pd.handle] = pd
        return pd.handle

    def reg_mr(self, pd: int, shm: str, length: int, access: Any) -> dict:
        """ibv_reg_mr over the worker's shared memory `shm`."""
        sm = attach_untracked(shm)
        if sm.size < length:
            sm.close()
            raise VerbsError(f"length: shared memory {shm} has {sm.size} bytes, asked {length}")
        mr = self._pd(pd).reg_mr(sm.buf[:length], access_from_json(access), shm_name=shm)
        self.shms[mr.lkey] = sm
        return {"lkey": mr.lkey, "rkey": mr.rkey, "addr": mr.addr, "length": mr.length}

    def dereg_mr(self, lkey: int) -> None:
        """ibv_dereg_mr."""
        mr = self.ctx.mrs_by_lkey.get(lkey)
        if mr is None:
            raise VerbsError(f"lkey: no MR {lkey:#x}")
        self.ctx.dereg_mr(mr)
        sm = self.shms.pop(lkey)
        try:
            sm.close()
        except BufferError:
            log.warning("MR %#x: shared memory still referenced", lkey)

    def create_cq(self, depth: int = 4096) -> int:
        """ibv_create_cq; returns a handle."""
        h = len(self.cqs) + 1
        self.cqs[h] = self.ctx.create_cq(depth)
        return h

    def create_qp(self, pd: int, send_cq: int, recv_cq: int, max_send_wr: int = 1024,
                  write_only: bool = False, pkey: int = 0xFFFF) -> int:
        """ibv_create_qp (RC) and modify to INIT; returns the QP number."""
        qp = self._pd(pd).create_qp(self._cq(send_cq), self._cq(recv_cq), max_send_wr)
        qp.modify_to_init(pkey)
        c = self.cfg
        rc = RcConfig(mtu=c.mtu, write_only=write_only, window=c.window,
                      ackreq_every=c.ackreq_every, reorder_window=max(1024, c.window))
        q = NicQp(RcEndpoint(qp, rc), self.rng.getrandbits(24), write_only)
        self.qps[qp.qpn] = q
        return qp.qpn

    def destroy_qp(self, qpn: int) -> None:
        """ibv_destroy_qp."""
        q = self.qps.pop(self._qp(qpn).qpn)
        self.c["closed_qps_tx_bytes"] += q.ep.requester.counters.bytes
        q.ep.qp.to_error()
        if q in self.order:
            self.order.remove(q)
        if self.np:
            self.np.forget(qpn)

    def to_rtr(self, q: NicQp, peer_qpn: int, peer_psn: int, peer_ip: str, mtu: int) -> None:
        """INIT -> RTR once the CM exchange agreed on QPNs and PSNs; the frame template
        (needed for ACKs already) and the DCQCN reaction point."""
        c, qp = self.cfg, q.ep.qp
        qp.modify_to_rtr(peer_qpn, peer_psn, min(mtu, c.mtu), peer_ip, c.ip)
        q.tmpl = FrameTemplate(c.mac, c.next_hop_mac(peer_ip), c.ip, peer_ip,
                               udp_sport(qp.qpn, peer_qpn), peer_qpn, pkey=qp.pkey)
        if self.profile is not None:
            q.rp = ReactionPoint(c.model_bps, self.profile)
        self.order.append(q)

    def to_rts(self, q: NicQp) -> None:
        """RTR -> RTS: start PSN, local ACK timeout (model, converted to lab), retries."""
        q.ep.qp.modify_to_rts(q.start_psn, self.td.lab_time(self.cfg.timeout_s),
                              self.cfg.retry_cnt)
        q.blocked = False
        self.wake()

    def post_send(self, qpn: int, wrs: list[dict]) -> None:
        """ibv_post_send of RDMA WRITE [with immediate] work requests."""
        q = self._qp(qpn)
        for w in wrs:
            imm = w.get("imm")
            q.ep.qp.post_send(WR(int(w["wr_id"]), WROpcode.WRITE if imm is None
                                 else WROpcode.WRITE_WITH_IMM, int(w["local_addr"]),
                                 int(w["length"]), int(w["lkey"]), int(w["remote_addr"]),
                                 int(w["rkey"]), bool(w.get("signaled", True)), imm))
        q.blocked = False
        self.wake()

    def post_recv(self, qpn: int, wr_ids: list[int]) -> None:
        """ibv_post_recv (for WRITE with immediate)."""
        q = self._qp(qpn)
        for i in wr_ids:
            q.ep.qp.post_recv(int(i))

    def _pd(self, h: int) -> Any:
        return _get(self.pds, h, "pd: no protection domain")

    def _cq(self, h: int) -> Any:
        return _get(self.cqs, h, "cq: no completion queue")

    def _qp(self, qpn: int) -> NicQp:
        return _get(self.qps, qpn, "qpn: no QP")

    # -- data path (under self.lock) --------------------------------------------------
    def wake(self) -> None:
        """Make the data-path loop re-evaluate now."""
        try:
            self.wake_w.send(b"x")
        except BlockingIOError:
            pass

    def send(self, frame: bytes) -> bool:
        """Put one frame on the wire."""
        try:
            self.raw.send(frame)
        except OSError:
            self.c["tx_errors"] += 1
            return False
        self.c["tx_frames"] += 1
        self.c["tx_bytes"] += len(frame)
        return True

    def on_frame(self, mv: memoryview, now: float) -> None:
        """One received frame: PFC, CNP, data or ACK/NAK for one of our QPs."""
        c = self.c
        c["rx_frames"] += 1
        c["rx_bytes"] += len(mv)
        if mv[12] == 0x88 and mv[13] == 0x08:
            if self.pause.on_frame(bytes(mv[:60]), now):
                c["pfc_rx"] += 1
            return
        f = parse(mv)
        if f is None or f.dst_ip != self.cfg.ip:
            c["rx_other"] += 1
            return
        q = self.qps.get(f.dqpn)
        if q is None or q.tmpl is None:
            c["rx_unknown_qp"] += 1
            return
        if f.opcode == OP_CNP:
            q.cnp_rx += 1
            if q.rp is not None:
                q.rp.on_cnp(self.td.model_time(now))
            return
        if f.ecn == 3 and f.opcode != OP_ACK:
            q.ce_rx += 1
            if self.np is not None and self.np.on_ce(q.qpn, self.td.model_time(now)):
                if self.send(q.tmpl.build_cnp()):
                    q.cnp_tx += 1
        for r in q.ep.on_packet(pkt_of(f), now):
            self.send(frame_of(q.tmpl, r))
        q.blocked = False

    def transmit(self, now: float) -> None:
        """Send data frames while the port and some QP's pacer allow (round robin)."""
        while now >= self.port_next - self.slack and self.order:
            if self.pause.paused_mask(now) >> PFC_PRIORITY & 1:
                return
            n = len(self.order)
            for i in range(n):
                q = self.order[(self.rr + i) % n]
                if q.blocked or now < q.next_t:
                    continue
                pkt = q.ep.next_packet(now)
                if pkt is None:
                    q.blocked = True
                    continue
                frame = frame_of(q.tmpl, pkt)
                self.send(frame)
                size = len(frame)
                q.tx_frames += 1
                q.tx_wire_bytes += size
                rate = self.link_lab_bps
                if q.rp is not None:
                    m = self.td.model_time(now)
                    q.rp.on_bytes_sent(size, m)
                    rate = min(rate, self.td.lab_rate(q.rp.rc))
                q.next_t = pace(q.next_t, now, size, rate, self.slack)
                self.port_next = pace(self.port_next, now, size, self.link_lab_bps, self.slack)
                self.rr = (self.rr + i + 1) % n
                break
            else:
                return

    def step(self, now: float) -> float:
        """One loop iteration: receive, timers, transmit; returns seconds to sleep."""
        if self.raw is not None:
            buf = self._buf
            for _ in range(256):
                try:
                    n = self.raw.recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    break
                self.on_frame(memoryview(buf)[:n], now)
        for q in self.order:
            d = q.ep.deadline
            if d is not None and now >= d:
                q.ep.on_timer(now)
                q.blocked = False
        self.transmit(now)
        if self.waiters:
            self.cond.notify_all()
        wake = now + 0.05
        paused = self.pause.paused_mask(now) >> PFC_PRIORITY & 1
        for q in self.order:
            if not paused and not q.blocked and not q.ep.requester.idle():
                wake = min(wake, max(q.next_t, self.port_next - self.slack))
            if q.ep.deadline is not None:
                wake = min(wake, q.ep.deadline)
        if self.pause.mask:
            wake = min(wake, self.pause.next_expiry)
        return max(0.0, wake - now)

    def run(self) -> None:
        """The data-path loop, until stopped."""
        rl = [self.raw, self.wake_r]
        while self.running:
            with self.lock:
                timeout = self.step(time.monotonic())
            if timeout > 0:
                r, _, _ = select.select(rl, [], [], timeout)
                if self.wake_r in r:
                    try:
                        self.wake_r.recv(4096)
                    except BlockingIOError:
                        pass

    def counters(self) -> dict:
        """NIC-wide and per-QP counters (rates in model bit/s)."""
        now = time.monotonic()
        return {"gpu": self.cfg.gpu, "ip": self.cfg.ip, "t_lab": now, "tdf": self.cfg.tdf,
                "link_model_bps": self.cfg.model_bps, **self.c,
                "pfc": self.pause.counters(now),
                "np": {"ce_seen": self.np.ce_seen, "cnps": self.np.cnps} if self.np else None,
                "qps": {str(q): v.snapshot(self.td) for q, v in self.qps.items()}}


def main(argv: list[str] | None = None) -> int:
    """Entry point: read the config, serve the control socket and CM, run the data path."""
    ap = argparse.ArgumentParser(prog="python -m traffic.nic", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", help="NicConfig JSON file")
    ap.add_argument("--log", default=None, help="log file (default stderr)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(filename=a.log, level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = NicConfig.from_json(Path(a.config).read_text())
    nic = Nic(cfg)
    from traffic.nic_ctl import ControlServer

    server = ControlServer(nic)

    def on_term(*_: object) -> None:
        nic.running = False
        nic.wake()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    server.start()
    log.info("NIC %s up on %s (%s), link %g bit/s model, TDF %g, DCQCN %s", cfg.gpu,
             cfg.ifname, cfg.ip, cfg.model_bps, cfg.tdf, cfg.dcqcn)
    try:
        nic.run()
    finally:
        server.close()
        log.info("NIC %s: %s", cfg.gpu, json.dumps(nic.c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
