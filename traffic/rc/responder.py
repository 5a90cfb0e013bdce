"""The responder (receiving) side of an RDMA RC queue pair, as a pure state machine.

Book ch.9 (Figure 9-6: the responder checks P_Key and R_Key, places the payload in the
registered memory, completes a WRITE with immediate on the receive CQ; a SEND lands in
the buffer of the oldest posted receive WR, which completes RECV - with none posted it
is answered by an RNR NAK, IBA 9.7.5.2.8, and is tried again; longer than the buffer
it completes LOC_LEN_ERR and is NAKed invalid request, IBA 9.7.4.1.4) and ch.12
(Figure 12-7: sprayed WRITE ONLY packets placed in any order). IBA Vol. 1 ch.9.7
(expected PSN, duplicates re-ACKed not re-executed 9.9.2, one PSN-sequence NAK per gap,
NAK codes of Table 45), 10.9.3 (P_Key check); packets for a wrong QP or P_Key, or with
an opcode of another transport service (bits 7:5 of the opcode not RC, Table 38), are
dropped silently. As Linux rxe's responder (rxe_resp.c: check_psn before check_op_seq
and check_op_valid), the PSN is judged before the opcode, so that a stray frame with a
bad opcode and a PSN that is not the expected one is a sequence error or a duplicate,
not a fatal invalid request (issue 14: fuzzed frames).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from emucore.wire.ib import (END_OPS, IMM_OPS, NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, RETH_OPS,
                            SEND_OPS, WRITE_OPS, Op, RocePkt, encode_ack, pkey_match, psn_add,
                            psn_diff, psn_lt)
from traffic.counters import ReceiverCounters
from traffic.fast.rc import IN_ORDER_SEND, IN_ORDER_WRITE
from traffic.rc.rcconfig import RcConfig
from traffic.verbs import MR, QP, Access, QPState
from traffic.workreq import WC, RecvWR, WCOpcode, WCStatus

#: the RNR NAK syndrome emu's responder sends: kind 01, timer code 12 = 0.64 ms (IBA
#: Table 45); the requester waits its QP's rnr_delay_s (by default that same 0.64 ms)
RNR_NAK_SYNDROME = 0x20 | 12
_SEND_STARTS = frozenset({Op.SEND_FIRST, Op.SEND_ONLY, Op.SEND_ONLY_IMM})

__all__ = ["Responder", "ResponderCounters", "FastResponder"]

log = logging.getLogger(__name__)


@dataclass
class ResponderCounters(ReceiverCounters):
    """Responder statistics (drops are silent, as IBA requires for P_Key/QPN mismatches)."""

    nak_seq: int = 0
    nak_access: int = 0
    nak_inv_req: int = 0
    rnr_nak: int = 0
    recv_len_err: int = 0
    drop_pkey: int = 0
    drop_qpn: int = 0
    drop_state: int = 0
    drop_window: int = 0
    drop_opcode: int = 0


class Responder:
    """The receiving side of an RC QP: validates, places payloads in MRs, ACKs / NAKs.

    In write-only mode every WRITE ONLY is a message of its own (MSN counts packets) and a
    WRITE ONLY with immediate completes its receive WC, with that packet's byte_len, once
    every earlier PSN has landed. After QP.reset() build a new Responder (and Requester).
    """

    def __init__(self, qp: QP, cfg: RcConfig | None = None) -> None:
        """Attach to `qp`; the expected PSN is taken from the QP's rq_psn at the first packet."""
        self.qp, self.cfg = qp, cfg or RcConfig()
        self.counters = ResponderCounters()
        self.epsn: int | None = None
        self.msn = 0
        self._nak_sent = False      # one PSN-sequence NAK per gap
        self._dup_acked = False     # one re-ACK per run of duplicates (plus those with AckReq)
        self._since_ack = 0
        self._msg: tuple[MR, int, int, int] | None = None  # (mr, next va, bytes left, total)
        self._recv: tuple[RecvWR, MR | None, int] | None = None  # a SEND: (wqe, mr, bytes in)
        self._seen = 0              # write-only: bit i = PSN epsn+i received
        self._imm: dict[int, tuple[int, int]] = {}  # write-only: psn -> (imm, byte_len)
        self._ackreq_hi: int | None = None  # write-only: an AckReq PSN not yet acked

    @property
    def mtu(self) -> int:
        """Largest payload accepted in one packet."""
        return self.cfg.mtu or self.qp.path_mtu

    def _reply(self, pkt: RocePkt, psn: int, syndrome: int) -> RocePkt:
        return RocePkt(Op.ACK, self.qp.dest_qpn, psn, pkey=self.qp.pkey, syndrome=syndrome,
                       msn=self.msn, src=pkt.dst, dst=pkt.src)

    def _ack(self, pkt: RocePkt) -> list[RocePkt]:
        assert self.epsn is not None
        self.counters.acks += 1
        self._since_ack = 0
        return [self._reply(pkt, psn_add(self.epsn, -1), encode_ack(None))]

    def _nak(self, pkt: RocePkt, syndrome: int, psn: int, fatal: bool) -> list[RocePkt]:
        name = {NAK_PSN_SEQ: "nak_seq", NAK_REM_ACCESS: "nak_access",
                RNR_NAK_SYNDROME: "rnr_nak"}.get(syndrome, "nak_inv_req")
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        if fatal:
            log.info("QP %#x: NAK %#x for PSN %#x, QP to ERROR", self.qp.qpn, syndrome, psn)
            self.qp.to_error()
        return [self._reply(pkt, psn, syndrome)]

    def _admit(self, pkt: RocePkt) -> bool:
        q, c = self.qp, self.counters
        if q.state not in (QPState.RTR, QPState.RTS):
            c.drop_state += 1
            return False
        if pkt.dqpn != q.qpn:
            c.drop_qpn += 1
            return False
        if not pkey_match(pkt.pkey, q.pkey):
            c.drop_pkey += 1
            return False
        if pkt.opcode >> 5:  # UC, RD, UD, CNP, vendor: not an RC opcode (IBA Table 38)
            c.drop_opcode += 1
            return False
        if self.epsn is None:
            self.epsn = q.rq_psn
        return True

    def _check_reth(self, pkt: RocePkt, length: int) -> MR | None | bool:
        """The target MR if [va, va+length) is writable with R_Key, True if length 0, else None."""
        if not length:
            return True
        if pkt.rkey is None or pkt.va is None or not self.qp.access & Access.REMOTE_WRITE:
            return None
        mr = self.qp.pd.ctx.lookup_rkey(self.qp.pd, pkt.rkey)
        if mr is None or not mr.allows(pkt.va, length, Access.REMOTE_WRITE):
            return None
        return mr

    def _place(self, mr: MR, va: int, data: bytes | memoryview) -> None:
        if data:
            mr.view(va, len(data))[:] = data
            self.counters.bytes_placed += len(data)

    def _recv_imm(self, imm: int | None, byte_len: int) -> None:
        q = self.qp
        wqe = q.take_recv()
        q.recv_cq.push(WC(wqe.wr_id if wqe else 0, WCStatus.SUCCESS, WCOpcode.RECV_RDMA_WITH_IMM,
                          byte_len, q.qpn, imm))

    def _on_send(self, pkt: RocePkt) -> list[RocePkt] | None:
        """A SEND packet in sequence: into the posted receive buffer. Returns the reply
        when the packet is refused (RNR, length, sequence of opcodes), else None."""
        q, op, size = self.qp, pkt.opcode, len(pkt.payload)
        if self._msg is not None or (op in _SEND_STARTS) == (self._recv is not None):
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        if self._recv is None:
            wqe = q.take_recv()
            if wqe is None:  # receiver not ready: not fatal, the requester tries again
                self._nak_sent = True  # what follows is dropped until it comes back here
                return self._nak(pkt, RNR_NAK_SYNDROME, pkt.psn, False)
            mr = q.pd.ctx.lookup_lkey(q.pd, wqe.lkey) if wqe.length else None
            self._recv = (wqe, mr, 0)
        wqe, mr, got = self._recv
        if op in (Op.SEND_FIRST, Op.SEND_MIDDLE) and size != self.mtu:
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        if got + size > wqe.length or (size and (mr is None or not mr.allows(
                wqe.addr + got, size, Access.LOCAL_WRITE))):
            self.counters.recv_len_err += 1
            self._recv = None
            q.recv_cq.push(WC(wqe.wr_id, WCStatus.LOC_LEN_ERR, WCOpcode.RECV, 0, q.qpn))
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        if size:
            assert mr is not None
            self._place(mr, wqe.addr + got, pkt.payload)
        got += size
        self._recv = (wqe, mr, got)
        if op in END_OPS:
            self._recv = None
            q.recv_cq.push(WC(wqe.wr_id, WCStatus.SUCCESS, WCOpcode.RECV, got, q.qpn,
                              pkt.imm if op in IMM_OPS else None))
        return None

    def on_packet(self, pkt: RocePkt, now: float) -> list[RocePkt]:
        """Process one request packet; returns the ACK/NAK packets to send (maybe none)."""
        if not self._admit(pkt):
            return []
        self.counters.packets += 1
        if self.cfg.write_only:
            return self._on_sprayed(pkt)
        assert self.epsn is not None
        d = psn_diff(pkt.psn, self.epsn)
        if d < 0:
            return self._duplicate(pkt)
        if d > 0:
            self.counters.out_of_order += 1
            if self._nak_sent:
                return []
            self._nak_sent = True
            return self._nak(pkt, NAK_PSN_SEQ, self.epsn, False)
        if pkt.opcode not in WRITE_OPS and pkt.opcode not in SEND_OPS:
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        self._nak_sent = self._dup_acked = False
        size, op = len(pkt.payload), pkt.opcode
        if size > self.mtu:
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        total = 0
        if op in SEND_OPS:
            refused = self._on_send(pkt)
            if refused is not None:
                return refused
        elif self._recv is not None:  # a WRITE inside a SEND
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        elif op in RETH_OPS:
            total = pkt.dlen or 0
            if self._msg is not None or pkt.dlen is None or (
                    size != total if op != Op.WRITE_FIRST else (size != self.mtu or total <= size)):
                return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
            mr = self._check_reth(pkt, total)  # the whole message, before placing a byte
            if mr is None:
                return self._nak(pkt, NAK_REM_ACCESS, pkt.psn, True)
            if isinstance(mr, MR):
                assert pkt.va is not None
                self._place(mr, pkt.va, pkt.payload)
                if op == Op.WRITE_FIRST:
                    self._msg = (mr, pkt.va + size, total - size, total)
        else:
            if self._msg is None:
                return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
            mr, va, left, total = self._msg
            if size > left or (op == Op.WRITE_MIDDLE and (size != self.mtu or size == left)) or (
                    op != Op.WRITE_MIDDLE and size != left):
                return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
            self._place(mr, va, pkt.payload)
            self._msg = (mr, va + size, left - size, total) if op == Op.WRITE_MIDDLE else None
        if op in END_OPS:
            self.msn = psn_add(self.msn, 1)
            if op in IMM_OPS and op not in SEND_OPS:
                self._recv_imm(pkt.imm, total)
        self.epsn = psn_add(self.epsn, 1)
        self._since_ack += 1
        if pkt.ackreq or (self.cfg.ack_every and self._since_ack >= self.cfg.ack_every):
            return self._ack(pkt)
        return []

    def _duplicate(self, pkt: RocePkt) -> list[RocePkt]:
        """IBA 9.9.2: a duplicate is not executed again, only acknowledged."""
        self.counters.duplicates += 1
        if pkt.ackreq or not self._dup_acked:
            self._dup_acked = True
            return self._ack(pkt)
        return []

    def _on_sprayed(self, pkt: RocePkt) -> list[RocePkt]:
        """Write-only mode (ch.12, Fig 12-7): place self-contained packets in any order."""
        assert self.epsn is not None
        d = psn_diff(pkt.psn, self.epsn)
        if d < 0 or (d >= 0 and self._seen >> d & 1):
            return self._duplicate(pkt)
        if d >= self.cfg.reorder_window:
            self.counters.drop_window += 1
            return []
        if d > 0:
            self.counters.out_of_order += 1
        size = len(pkt.payload)
        if pkt.opcode not in (Op.WRITE_ONLY, Op.WRITE_ONLY_IMM) or pkt.dlen != size or size > self.mtu:
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        mr = self._check_reth(pkt, size)
        if mr is None:
            return self._nak(pkt, NAK_REM_ACCESS, pkt.psn, True)
        if isinstance(mr, MR):
            assert pkt.va is not None
            self._place(mr, pkt.va, pkt.payload)
        if pkt.opcode == Op.WRITE_ONLY_IMM:
            self._imm[pkt.psn] = (pkt.imm or 0, size)
        if pkt.ackreq and (self._ackreq_hi is None or psn_lt(self._ackreq_hi, pkt.psn)):
            self._ackreq_hi = pkt.psn
        self._seen |= 1 << d
        advanced = 0
        while self._seen & 1:  # cumulative PSN moves over every contiguous arrival
            self._seen >>= 1
            done = self.epsn
            self.epsn = psn_add(self.epsn, 1)
            self.msn = psn_add(self.msn, 1)  # every WRITE ONLY is a message of its own
            advanced += 1
            if done in self._imm:
                imm, n = self._imm.pop(done)
                self._recv_imm(imm, n)  # after everything before it has landed
        self._dup_acked = False if advanced else self._dup_acked
        self._since_ack += advanced
        owed = self._ackreq_hi is not None and psn_lt(self._ackreq_hi, self.epsn)
        if owed or (pkt.ackreq and advanced) or (self.cfg.ack_every and self._since_ack >= self.cfg.ack_every):
            if owed:
                self._ackreq_hi = None
            return self._ack(pkt)
        return []


#: Op.WRITE_FIRST as a plain int: an IntEnum member's lookup costs ~0.2 us per packet
_WRITE_FIRST = int(Op.WRITE_FIRST)


class FastResponder(Responder):
    """A Responder whose in-order RDMA WRITE packets (FIRST / MIDDLE / LAST / ONLY, with
    immediate too, R_Key and bounds good, not write-only) and in-order SEND packets (a
    receive WR posted, room in it) run in C (traffic.fast.rc, chosen by EMU_DATAPATH);
    every other packet (a NAK or RNR NAK to send, a duplicate, out of order, sprayed), and
    the whole of it on the Python data path, is the reference `Responder.on_packet` above."""

    def on_packet(self, pkt: RocePkt, now: float) -> list[RocePkt]:
        """As Responder.on_packet."""
        # RcEndpoint makes one only when the C is chosen; SEND opcodes are 0..5 (Table 38)
        r = (IN_ORDER_SEND if pkt.opcode < _WRITE_FIRST else IN_ORDER_WRITE)(self, pkt)
        return Responder.on_packet(self, pkt, now) if r is NotImplemented else r
