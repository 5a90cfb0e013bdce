"""The receiving side of a UET PDC: placement, PSN tracking, ACKs, NACKs (issue 16;
docs/UET.md "RUD", "Packet trimming"; the seed 004 "Packet Delivery
Sublayer"). Pure: works on parsed frames (`emucore.wire.uet_codec.UetFields`) and the
verbs objects of traffic.verbs (MRs by memory key, the receive queue and CQ); returns
ACK / NACK descriptors (`TxAck`, `TxNack`) for the NIC to send.

* The PDC is created by the first packet that carries SYN: its start PSN is the packet's
  PSN minus its PSN offset, so every PSN is placed relative to it.
* RUD: every packet is placed on arrival at the message's buffer offset plus its message
  offset (memory key = R_Key, bounds and remote-write checked; a message outside its
  key's region is acknowledged but not placed, and its SES response says BAD_MKEY or
  BAD_ADDR: the initiator fails the WR REM_ACCESS_ERR); a bitmap of PSNs past the
  cumulative one tracks what arrived; duplicates are not placed again, only re-ACKed.
  A message is complete when all of its bytes arrived; then, with header data (a WRITE
  with immediate), a posted receive is consumed and completed on the receive CQ with the
  immediate, and the next ACK carries an SES response (RESPONSE, OK, mod length).
* SEND: the first packet of a message that arrives (any of them: RUD) claims the oldest
  posted receive and every packet lands at its address + message offset; complete, the
  receive completes RECV (with the immediate of header data). On RUD two SENDs may
  claim their receives in either order - as UET's RUD promises no ordering between
  messages; ROD does. With no receive posted the packet is not placed and is NACKed
  NO_RESOURCE (the initiator tries it again after its RNR delay). A message longer than
  the posted buffer completes the receive LOC_LEN_ERR, is acknowledged but not placed,
  and its SES response says RC_TOO_LONG (0x22, UE 1.0.1's SES return-code table).
* A single-packet message (SOM and EOM) completes on its own; medium and small SES
  headers carry no message ID.
* ROD: only the next PSN is accepted; another one is dropped and NACKed ROD_OOO (once
  per gap) so that the sender goes back.
* ACKs (ACK_CC): cumulative PSN, the PSN that triggered it, a 64-bit SACK bitmap of the
  PSNs after the cumulative one, the ECN echo (M: a CE-marked packet arrived since the
  last ACK), the bytes and out-of-order packets since the last ACK; one every `ack_every`
  packets, on AR, on a completed message, on the first packet of the PDC, on a duplicate.
* A trimmed packet (its DSCP is the trimmed code point: a switch cut its payload) is not
  placed: NACK TRIMMED, or TRIMMED_LASTHOP when the last-hop code point says the cut was
  at the switch facing this NIC (emu's convention: the code points are configuration).
  A trimmed packet that carried AR (kept in its header) is also answered with an ACK of
  the packets received since the last ACK, after the NACK.
"""

from __future__ import annotations

from dataclasses import dataclass

from emucore.wire.dscp import ECN_CE
from emucore.wire.uet_codes import (F_AR, F_SYN, S_EOM, S_HD, S_SOM, NackCode, RetCode, RspOpcode,
                                   SesOpcode)
from emucore.wire.uet_codec import UetFields
from traffic.counters import ReceiverCounters
from traffic.uet.uetconfig import UetConfig
from traffic.uet.initiator import psn_add, psn_diff
from traffic.verbs import MR, QP, Access, QPState
from traffic.workreq import WC, RecvWR, WCOpcode, WCStatus

SACK_BITS = 64


@dataclass(slots=True)
class TxAck:
    """An ACK_CC to send."""

    cack_psn: int
    ack_psn_offset: int
    dpdcid: int
    flags: int
    sack_offset: int
    sack_bitmap: int
    rcvd_bytes: int
    ooo_count: int
    rsp: tuple[int, int, int, int, int] | None = None


@dataclass(slots=True)
class TxNack:
    """A NACK to send."""

    code: int
    psn: int
    dpdcid: int
    payload: int


@dataclass
class TargetCounters(ReceiverCounters):
    """Responder-side statistics: the shared ones and UET's own (names as
    traffic.rc.responder's where they match)."""

    nacks: int = 0
    trimmed: int = 0
    trimmed_lasthop: int = 0
    messages: int = 0
    ce_seen: int = 0
    drop_access: int = 0
    no_recv: int = 0
    recv_len_err: int = 0
    drop_rod: int = 0
    drop_window: int = 0


