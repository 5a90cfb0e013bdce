"""The requester (sending) side of an RDMA RC queue pair, as a pure state machine.

Book ch.9 (Figures 9-5/9-6: the requester builds BTH + RETH from the work request) and
ch.12 (Figures 12-1..12-3, 12-7). IBA Vol. 1 ch.9.7 (PSNs, AckReq, ACK/NAK handling,
go-back-N retransmission on a PSN-sequence NAK or on the local ACK timeout, retry
count; an RNR NAK - the peer had no receive WR for a SEND - holds the QP for the RNR
delay, then goes back to that PSN, at most rnr_retry times: RNR_RETRY_EXC_ERR) and
10.8.3 (a failed WR flushes the rest, the QP goes to ERROR).

Works on packet descriptors (`emucore.wire.ib.RocePkt`); time (`now`, seconds of the
caller's clock) and the pacing decision come from outside. `on_event`, if set, hears
what the RNIC logs (docs/EVENTS.md): on_event(name, now, **fields) for "wr_done"
(wr_id, status), "nak_rx" (psn, syndrome) and "retransmit" (psn, why nak/timeout/rnr).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from emucore.wire.ib import (IMM_OPS, NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, RETH_OPS, AckKind,
                            Op, RocePkt, decode_syndrome, psn_add, psn_diff, psn_lt)
from traffic.counters import SenderCounters
from traffic.fast.rc import NEXT_WRITE, ON_ACK
from traffic.rc.rcconfig import RcConfig
from traffic.rc.segment import packet_count, segment_at
from traffic.verbs import MR, QP, Access, QPState
from traffic.workreq import IMM_WR_OPS, SEND_WR_OPS, WC, WR, WCStatus, wc_opcode_of

__all__ = ["Requester", "RequesterCounters", "FastRequester"]

log = logging.getLogger(__name__)


@dataclass
class RequesterCounters(SenderCounters):
    """Requester statistics."""

    rnr_naks: int = 0


@dataclass(slots=True, eq=False)
class _Msg:
    wr: WR
    mr: MR | None
    first_psn: int
    npkts: int


class Requester:
    """The sending side of an RC QP: segments WRs, retransmits (go-back-N), completes WRs."""

    def __init__(self, qp: QP, cfg: RcConfig | None = None) -> None:
        """Attach to `qp` (must reach RTS before packets flow)."""
        self.qp, self.cfg = qp, cfg or RcConfig()
        self.counters = RequesterCounters()
        self._msgs: list[_Msg] = []
        self._started = False
        self.deadline: float | None = None  # retransmission timer; None = not armed
        self.error: str | None = None  # the WC status that moved the QP to ERROR
        #: on_event(name, now, **fields): wr_done, nak_rx, retransmit (None: not told)
        self.on_event: Callable[..., None] | None = None

    def _start(self) -> None:
        q = self.qp
        self.una = self.nxt = self.tail = self.max_sent = q.sq_psn
        self.retries_left = q.retry_cnt
        self.rnr_left = q.rnr_retry
        self.rnr_hold = False  # an RNR NAK came: nothing is sent until the timer fires
        self._started = True

    @property
    def mtu(self) -> int:
        """Payload bytes per packet."""
        return self.cfg.mtu or self.qp.path_mtu

    def outstanding(self) -> int:
        """Packets sent and not yet acknowledged."""
        return psn_diff(self.max_sent, self.una) if self._started else 0

    def idle(self) -> bool:
        """True when every posted WR is sent and acknowledged."""
        return not self._msgs and not self.qp.sq

    def _pull(self, now: float) -> bool:
        """Move the next WR from the send queue into the PSN space."""
        q = self.qp
        while q.sq:
            wr = q.sq.popleft()
            mr = q.pd.ctx.lookup_lkey(q.pd, wr.lkey)
            if wr.length and (mr is None or not mr.allows(wr.local_addr, wr.length, Access.LOCAL_READ)):
                self._fail(_Msg(wr, None, self.tail, 0), WCStatus.LOC_PROT_ERR, now)
                return False
            n = packet_count(wr.length, self.mtu)
            self._msgs.append(_Msg(wr, mr, self.tail, n))
            self.tail = psn_add(self.tail, n)
            return True
        return False

    def _find(self, psn: int) -> _Msg | None:
        for m in self._msgs:
            if 0 <= psn_diff(psn, m.first_psn) < m.npkts:
                return m
        return None

    def next_packet(self, now: float) -> RocePkt | None:
        """The next packet to send now (a retransmission first), or None (window/queue/state)."""
        q, cfg = self.qp, self.cfg
        if q.state is not QPState.RTS:
            return None
        if not self._started:
            self._start()
        if self.rnr_hold or psn_diff(self.nxt, self.una) >= cfg.window:
            return None
        if self.nxt == self.tail and not self._pull(now):
            return None
        m = self._find(self.nxt)
        assert m is not None, "PSN between una and tail must belong to a message"
        wr, psn = m.wr, self.nxt
        i = psn_diff(psn, m.first_psn)
        seg = segment_at(i, wr.length, self.mtu, cfg.write_only, wr.opcode in IMM_WR_OPS,
                         wr.opcode in SEND_WR_OPS)
        pkt = RocePkt(seg.opcode, q.dest_qpn, psn, pkey=q.pkey, src=q.local_addr, dst=q.remote_addr)
        if seg.size:
            assert m.mr is not None
            pkt.payload = m.mr.view(wr.local_addr + seg.offset, seg.size)
        if seg.opcode in RETH_OPS:
            pkt.rkey = wr.rkey
            pkt.va = wr.remote_addr + (seg.offset if cfg.write_only else 0)
            pkt.dlen = seg.size if cfg.write_only else wr.length
        if seg.opcode in IMM_OPS:
            pkt.imm = wr.imm
        every = cfg.ackreq_every
        pkt.ackreq = (i == m.npkts - 1 or (every > 0 and psn_diff(psn, q.sq_psn) % every == every - 1)
                      or psn_diff(psn, self.una) == cfg.window - 1)
        c = self.counters
        c.packets += 1
        c.bytes += seg.size
        if psn_lt(psn, self.max_sent):
            c.retransmitted += 1
        else:
            self.max_sent = psn_add(psn, 1)
        if self.deadline is None:
            self.deadline = now + q.timeout_s
        self.nxt = psn_add(psn, 1)
        return pkt

    def on_ack(self, aeth: tuple[int, int], psn: int, now: float) -> None:
        """A (coalesced) ACK: aeth = (syndrome, msn); acknowledges every PSN up to `psn`."""
        if not self._started or self.qp.state is QPState.ERROR:
            return
        self.counters.acks += 1
        self._ack_through(psn, now)

    def _ack_through(self, psn: int, now: float) -> None:
        if not (0 <= psn_diff(psn, self.una) < psn_diff(self.max_sent, self.una)):
            return  # stale (already acked) or for a PSN never sent
        self.una = psn_add(psn, 1)
        if psn_lt(self.nxt, self.una):
            self.nxt = self.una
        self.retries_left = self.qp.retry_cnt
        self.rnr_left = self.qp.rnr_retry
        while self._msgs:
            m = self._msgs[0]
            if not psn_lt(psn_add(m.first_psn, m.npkts - 1), self.una):
                break
            self._msgs.pop(0)
            if m.wr.signaled:
                self._complete(m, WCStatus.SUCCESS, now)
        self.deadline = None if self.una == self.max_sent else now + self.qp.timeout_s

    def on_nak(self, psn: int, syndrome: int, now: float) -> None:
        """A NAK for `psn`: earlier PSNs are implicitly acked; then go-back-N or fail the WR."""
        if not self._started or self.qp.state is QPState.ERROR:
            return
        self.counters.naks += 1
        if self.on_event is not None:
            self.on_event("nak_rx", now, psn=psn, syndrome=syndrome)
        if psn_diff(psn, self.una) > 0:
            self._ack_through(psn_add(psn, -1), now)
        kind, code = decode_syndrome(syndrome)
        if not 0 <= psn_diff(psn, self.una) < max(1, psn_diff(self.max_sent, self.una)):
            return  # stale NAK
        if kind is AckKind.RNR_NAK:
            # IBA 9.7.5.2.8: wait the RNR delay, then resend from this PSN
            self.counters.rnr_naks += 1
            self.nxt, self.rnr_hold = psn, True
            self.deadline = now + self.qp.rnr_delay_s
            return
        if code == NAK_PSN_SEQ & 0x1F:
            if self.rnr_hold:
                return  # the RNR NAK's PSN is where we go back to, after the RNR delay
            log.debug("QP %#x: NAK %#x at PSN %#x, go back", self.qp.qpn, syndrome, psn)
            self.nxt = psn
            self.deadline = now + self.qp.timeout_s
            if self.on_event is not None:
                self.on_event("retransmit", now, psn=psn, why="nak")
            return
        status = {NAK_REM_ACCESS & 0x1F: WCStatus.REM_ACCESS_ERR,
                  NAK_INV_REQ & 0x1F: WCStatus.REM_INV_REQ_ERR}.get(code, WCStatus.REM_OP_ERR)
        m = self._find(psn)
        if m is not None:
            self._fail(m, status, now)

    def on_timer(self, now: float) -> None:
        """Retransmission timer: on expiry go back to the oldest unacked PSN, or give up."""
        if self.deadline is None or now < self.deadline or self.qp.state is not QPState.RTS:
            return
        rnr, self.rnr_hold = self.rnr_hold, False  # the RNR delay ran out, or the ACK timeout
        if not rnr:
            self.counters.timeouts += 1
        if (self.rnr_left if rnr else self.retries_left) <= 0:
            m = self._find(self.una)
            if m is not None:
                self._fail(m, WCStatus.RNR_RETRY_EXC_ERR if rnr else WCStatus.RETRY_EXC_ERR, now)
            return
        if rnr:
            self.rnr_left -= 1
        else:
            self.retries_left -= 1
        self.nxt = self.una  # after an RNR NAK, una is its PSN (everything before is acked)
        self.deadline = now + self.qp.timeout_s
        if self.on_event is not None:
            self.on_event("retransmit", now, psn=self.una, why="rnr" if rnr else "timeout")

    def on_response(self, pkt: RocePkt, now: float) -> None:
        """Dispatch an ACK/NAK packet addressed to this QP."""
        if pkt.opcode != Op.ACK or pkt.dqpn != self.qp.qpn or pkt.syndrome is None:
            return
        try:
            kind, _ = decode_syndrome(pkt.syndrome)
        except ValueError:
            return
        if kind is AckKind.ACK:
            self.on_ack((pkt.syndrome, pkt.msn or 0), pkt.psn, now)
        else:
            self.on_nak(pkt.psn, pkt.syndrome, now)

    def _complete(self, m: _Msg, status: WCStatus, now: float) -> None:
        self.counters.completions += 1
        self.qp.send_cq.push(WC(m.wr.wr_id, status, wc_opcode_of(m.wr.opcode),
                                m.wr.length if status is WCStatus.SUCCESS else 0, self.qp.qpn))
        if self.on_event is not None:
            self.on_event("wr_done", now, wr_id=m.wr.wr_id, status=status.value)

    def _fail(self, m: _Msg, status: WCStatus, now: float) -> None:
        """Complete `m` in error, flush everything else, move the QP to ERROR (IBA 10.8.3)."""
        log.info("QP %#x: WR %s failed: %s", self.qp.qpn, m.wr.wr_id, status.value)
        self.error = status.value
        todo = self._msgs + ([] if m in self._msgs else [m])
        self._msgs = []
        for x in todo:
            self._complete(x, status if x is m else WCStatus.WR_FLUSH_ERR, now)
        while self.qp.sq:
            self._complete(_Msg(self.qp.sq.popleft(), None, 0, 0), WCStatus.WR_FLUSH_ERR, now)
        self.deadline = None
        self.qp.to_error()


class FastRequester(Requester):
    """A Requester whose next WRITE packet of a message already in the PSN space is built
    in C, and whose ACKs of new PSNs are taken in C (traffic.fast.rc, chosen by
    EMU_DATAPATH); everything else (a new WR, SEND, NAK, RNR NAK, stale ACK), and the
    whole of it on the Python data path, is the reference `Requester` above."""

    def next_packet(self, now: float) -> RocePkt | None:
        """As Requester.next_packet."""
        p = NEXT_WRITE(self, now)  # RcEndpoint makes one only when the C is chosen
        return Requester.next_packet(self, now) if p is NotImplemented else p

    def on_response(self, pkt: RocePkt, now: float) -> None:
        """As Requester.on_response."""
        if ON_ACK(self, pkt, now) is NotImplemented:
            Requester.on_response(self, pkt, now)
