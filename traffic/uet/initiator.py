"""The sending side of a UET PDC: messages to packets, the window, retransmission,
completions (issue 16 "RUD", "NSCC"; the seed 004 "Packet Delivery Sublayer"). Pure: time
(`now`, the caller's clock) and randomness come from outside; works on the verbs objects of
traffic.verbs (the QP's send queue, MRs, send CQ) and returns packet descriptors (`TxReq`)
the NIC turns into frames.

* A work request (RDMA WRITE or SEND, with immediate) is one SES message: packets of at
  most the MTU, each with its SES header (`seshdr`). ACK-requested (AR) marks the last,
  a packet that fills the window and every retransmission: the target ACKs only every
  `ack_every` packets otherwise, and a sender blocked on its window would wait for the RTO.
* The PDC is set up on the fly: until the first ACK names the target's PDC, packets
  carry SYN and their offset from the start PSN (at most `syn_window` of them).
* In flight is bounded by NSCC's window (bytes); the entropy value of each packet comes
  from `ev.Entropy` (spraying).
* ACKs: the cumulative PSN and the 64-bit SACK bitmap acknowledge packets; each newly
  acknowledged byte feeds NSCC with the RTT of the packet that triggered the ACK (none
  for a retransmitted one) and the ECN echo; a message is complete - its WR completes on
  the send CQ - when all its packets are acknowledged, in any order.
* A NACK TRIMMED / TRIMMED_LASTHOP tells NSCC (the bytes in flight still counting the
  packet), then takes the packet out of flight - bytes off `inflight_bytes`, no RTO - into
  the retransmit queue `rtxq`; the lowest queued PSN is sent again before any new data,
  but only when the window holds it, as new data. An ACK for a packet waiting there takes
  it out, feeding NSCC nothing. So uet-htsim (40ccb05, `htsim/sim/uec.cpp`):
  `UecSrc::processNack` -> `queueForRtx`; `sendIfPermitted` / `timeToSend` check
  `can_send_NSCC` on the head of `_rtx_queue` (a map by sequence number; SLEEK's bypass is
  off by default); `handleAckno`, `handleCumulativeAck`.
* A packet not acknowledged within the RTO goes the same way, and NSCC's window loses its
  bytes (cwnd = max(cwnd - size, MTU)): uet-htsim's `rtxTimerExpired` ->
  `mark_packet_for_retransmission` (`_in_flight -= size`, that cwnd cut) -> `queueForRtx`.
  After `retries` resends of one packet the WR fails with RETRY_EXC_ERR, the rest are
  flushed and the QP goes to ERROR (as RC).
* Other retransmissions go at once, their bytes still in flight: ROD_OOO resends
  everything from that PSN (ROD, go back); NO_RESOURCE (a SEND the target had no
  receive for) that packet after the RNR delay, at most `rnr_retries` times (then
  RNR_RETRY_EXC_ERR, as RC). An SES response whose return code is not OK fails
  its message's WR (BAD_MKEY / BAD_ADDR / TOO_LONG: REM_ACCESS_ERR, else REM_OP_ERR).
SACK holes alone trigger nothing: with spraying a hole is reordering, not loss.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable

from emucore.wire.uet_codes import F_AR, F_RETX, NackCode, RetCode
from emucore.wire.uet_codec import SesReq
from traffic.counters import SenderCounters
from traffic.uet.uetconfig import UetConfig
from traffic.uet.ev import Entropy
from traffic.uet.nscc import Nscc
from traffic.uet.seshdr import ses_header
from traffic.verbs import MR, QP, Access, QPState
from traffic.workreq import WC, WR, WCStatus, wc_opcode_of

MASK32 = 0xFFFFFFFF
#: SES return codes that fail the WR REM_ACCESS_ERR (the rest: REM_OP_ERR)
_ACCESS = (RetCode.BAD_MKEY, RetCode.BAD_ADDR, RetCode.TOO_LONG)


def psn_add(a: int, n: int) -> int:
    """PSN arithmetic (32 bits)."""
    return (a + n) & MASK32


def psn_diff(a: int, b: int) -> int:
    """a - b in the 32-bit PSN space, as a signed number."""
    d = (a - b) & MASK32
    return d - (1 << 32) if d >= 1 << 31 else d


@dataclass(slots=True)
class TxReq:
    """A request packet to send: the PDS fields, its SES header, payload, entropy value."""

    psn: int
    dpdcid: int | None          # None: SYN (with psn_offset)
    flags: int
    ses: SesReq
    payload: memoryview
    ev: int
    psn_offset: int = 0


@dataclass(slots=True, eq=False)
class _Msg:
    wr: WR
    mr: MR | None
    message_id: int
    npkts: int
    left: int                   # packets not yet acknowledged


@dataclass(slots=True)
class _Pkt:
    msg: _Msg
    index: int
    size: int
    sent_at: float = 0.0
    ev: int = 0
    retx: int = 0               # times sent again
    rnr: int = 0                # times NACKed NO_RESOURCE


@dataclass
class InitiatorCounters(SenderCounters):
    """Requester-side statistics: the shared ones and UET's own (NACK codes, SACKs, ECN
    echoes)."""

    nack_trimmed: int = 0
    nack_trimmed_lasthop: int = 0
    nack_no_resource: int = 0
    nack_other: int = 0
    sacked: int = 0
    ecn_echoes: int = 0


class Initiator:
    """The sending side of one UET endpoint (one PDC towards the peer)."""

    def __init__(self, qp: QP, cfg: UetConfig, spdcid: int, link_bps: float,
                 rng: random.Random, job_id: int = 0) -> None:
        self.qp, self.cfg, self.spdcid, self.job_id = qp, cfg, spdcid, job_id
        self.dpdcid: int | None = None
        self.start_psn = rng.getrandbits(32)
        self.next_psn = self.start_psn
        self.cack = psn_add(self.start_psn, -1)      # highest PSN below which all are acked
        self.nscc = Nscc(link_bps, cfg.mtu, cfg.nscc)
        self.entropy = Entropy.of(cfg, rng)
        self.inflight: OrderedDict[int, _Pkt] = OrderedDict()  # psn -> packet, oldest send first
        self.inflight_bytes = 0
        self.retx: deque[int] = deque()             # resend at once (RNR, ROD_OOO)
        self.rtxq: dict[int, _Pkt] = {}             # psn -> trimmed / timed out, out of flight
        self.rnr_wait: deque[tuple[float, int]] = deque()  # (resend at, psn), in time order
        self.msgs: deque[_Msg] = deque()            # messages with packets still to send
        self.open: dict[int, _Msg] = {}             # message id -> message not yet complete
        self.cur: _Msg | None = None
        self.cur_index = 0
        self.message_id = rng.getrandbits(16)
        self.counters = InitiatorCounters()
        self.error: str | None = None
        #: on_event(name, now, **fields): wr_done, nak_rx, retransmit (None: not told)
        self.on_event: Callable[..., None] | None = None

    # -- state -------------------------------------------------------------------------
    def idle(self) -> bool:
        """True when every posted WR is sent and acknowledged."""
        return not self.open and not self.qp.sq and self.cur is None

    @property
    def deadline(self) -> float | None:
        """When the oldest packet in flight times out (None: nothing in flight)."""
        if not self.inflight:
            return None
        rto = next(iter(self.inflight.values())).sent_at + self.cfg.rto_s
        return min(rto, self.rnr_wait[0][0]) if self.rnr_wait else rto

    # -- sending -----------------------------------------------------------------------
    def _pull(self, now: float) -> bool:
        q = self.qp
        while q.sq:
            wr = q.sq.popleft()
            mr = q.pd.ctx.lookup_lkey(q.pd, wr.lkey)
            if wr.length and (mr is None or not mr.allows(wr.local_addr, wr.length,
                                                           Access.LOCAL_READ)):
                self._fail(_Msg(wr, None, 0, 0, 0), WCStatus.LOC_PROT_ERR, now)
                return False
            n = max(1, -(-wr.length // self.cfg.mtu))
            self.message_id = (self.message_id + 1) & 0xFFFF
            m = _Msg(wr, mr, self.message_id, n, n)
            self.open[m.message_id] = m
            self.cur, self.cur_index = m, 0
            return True
        return False

    def _tx(self, p: _Pkt, psn: int, now: float, retx: bool, ar: bool = False) -> TxReq:
        m, mtu = p.msg, self.cfg.mtu
        off = p.index * mtu
        payload = (m.mr.view(m.wr.local_addr + off, p.size) if p.size and m.mr is not None
                   else memoryview(b""))
        ar = ar or retx or p.index == m.npkts - 1
        flags = (F_AR if ar else 0) | (F_RETX if retx else 0)
        p.sent_at, p.ev = now, self.entropy.next()
        c = self.counters
        c.packets += 1
        c.bytes += p.size
        ses = ses_header(m.wr, m.message_id, m.npkts, p.index, p.size, mtu, self.job_id,
                         self.qp.dest_qpn)
        syn = self.dpdcid is None
        return TxReq(psn, self.dpdcid, flags, ses, payload, p.ev,
                     psn_diff(psn, self.start_psn) if syn else 0)

    def next_packet(self, now: float) -> TxReq | None:
        """The next packet to send now (a retransmission first), or None."""
        if self.qp.state is not QPState.RTS:
            return None
        while self.retx:
            psn = self.retx.popleft()
            p = self.inflight.get(psn)
            if p is None:
                continue  # acknowledged meanwhile
            self.inflight.move_to_end(psn)
            self.counters.retransmitted += 1
            return self._tx(p, psn, now, True)
        if self.rtxq:  # the lowest queued PSN, within the window, before new data
            psn = min(self.rtxq, key=lambda q: psn_diff(q, self.cack))
            p = self.rtxq[psn]
            if self.inflight and self.inflight_bytes + p.size > self.nscc.cwnd:
                return None
            del self.rtxq[psn]
            self.inflight[psn] = p
            self.inflight_bytes += p.size
            self.counters.retransmitted += 1
            return self._tx(p, psn, now, True)
        if self.cur is None and not self._pull(now):
            return None
        m = self.cur
        assert m is not None
        size = min(self.cfg.mtu, m.wr.length - self.cur_index * self.cfg.mtu)
        size = max(size, 0)
        if self.inflight and self.inflight_bytes + size > self.nscc.cwnd:
            return None
        if self.dpdcid is None and psn_diff(self.next_psn, self.start_psn) >= self.cfg.syn_window:
            return None
        psn = self.next_psn
        p = _Pkt(m, self.cur_index, size)
        self.inflight[psn] = p
        self.inflight_bytes += size
        self.next_psn = psn_add(psn, 1)
        self.cur_index += 1
        if self.cur_index >= m.npkts:
            self.cur = None
        # the window is full after this one: ask for the ACK now, or the target may sit on
        # 1..ack_every-1 packets while we wait for them to be acknowledged (the RTO)
        full = self.inflight_bytes + self.cfg.mtu > self.nscc.cwnd
        return self._tx(p, psn, now, False, ar=full)

    # -- acknowledgements --------------------------------------------------------------
    def _acked(self, psn: int, now: float) -> int:
        """Acknowledge `psn`: the bytes it takes out of flight (0 for one that waited in
        `rtxq`: uet-htsim's `handleAckno` feeds NSCC nothing for it)."""
        p = self.inflight.pop(psn, None)
        if p is not None:
            self.inflight_bytes -= p.size
            got = max(p.size, 1)
        elif (p := self.rtxq.pop(psn, None)) is None:
            return 0
        else:
            got = 0
        m = p.msg
        m.left -= 1
        if m.left == 0:
            self.open.pop(m.message_id, None)
            if m.wr.signaled:
                self._complete(m, WCStatus.SUCCESS, now)
        return got

    def on_ack(self, cack: int, ack_psn: int, spdcid: int, sack_offset: int, sack_bitmap: int,
               ecn: bool, now: float, rsp: tuple[int, int, int, int, int] | None = None) -> None:
        """An ACK: everything up to `cack` and the SACKed PSNs are acknowledged. `rsp`, an
        SES response (opcode, return code, message id, job, length) on the ACK of the
        packet that completed a message: a return code other than OK fails that WR."""
        if self.qp.state is QPState.ERROR:
            return
        if rsp is not None and rsp[1] not in (RetCode.OK, RetCode.NULL):
            p = self.inflight.get(ack_psn)
            if p is not None:
                bad = (WCStatus.REM_ACCESS_ERR if rsp[1] in _ACCESS
                       else WCStatus.REM_OP_ERR)
                self._fail(p.msg, bad, now)
                return
        c = self.counters
        c.acks += 1
        if ecn:
            c.ecn_echoes += 1
        if self.dpdcid is None:
            self.dpdcid = spdcid  # the target's PDC: SYN is over
        trigger = self.inflight.get(ack_psn)
        rtt = now - trigger.sent_at if trigger is not None and not trigger.retx else None
        if trigger is not None:
            self.entropy.feedback(trigger.ev, ecn, now)
        newly = 0
        if psn_diff(cack, self.cack) > 0 and psn_diff(cack, self.next_psn) < 0:
            for psn in [*self.inflight, *self.rtxq]:
                if psn_diff(psn, cack) <= 0:
                    newly += self._acked(psn, now)
            self.cack = cack
        base = psn_add(cack, sack_offset)
        bits = sack_bitmap
        i = 0
        while bits:
            if bits & 1:
                got = self._acked(psn_add(base, i), now)
                if got:
                    c.sacked += 1
                    newly += got
            bits >>= 1
            i += 1
        if newly:
            self.nscc.on_ack(now, newly, rtt, ecn, self.inflight_bytes)

    def on_nack(self, code: int, psn: int, now: float) -> None:
        """A NACK: trimmed -> that packet out of flight, to be resent within the window;
        ROD out of order -> resend from it."""
        if self.qp.state is QPState.ERROR:
            return
        c = self.counters
        c.naks += 1
        if self.on_event is not None:
            self.on_event("nak_rx", now, psn=psn, syndrome=code)
        p = self.inflight.get(psn)
        if code in (NackCode.TRIMMED, NackCode.TRIMMED_LASTHOP):
            if code == NackCode.TRIMMED:
                c.nack_trimmed += 1
            else:
                c.nack_trimmed_lasthop += 1
            if p is not None:  # NSCC first, then out of flight (uet-htsim's order)
                self.nscc.on_nack(now, max(p.size, 1), self.inflight_bytes)
                self._queue_rtx(psn, p, now, "trimmed")
            return
        if code == NackCode.NO_RESOURCE and p is not None:
            # the target had no receive posted for this SEND: try again after the RNR delay
            c.nack_no_resource += 1
            p.rnr += 1
            if p.rnr > self.cfg.rnr_retries:
                self._fail(p.msg, WCStatus.RNR_RETRY_EXC_ERR, now)
                return
            p.sent_at = now  # no RTO meanwhile
            self.inflight.move_to_end(psn)
            self.rnr_wait.append((now + self.cfg.rnr_s, psn))
            return
        c.nack_other += 1
        if code == NackCode.ROD_OOO:
            for q in self.inflight:
                if psn_diff(q, psn) >= 0 and q not in self.retx:
                    self.inflight[q].retx += 1
                    self.retx.append(q)
            self._event_retx(psn, now, "rod_ooo")

    def _queue_rtx(self, psn: int, p: _Pkt, now: float, why: str) -> None:
        """`psn` out of flight into the retransmit queue (uet-htsim `queueForRtx`)."""
        p.retx += 1
        del self.inflight[psn]
        self.inflight_bytes -= p.size
        self.rtxq[psn] = p
        self._event_retx(psn, now, why)

    def _event_retx(self, psn: int, now: float, why: str) -> None:
        if self.on_event is not None:
            self.on_event("retransmit", now, psn=psn, why=why)

    def on_timer(self, now: float) -> None:
        """RNR delays over: resend at once. Timed out: out of flight, off the window, into
        `rtxq` (uet-htsim `rtxTimerExpired`); a packet out of retries fails its WR."""
        if self.qp.state is not QPState.RTS:
            return
        while self.rnr_wait and self.rnr_wait[0][0] <= now:
            _t, psn = self.rnr_wait.popleft()
            if psn in self.inflight and psn not in self.retx:
                self.inflight[psn].sent_at = now
                self.inflight.move_to_end(psn)
                self.retx.append(psn)
                self._event_retx(psn, now, "rnr")
        for psn, p in list(self.inflight.items()):
            if p.sent_at + self.cfg.rto_s > now:
                break
            if p.retx >= self.cfg.retries:
                self._fail(p.msg, WCStatus.RETRY_EXC_ERR, now)
                return
            self.counters.timeouts += 1
            self.entropy.timeout(now)
            self.nscc.on_timeout(p.size)  # `mark_packet_for_retransmission`
            self._queue_rtx(psn, p, now, "timeout")  # no RTO until it is sent again

    # -- completions -------------------------------------------------------------------
    def _complete(self, m: _Msg, status: WCStatus, now: float) -> None:
        self.counters.completions += 1
        self.qp.send_cq.push(WC(m.wr.wr_id, status, wc_opcode_of(m.wr.opcode),
                                m.wr.length if status is WCStatus.SUCCESS else 0, self.qp.qpn))
        if self.on_event is not None:
            self.on_event("wr_done", now, wr_id=m.wr.wr_id, status=status.value)

    def _fail(self, m: _Msg, status: WCStatus, now: float) -> None:
        """Complete `m` in error, flush everything else, the QP to ERROR (as RC)."""
        self.error = status.value
        todo = [x for x in self.open.values() if x is not m]
        self.open.clear()
        self._complete(m, status, now)
        for x in todo:
            self._complete(x, WCStatus.WR_FLUSH_ERR, now)
        while self.qp.sq:
            self._complete(_Msg(self.qp.sq.popleft(), None, 0, 0, 0), WCStatus.WR_FLUSH_ERR, now)
        self.inflight.clear()
        self.inflight_bytes = 0
        self.retx.clear()
        self.rtxq.clear()
        self.rnr_wait.clear()
        self.cur = None
        self.qp.to_error()