class Target:
    """The receiving side of one UET endpoint: the PDC the peer's initiator set up."""

    def __init__(self, qp: QP, cfg: UetConfig, local_pdcid: int, peer_pdcid: int,
                 start_psn: int, trimmed_dscps: tuple[int, int] = (-1, -1)) -> None:
        self.qp, self.cfg = qp, cfg
        self.pdcid, self.peer = local_pdcid, peer_pdcid
        self.cack = psn_add(start_psn, -1)
        self.seen = 0                   # bit i = PSN cack + 1 + i arrived
        self.highest = self.cack
        self.trimmed_dscp, self.lasthop_dscp = trimmed_dscps
        self.msgs: dict[int, list] = {}  # message id -> [bytes still to arrive, immediate]
        #: SEND message id -> (receive WR, its MR, the message fits, the length claimed with)
        self.recvs: dict[int, tuple[RecvWR, MR | None, bool, int]] = {}
        self.done_rsp: tuple[int, int, int, int, int] | None = None
        self.since_ack = self.bytes_since = self.ooo_since = 0
        self.ce_since = False
        self.rod_nacked = False
        self._single_rx: tuple[RecvWR, MR | None, bool, int] | None = None  # one-packet SEND
        self.counters = TargetCounters()

    def _ack(self, psn: int) -> TxAck:
        self.counters.acks += 1
        off = psn_diff(psn, self.cack)
        ack = TxAck(self.cack, off if -32768 <= off <= 32767 else 0, self.peer,
                    0x20 if self.ce_since else 0, 1, self.seen & ((1 << SACK_BITS) - 1),
                    self.bytes_since, self.ooo_since, self.done_rsp)
        self.since_ack = self.bytes_since = self.ooo_since = 0
        self.ce_since = False
        self.done_rsp = None
        return ack

    def _nack(self, code: int, psn: int) -> TxNack:
        self.counters.nacks += 1
        return TxNack(code, psn, self.peer, psn_add(self.highest, 1))

    def on_packet(self, f: UetFields) -> list[TxAck | TxNack]:
        """One request packet of this PDC; returns what to send back."""
        c = self.counters
        c.packets += 1
        if self.qp.state not in (QPState.RTR, QPState.RTS):
            return []
        if f.dscp in (self.trimmed_dscp, self.lasthop_dscp):
            last = f.dscp == self.lasthop_dscp
            if last:
                c.trimmed_lasthop += 1
            else:
                c.trimmed += 1
            out: list[TxAck | TxNack] = [
                self._nack(NackCode.TRIMMED_LASTHOP if last else NackCode.TRIMMED, f.psn)]
            if f.flags & F_AR and self.since_ack:
                # the trimmed header still asks for an ACK: without it the packets held
                # since the last one stay in the sender's flight, its window (cut by the
                # NACK) holds the retransmission back, and only the RTO ends the wait
                out.append(self._ack(f.psn))
            return out
        if f.ecn == ECN_CE:
            c.ce_seen += 1
            self.ce_since = True
        d = psn_diff(f.psn, self.cack) - 1   # 0: the next in order
        if d < 0 or (d < SACK_BITS * 64 and self.seen >> d & 1):
            c.duplicates += 1
            return [self._ack(f.psn)]
        if self.cfg.mode == "rod" and d > 0:
            c.drop_rod += 1
            if self.rod_nacked:
                return []
            self.rod_nacked = True
            return [self._nack(NackCode.ROD_OOO, psn_add(self.cack, 1))]
        if d >= 1 << 20:
            c.drop_window += 1
            return []
        ses, fail = f.ses, None
        if ses is not None and ses.opcode == SesOpcode.SEND:
            if not self._place_send(ses, f.payload):
                c.no_recv += 1
                return [self._nack(NackCode.NO_RESOURCE, f.psn)]
        elif ses is None:
            c.drop_access += 1
            return [self._nack(NackCode.NO_RESOURCE, f.psn)]
        else:
            fail = self._place(ses, f.payload)
            if fail is not None:
                c.drop_access += 1
        if d > 0:
            c.out_of_order += 1
            self.ooo_since += 1
        self.rod_nacked = False
        self.seen |= 1 << d
        if psn_diff(f.psn, self.highest) > 0:
            self.highest = f.psn
        while self.seen & 1:
            self.seen >>= 1
            self.cack = psn_add(self.cack, 1)
        self.since_ack += 1
        self.bytes_since += len(f.payload)
        completed = self._progress(ses, len(f.payload), fail)
        if (completed or f.flags & (F_AR | F_SYN) and self.since_ack == 1
                or f.flags & F_AR or self.since_ack >= self.cfg.ack_every):
            return [self._ack(f.psn)]
        return []

    def _place(self, ses, payload: memoryview) -> int | None:
        """A WRITE packet into the memory of its key; the SES return code when it cannot
        be (BAD_MKEY: no remotely writable region of that key; BAD_ADDR: the message's
        range is not inside it - checked for the whole message on every packet, so a
        bad message places nothing, as RC's responder)."""
        n = len(payload)
        if not n:
            return None
        q = self.qp
        mr = q.pd.ctx.lookup_rkey(q.pd, ses.mem_key)
        if mr is None or not mr.access & Access.REMOTE_WRITE:
            return RetCode.BAD_MKEY
        va = ses.buffer_offset + ses.message_offset
        if (not mr.contains(ses.buffer_offset, ses.request_length)
                or ses.message_offset + n > ses.request_length):
            return RetCode.BAD_ADDR
        mr.view(va, n)[:] = payload
        self.counters.bytes_placed += n
        return None

    @staticmethod
    def _single(ses) -> bool:
        return ses.flags & (S_SOM | S_EOM) == S_SOM | S_EOM

    def _place_send(self, ses, payload: memoryview) -> bool:
        """A SEND packet into its message's receive buffer; False: no receive posted."""
        key = None if self._single(ses) else ses.message_id
        rx = self.recvs.get(key) if key is not None else None
        q = self.qp
        if rx is None:
            wqe = q.take_recv()
            if wqe is None:
                return False
            mr = q.pd.ctx.lookup_lkey(q.pd, wqe.lkey) if wqe.length else None
            fits = ses.request_length <= wqe.length and (not ses.request_length or (
                mr is not None and mr.allows(wqe.addr, ses.request_length, Access.LOCAL_WRITE)))
            rx = (wqe, mr, fits, ses.request_length)
            if key is not None:
                self.recvs[key] = rx
            else:
                self._single_rx = rx
            if not fits:
                self.counters.recv_len_err += 1
                q.recv_cq.push(WC(wqe.wr_id, WCStatus.LOC_LEN_ERR, WCOpcode.RECV, 0, q.qpn))
        wqe, mr, fits, length = rx
        n = len(payload)
        if fits and n and mr is not None and ses.message_offset + n <= length:
            mr.view(wqe.addr + ses.message_offset, n)[:] = payload
            self.counters.bytes_placed += n
        return True

    def _progress(self, ses, n: int, fail: int | None = None) -> bool:
        """Count a packet's bytes into its message (`fail`: the SES return code of a
        packet that could not be placed); True when the message completed."""
        single = self._single(ses)
        st = None if single else self.msgs.get(ses.message_id)
        if st is None:
            st = [ses.request_length, None, None]
            if not single:
                self.msgs[ses.message_id] = st
        if fail is not None:
            st[2] = fail
        if ses.flags & S_HD:  # the first packet carries the immediate (header data)
            st[1] = ses.header_data
        st[0] -= n
        if st[0] > 0:
            return False
        if not single:
            del self.msgs[ses.message_id]
        self.counters.messages += 1
        rc, q = st[2] or RetCode.OK, self.qp
        if ses.opcode == SesOpcode.SEND:
            rx = self._single_rx if single else self.recvs.pop(ses.message_id)
            assert rx is not None
            wqe, _mr, fits, _n = rx
            if fits:
                q.recv_cq.push(WC(wqe.wr_id, WCStatus.SUCCESS, WCOpcode.RECV,
                                  ses.request_length, q.qpn, st[1]))
            else:
                rc = RetCode.TOO_LONG
        elif st[1] is not None and rc == RetCode.OK:
            wqe = q.take_recv()
            q.recv_cq.push(WC(wqe.wr_id if wqe else 0, WCStatus.SUCCESS,
                              WCOpcode.RECV_RDMA_WITH_IMM, ses.request_length, q.qpn, st[1]))
        self.done_rsp = (RspOpcode.RESPONSE, rc, ses.message_id, ses.job_id,
                         ses.request_length if rc == RetCode.OK else 0)
        return True
