"""The data path of the emulated RDMA NIC: frames in, frames out, paced.

Book ch.9 (Figures 9-5/9-6: the NIC turns a work request into BTH/RETH frames, the
receiving NIC places the payload and completes), ch.11 (Figure 11-3: ECN-marked data
makes the receiving NIC send a CNP with DSCP 48; the sending NIC lowers its rate,
DCQCN; PFC pauses stop the RoCE priority) and ch.12 (Figures 12-1..12-3, 12-7).

* Wire: an AF_PACKET raw socket on the NIC interface (PACKET_IGNORE_OUTGOING, as the
  switch agent). In a fabric the port's early drop (emu.realise.earlydrop) keeps RoCE
  and UET datagrams from the kernel's IP stack; where a port has none (a bare veth of a
  test), the kernel sees every RoCE frame: a UDP socket bound to (nic_ip, 4791) exists
  so it never answers with ICMP port-unreachable. It is not read: its receive buffer is
  the minimum, the kernel drops the copies silently, and the NIC pays no system call
  per frame for them.
* Frames: each QP's FrameTemplate builds its data frames (its DSCP and ECN, by
  default 24 and ECT(0)) and the ACK/NAKs of its responder, and `parse` checks what
  arrives; both from emucore.framing: the C of emucore.wire.fast unless
  EMU_DATAPATH=python chooses the reference emucore.wire.templates; its CNP
  (NicConfig.cnp_dscp, 48 by default) is built once; `frame_of` and `pkt_of` map them
  to and from the transport's descriptors.
* DCQCN (traffic.dcqcn, model time via emucore.timedil): a NotificationPoint answers
  CE-marked data with at most one CNP per QP per cnp_interval; a ReactionPoint per QP
  sets its rate. `pace` spaces each QP's frames by size / rate and the port's by size /
  link lab rate.
* PFC: received 802.1Qbb frames (emucore.qos.pfc.EgressPause) stop the QPs whose data
  travels on a paused priority (NicQp.prio: NicConfig.pfc_priority for DSCP 24).
* Events (docs/EVENTS.md, `ev`): ce_first, cnp_tx, cnp_rx, nak_tx, pfc_rx and
  pause_start / pause_end of the data priority here (an expired pause ends at its
  expiry time); the rest come from traffic.nic.nicverbs' hooks. Nothing is built for a
  frame that causes no event. The log is flushed on every counters request.
* Fidelity guard (emucore.fidelity.LagMeter, `meter`, in `counters()["fidelity"]`): each
  data frame's send against the time the pacer allowed it - max(QP's next_t, port's
  next start - slack, when the QP got work, when a pause ended) - ("pacer"), each
  retransmission timeout against its deadline ("rto"), each CNP against the receipt of
  the CE-marked frame ("cnp"). DCQCN's rate-increase and alpha timers need none: they
  are caught up in model time (ReactionPoint.tick) before the rate is next used.
  With the kernel's receive stamps (a raw socket), each received frame's wait from its
  arrival to its handling ("rx").
  The loop sleeps in select (microsecond timeouts) with a 1 us timer slack, until its next
  deadline (a frame's pacer time, not rounded), and after a wake-up that read stamped
  frames no later than the next grid point unless that deadline is at most one grid step
  away (traffic.nic.wakeup: the grid and why); it reads the raw socket only when select
  said it was readable or while receiving on the grid.
* One lock guards all NIC state; the loop holds it for one iteration at a time. A control
  thread waiting in poll_cq (traffic.nic.ctl) is woken after an iteration that added a
  completion to a CQ, not after every iteration: each wake-up of it costs the loop a
  thread switch, and in an AllReduce an iteration moves one frame while a completion
  ends a message of hundreds.
"""

from __future__ import annotations

import select
import socket
import threading
import time

from emucore import rtsched
from emucore.qos.pfc import EgressPause
from emucore.rawsock import open_port, tighten_timer_slack
from emucore.wire.ib import AckKind, Op, RocePkt
from emucore.wire.dscp import ECN_CE
from emucore.wire.pause import OPCODE_PFC, parse_pfc
from emucore.wire.roce_codes import ROCE_UDP_PORT
from emucore.framing import FrameTemplate, malformed, parse
from emucore.wire.templates import RoceFields
from emucore.wire.uet_codes import UET_UDP_PORT
from traffic.fast.nicrx import RECEIVE
from traffic.fast.nicstep import RUN, STEP
from traffic.fast.nictx import TRANSMIT
from traffic.nic.nicconfig import NicConfig
from traffic.nic.uetrx import UetRx, is_uet
from traffic.nic.nicverbs import NicVerbs
from traffic.nic.wakeup import RX_ANC, arrival, enable_rx_stamps, grid_step, next_wake

__all__ = ["Nic", "frame_of", "pkt_of", "pace"]

_NAK = AckKind.NAK.value  #: bits 6:5 of a NAK's AETH syndrome (emucore.wire.ib)


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


class Nic(NicVerbs, UetRx):
    """The NIC: its verbs device plus the data path loop, its sockets and counters."""

    def __init__(self, cfg: NicConfig, open_sockets: bool = True) -> None:
        """Create the device; with open_sockets, bind the raw and UDP sockets."""
        super().__init__(cfg)
        self.rr = 0
        self.pause = EgressPause(cfg.model_bps, self.td)
        self.pause.expired = []  # pauses that ran out: pause_end at their expiry time
        self.link_lab_bps = self.td.lab_rate(cfg.model_bps)
        self.slack = max(0.001, 2 * 9216 * 8 / self.link_lab_bps)
        self.grid = grid_step(cfg, self.slack)
        self.port_next = 0.0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.waiters = 0  # control threads waiting in poll_cq (traffic.nic.ctl)
        self.notified = 0  # the CQs' completions when the waiters were last woken
        self.running = True
        self.wakeups = 0  # select calls of `run` (emu.bench.nicloop)
        self.rx_stamps = False  # the raw socket's frames carry arrival stamps (wakeup)
        self.rx_read = 0  # frames the last step read
        self.realtime = time.time  # CLOCK_REALTIME, the stamps' clock (a fake in tests)
        self.c.update({"rx_frames": 0, "rx_bytes": 0, "tx_frames": 0, "tx_bytes": 0,
                       "tx_errors": 0, "rx_other": 0, "rx_unknown_qp": 0, "pfc_rx": 0,
                       "rx_malformed": 0, "rx_bad_checksum": 0, "rx_unknown_pdc": 0})
        self.raw = self.udp = self.udp_uet = None
        self._buf = bytearray(16384)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        if open_sockets:
            self._open()

    def _open(self) -> None:
        # through the qdisc: PACKET_QDISC_BYPASS would hide our frames from captures
        self.raw = open_port(self.cfg.ifname, bypass_qdisc=False, drain_first=False)
        self.rx_stamps = enable_rx_stamps(self.raw)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # kernel minimum: copies dropped
        u.bind((self.cfg.ip, ROCE_UDP_PORT))
        self.udp = u
        v = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # UET (4793): no ICMP either
        v.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        v.bind((self.cfg.ip, UET_UDP_PORT))
        self.udp_uet = v

    def close(self) -> None:
        """Close the event log (if still open), the wake-up pair and the sockets `_open`
        opened (the process's end)."""
        self.ev.close(time.monotonic())
        for s in (self.wake_r, self.wake_w, self.raw, self.udp, self.udp_uet):
            if isinstance(s, socket.socket):
                s.close()

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
        """One received frame: PFC, CNP, data or ACK/NAK for one of our QPs. A frame the
        NIC cannot parse is dropped and counted (rx_malformed), one whose IPv4 header
        checksum, non-zero UDP checksum or ICRC is wrong too (rx_bad_checksum), as a
        RoCEv2 receiver does (IBA annex A17.3.3; issue 14: fuzzed frames)."""
        c = self.c
        c["rx_frames"] += 1
        c["rx_bytes"] += len(mv)
        if len(mv) < 14:
            c["rx_malformed"] += 1
            return
        if mv[12] == 0x88 and mv[13] == 0x08:
            parsed = parse_pfc(bytes(mv[:60]))
            if parsed is not None:
                c["pfc_rx"] += 1
                self.on_pfc(parsed[0], parsed[1], now)
            else:  # a cut PFC frame, or another MAC control opcode (802.3x PAUSE)
                c["rx_malformed" if len(mv) < 16 or mv[14:16] == OPCODE_PFC else "rx_other"] += 1
            return
        if is_uet(mv):
            self.on_uet(mv, now)
            return
        f = parse(mv, verify_icrc=True, verify_csum=True)
        if f is None:
            c["rx_malformed" if malformed(mv) else "rx_other"] += 1
            return
        if not (f.icrc_ok and f.csum_ok):
            c["rx_bad_checksum"] += 1
            return
        if f.dst_ip != self.cfg.ip:
            c["rx_other"] += 1
            return
        q = self.qps.get(f.dqpn)
        if q is None or q.tmpl is None:
            c["rx_unknown_qp"] += 1
            return
        if f.opcode == Op.CNP:
            q.cnp_rx += 1
            self.ev.emit("cnp_rx", now, qp=q.qpn)
            if q.rp is not None:
                q.rp.on_cnp(self.td.model_time(now))
            return
        if f.ecn == ECN_CE and f.opcode != Op.ACK:
            q.ce_rx += 1
            if q.ce_rx == 1:
                self.ev.emit("ce_first", now, qp=q.qpn)
            if self.np is not None and self.np.on_ce(q.qpn, self.td.model_time(now)):
                if self.send(q.cnp):
                    q.cnp_tx += 1
                    self.ev.emit("cnp_tx", now, qp=q.qpn, dqp=q.tmpl.dqpn)
                    self.meter.record(now, self.clock(), "cnp")
        for r in q.ep.on_packet(pkt_of(f), now):
            self.send(frame_of(q.tmpl, r))
            if r.syndrome >> 5 & 3 == _NAK:
                self.ev.emit("nak_tx", now, qp=q.qpn, psn=r.psn, syndrome=r.syndrome)
        if q.blocked:  # an ACK may have opened the window
            q.blocked = False
            q.ready_at = now

    def on_pfc(self, class_enable: int, quanta: tuple[int, ...], now: float) -> None:
        """A received PFC frame: pause / resume its priorities (pfc_rx, and pause_start /
        pause_end of the data priority)."""
        self.expire_pauses(now)  # pauses that ran out before this frame
        pause, ev, data = self.pause, self.ev, self.cfg.pfc_priority
        was = pause.since[data] >= 0  # the data priority was paused
        pause.on_pfc(class_enable, quanta, now)
        for p in range(8):
            if class_enable >> p & 1:
                ev.emit("pfc_rx", now, prio=p, quanta=quanta[p])
                if p == data and was != bool(quanta[p]):
                    ev.emit("pause_start" if quanta[p] else "pause_end", now, prio=p)

    def expire_pauses(self, now: float) -> None:
        """End the pauses whose time ran out by `now` (pause_end of the data priority at
        its expiry time)."""
        pause = self.pause
        pause.paused_mask(now)
        if pause.expired:
            for p, u in pause.expired:
                if p == self.cfg.pfc_priority:
                    self.ev.emit("pause_end", u, prio=p)
            pause.expired.clear()

    def transmit(self, now: float) -> None:
        """Send data frames while the port and some QP's pacer allow (round robin); a
        QP whose priority is paused waits. Under EMU_DATAPATH auto / fast the C of
        traffic.fast.nictx does it, unless it answers NotImplemented (nothing changed)."""
        if TRANSMIT is not None and TRANSMIT(self, now) is None:
            return
        pause = self.pause
        if now >= pause.next_expiry:
            self.expire_pauses(now)
        paused, resumed_at = pause.mask, pause.resumed_at
        while now >= self.port_next - self.slack and self.order:
            n = len(self.order)
            for i in range(n):
                q = self.order[(self.rr + i) % n]
                if q.blocked or now < q.next_t or paused >> q.prio & 1:
                    continue
                pkt = q.ep.next_packet(now)
                if pkt is None:
                    q.blocked = True
                    continue
                frame = q.build(pkt) if q.build is not None else frame_of(q.tmpl, pkt)
                due = max(q.next_t, self.port_next - self.slack, q.ready_at,
                          resumed_at[q.prio])
                self.send(frame)
                self.meter.record(due, self.clock(), "pacer")
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

    def receive(self, now: float) -> int:
        """Handle what the raw socket holds (at most 256 frames) at `now`; with arrival
        stamps, each frame's wait since its arrival goes to the meter ("rx"). Returns
        the number of frames read. Under EMU_DATAPATH auto / fast the C of
        traffic.fast.nicrx does it (with on_frame's data, ACK and CNP frames of a known QP
        in C, stage by stage as on_frame; every other frame is this on_frame's), unless it
        answers NotImplemented (nothing changed)."""
        if RECEIVE is not None and (k := RECEIVE(self, now)) is not NotImplemented:
            return k
        raw, buf, stamped, k = self.raw, self._buf, self.rx_stamps, 0
        offset = now - self.realtime() if stamped else 0.0  # the stamps' clock
        while k < 256:
            try:
                if stamped:
                    n, anc, _, _ = raw.recvmsg_into([buf], RX_ANC)
                else:
                    n = raw.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # ENETDOWN once after the port lost carrier (a fault):
                self.c["rx_errors"] = self.c.get("rx_errors", 0) + 1  # keep serving
                break
            k += 1
            if stamped:
                t = arrival(anc, offset)
                if t is not None:
                    self.meter.record(t, now, "rx")
            self.on_frame(memoryview(buf)[:n], now)
        return k

    def step(self, now: float, rx: bool = True) -> float:
        """One loop iteration: receive (if `rx`), timers, transmit, the CQ waiters' notify;
        returns the seconds to sleep. Under EMU_DATAPATH auto / fast the C of
        traffic.fast.nicstep does it, stage by stage (calling the C receive and transmit
        directly), unless it answers NotImplemented (nothing changed)."""
        if STEP is not None and (t := STEP(self, now, rx)) is not NotImplemented:
            return t
        self.rx_read = self.receive(now) if rx and self.raw is not None else 0
        for q in self.order:
            d = q.ep.deadline
            if d is not None and now >= d:
                q.ep.on_timer(now)
                if q.ep.deadline != d:  # it fired (not if the QP left RTS meanwhile)
                    self.meter.record(d, now, "rto")
                if q.blocked:
                    q.blocked = False
                    q.ready_at = now
        self.transmit(now)
        if self.waiters:  # a control thread waits in poll_cq: only a completion wakes it
            pushed = sum(c.pushed for c in self.cqs.values())
            if pushed != self.notified:
                self.notified = pushed
                self.cond.notify_all()
        wake = now + 0.05
        paused = self.pause.paused_mask(now)
        for q in self.order:
            if not paused >> q.prio & 1 and not q.blocked and not q.ep.requester.idle():
                wake = min(wake, max(q.next_t, self.port_next - self.slack))
            d = q.ep.deadline
            if d is not None and d > now:  # one that did not fire must not make us spin
                wake = min(wake, d)
        if self.pause.mask:
            wake = min(wake, self.pause.next_expiry)
        return max(0.0, wake - now)

    def run(self) -> None:
        """The data-path loop, until stopped. Under EMU_DATAPATH auto / fast the C of
        traffic.fast.nicstep runs this loop, iteration by iteration the same, unless it
        answers NotImplemented before its first iteration (nothing changed)."""
        tighten_timer_slack()
        if RUN is not None and RUN(self) is not NotImplemented:
            return
        rl, quiet = [self.raw, self.wake_r], [self.wake_r]
        rx, grid = True, self.grid
        while self.running:
            with self.lock:
                now = time.monotonic()
                timeout = self.step(now, rx)
            rx = True
            if timeout > 0:
                self.wakeups += 1
                polling = self.rx_read > 0 and self.rx_stamps and grid > 0
                wake = next_wake(now, timeout, grid, polling)
                r, _, _ = select.select(quiet if polling else rl, [], [],
                                        max(0.0, wake - time.monotonic()))
                rx = polling or self.raw in r
                if self.wake_r in r:
                    try:
                        self.wake_r.recv(4096)
                    except BlockingIOError:
                        pass

    def counters(self) -> dict:
        """NIC-wide and per-QP counters (rates in model bit/s); flushes the event log."""
        now = time.monotonic()
        self.ev.flush()
        return {"gpu": self.cfg.gpu, "ip": self.cfg.ip, "t_lab": now, "tdf": self.cfg.tdf,
                "sched": rtsched.current(),  # emucore.rtsched: its threads all have it
                "link_model_bps": self.cfg.model_bps, **self.c,
                "pfc": self.pause.counters(now),
                "np": {"ce_seen": self.np.ce_seen, "cnps": self.np.cnps} if self.np else None,
                "qps": {str(q): v.snapshot(self.td) for q, v in self.qps.items()},
                "fidelity": {**self.meter.snapshot(), "cpu_s": time.process_time()}}
