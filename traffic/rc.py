"""The RDMA Reliable Connection (RC) transport for RDMA WRITE, as pure state machines.

Book ch.9 (Figures 9-5/9-6: the requester builds BTH + RETH from the WR, the responder
checks P_Key and R_Key, places the payload, completes on the CQ) and ch.12 (Figures
12-1..12-3 WRITE FIRST/MIDDLE/LAST, Figure 12-7 "RDMA Write Only" for packet spraying).
Protocol details follow the InfiniBand Architecture Specification Vol. 1, ch.9 (BTH,
RETH, AETH, PSN rules, ACK/NAK, go-back-N) as used by RoCEv2.

Works on packet *descriptors* (`RocePkt`, field names as Scapy's BTH/RETH/AETH), never
bytes: the RNIC maps them to frames. Time (`now`, seconds of the caller's clock) and the
pacing decision come from outside; nothing here sleeps, reads a clock or touches a socket.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

from traffic.verbs import (CREDIT_TABLE, CREDITS_INVALID, IMM_OPS, MR, NAK_INV_REQ, NAK_PSN_SEQ,
                           NAK_REM_ACCESS, NAK_REM_OP, PSN_MASK, QP, RETH_OPS, SYN_ACK, WC, WR,
                           Access, AckKind, END_OPS, Op, QPState, RocePkt, WCOpcode, WCStatus,
                           WROpcode, decode_syndrome, encode_ack, encode_nak, psn_add, psn_diff,
                           psn_lt)

__all__ = ["CREDIT_TABLE", "CREDITS_INVALID", "NAK_PSN_SEQ", "NAK_INV_REQ", "NAK_REM_ACCESS",
           "NAK_REM_OP", "PSN_MASK", "SYN_ACK", "AckKind", "Op", "RocePkt", "decode_syndrome",
           "encode_ack", "encode_nak", "psn_add", "psn_diff", "psn_lt", "RcConfig", "Segment",
           "packet_count", "segment_at", "segments", "Requester", "Responder", "RcEndpoint",
           "RequesterCounters", "ResponderCounters", "pkey_match"]
_HALF = 1 << 23

log = logging.getLogger(__name__)


# ---- segmentation (IBA 9.4.3, book Figures 12-1..12-3 and 12-7) ----------------------
@dataclass(slots=True, frozen=True)
class Segment:
    """One packet of a message: opcode, offset and size of its payload in the message."""

    opcode: Op
    offset: int
    size: int


def packet_count(length: int, mtu: int) -> int:
    """Packets needed for a `length`-byte message at `mtu` (a zero-byte write is one packet)."""
    return max(1, -(-length // mtu))


def segment_at(i: int, length: int, mtu: int, write_only: bool = False, imm: bool = False) -> Segment:
    """Packet i of a message: FIRST/MIDDLE/LAST/ONLY, or all WRITE ONLY in write-only mode."""
    n = packet_count(length, mtu)
    if not 0 <= i < n:
        raise IndexError(f"i: packet {i} of a {n}-packet message")
    off = i * mtu
    size = min(mtu, length - off)
    last = i == n - 1
    if n == 1 or write_only:
        op = Op.WRITE_ONLY_IMM if imm and last else Op.WRITE_ONLY
    elif i == 0:
        op = Op.WRITE_FIRST
    elif last:
        op = Op.WRITE_LAST_IMM if imm else Op.WRITE_LAST
    else:
        op = Op.WRITE_MIDDLE
    return Segment(op, off, size)


def segments(length: int, mtu: int, write_only: bool = False, imm: bool = False) -> Iterator[Segment]:
    """All packets of a message, lazily (a 64 MB write needs no 64 MB of anything)."""
    for i in range(packet_count(length, mtu)):
        yield segment_at(i, length, mtu, write_only, imm)


@dataclass
class RcConfig:
    """Transport knobs (both sides). mtu=None uses the QP's path MTU."""

    mtu: int | None = None
    write_only: bool = False   # ch.12: every packet WRITE ONLY with its own RETH
    window: int = 256          # requester: max packets in flight (unacked)
    ackreq_every: int = 16     # requester: AckReq every N packets (0: only at message end)
    ack_every: int = 0         # responder: also ACK every K accepted packets (0: AckReq only)
    reorder_window: int = 1024  # write-only responder: PSNs accepted ahead of the expected one

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        if self.mtu is not None and not 1 <= self.mtu <= 1 << 16:
            raise ValueError(f"mtu: must be 1..65536, got {self.mtu}")
        for name in ("window", "reorder_window"):
            v = getattr(self, name)
            if not 1 <= v < _HALF:
                raise ValueError(f"{name}: must be 1..2^23-1, got {v}")
        for name in ("ackreq_every", "ack_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.write_only and self.window > self.reorder_window:
            raise ValueError(f"window: {self.window} exceeds reorder_window {self.reorder_window}")


@dataclass
class RequesterCounters:
    """Requester statistics."""

    packets: int = 0
    bytes: int = 0
    retransmitted: int = 0
    timeouts: int = 0
    acks: int = 0
    naks: int = 0
    completions: int = 0


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

    def _start(self) -> None:
        q = self.qp
        self.una = self.nxt = self.tail = self.max_sent = q.sq_psn
        self.retries_left = q.retry_cnt
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

    def _pull(self) -> bool:
        """Move the next WR from the send queue into the PSN space."""
        q = self.qp
        while q.sq:
            wr = q.sq.popleft()
            mr = q.pd.ctx.lookup_lkey(q.pd, wr.lkey)
            if wr.length and (mr is None or not mr.allows(wr.local_addr, wr.length, Access.LOCAL_READ)):
                self._fail(_Msg(wr, None, self.tail, 0), WCStatus.LOC_PROT_ERR)
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
        if psn_diff(self.nxt, self.una) >= cfg.window:
            return None
        if self.nxt == self.tail and not self._pull():
            return None
        m = self._find(self.nxt)
        assert m is not None, "PSN between una and tail must belong to a message"
        wr, psn = m.wr, self.nxt
        i = psn_diff(psn, m.first_psn)
        seg = segment_at(i, wr.length, self.mtu, cfg.write_only, wr.opcode is WROpcode.WRITE_WITH_IMM)
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
        while self._msgs:
            m = self._msgs[0]
            if not psn_lt(psn_add(m.first_psn, m.npkts - 1), self.una):
                break
            self._msgs.pop(0)
            if m.wr.signaled:
                self._complete(m, WCStatus.SUCCESS)
        self.deadline = None if self.una == self.max_sent else now + self.qp.timeout_s

    def on_nak(self, psn: int, syndrome: int, now: float) -> None:
        """A NAK for `psn`: earlier PSNs are implicitly acked; then go-back-N or fail the WR."""
        if not self._started or self.qp.state is QPState.ERROR:
            return
        self.counters.naks += 1
        if psn_diff(psn, self.una) > 0:
            self._ack_through(psn_add(psn, -1), now)
        kind, code = decode_syndrome(syndrome)
        if not 0 <= psn_diff(psn, self.una) < max(1, psn_diff(self.max_sent, self.una)):
            return  # stale NAK
        if kind is AckKind.RNR_NAK or code == NAK_PSN_SEQ & 0x1F:
            log.debug("QP %#x: NAK %#x at PSN %#x, go back", self.qp.qpn, syndrome, psn)
            self.nxt = psn
            self.deadline = now + self.qp.timeout_s
            return
        status = {NAK_REM_ACCESS & 0x1F: WCStatus.REM_ACCESS_ERR,
                  NAK_INV_REQ & 0x1F: WCStatus.REM_INV_REQ_ERR}.get(code, WCStatus.REM_OP_ERR)
        m = self._find(psn)
        if m is not None:
            self._fail(m, status)

    def on_timer(self, now: float) -> None:
        """Retransmission timer: on expiry go back to the oldest unacked PSN, or give up."""
        if self.deadline is None or now < self.deadline or self.qp.state is not QPState.RTS:
            return
        self.counters.timeouts += 1
        if self.retries_left <= 0:
            m = self._find(self.una)
            if m is not None:
                self._fail(m, WCStatus.RETRY_EXC_ERR)
            return
        self.retries_left -= 1
        self.nxt = self.una
        self.deadline = now + self.qp.timeout_s

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

    def _complete(self, m: _Msg, status: WCStatus) -> None:
        self.counters.completions += 1
        self.qp.send_cq.push(WC(m.wr.wr_id, status, WCOpcode.RDMA_WRITE,
                                m.wr.length if status is WCStatus.SUCCESS else 0, self.qp.qpn))

    def _fail(self, m: _Msg, status: WCStatus) -> None:
        """Complete `m` in error, flush everything else, move the QP to ERROR (IBA 10.8.3)."""
        log.info("QP %#x: WR %s failed: %s", self.qp.qpn, m.wr.wr_id, status.value)
        todo = self._msgs + ([] if m in self._msgs else [m])
        self._msgs = []
        for x in todo:
            self._complete(x, status if x is m else WCStatus.WR_FLUSH_ERR)
        while self.qp.sq:
            self._complete(_Msg(self.qp.sq.popleft(), None, 0, 0), WCStatus.WR_FLUSH_ERR)
        self.deadline = None
        self.qp.to_error()


@dataclass
class ResponderCounters:
    """Responder statistics (drops are silent, as IBA requires for P_Key/QPN mismatches)."""

    packets: int = 0
    bytes_placed: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    acks: int = 0
    nak_seq: int = 0
    nak_access: int = 0
    nak_inv_req: int = 0
    drop_pkey: int = 0
    drop_qpn: int = 0
    drop_state: int = 0
    drop_window: int = 0


def pkey_match(a: int, b: int) -> bool:
    """IBA 10.9.3: same 15-bit partition, at least one of the two a full member (bit 15)."""
    return (a & 0x7FFF) == (b & 0x7FFF) and bool((a | b) & 0x8000)


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
        name = {NAK_PSN_SEQ: "nak_seq", NAK_REM_ACCESS: "nak_access"}.get(syndrome, "nak_inv_req")
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
        wr_id = q.rq.popleft() if q.rq else 0
        q.recv_cq.push(WC(wr_id, WCStatus.SUCCESS, WCOpcode.RECV_RDMA_WITH_IMM, byte_len, q.qpn, imm))

    def on_packet(self, pkt: RocePkt, now: float) -> list[RocePkt]:
        """Process one request packet; returns the ACK/NAK packets to send (maybe none)."""
        if not self._admit(pkt):
            return []
        self.counters.packets += 1
        if pkt.opcode not in (Op.WRITE_FIRST, Op.WRITE_MIDDLE) and pkt.opcode not in END_OPS:
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
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
        self._nak_sent = self._dup_acked = False
        size, op = len(pkt.payload), pkt.opcode
        if size > self.mtu:
            return self._nak(pkt, NAK_INV_REQ, pkt.psn, True)
        if op in RETH_OPS:
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
            if op in IMM_OPS:
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


class RcEndpoint:
    """Both halves of one RC QP behind one packet interface (what the RNIC drives)."""

    def __init__(self, qp: QP, cfg: RcConfig | None = None) -> None:
        """Requester and responder sharing `qp` and `cfg`."""
        self.qp = qp
        self.requester = Requester(qp, cfg)
        self.responder = Responder(qp, cfg)

    def next_packet(self, now: float) -> RocePkt | None:
        """Next request packet to transmit when the pacer allows one."""
        return self.requester.next_packet(now)

    def on_packet(self, pkt: RocePkt, now: float) -> list[RocePkt]:
        """Feed a received packet; returns ACK/NAK packets to transmit."""
        if pkt.opcode == Op.ACK:
            self.requester.on_response(pkt, now)
            return []
        return self.responder.on_packet(pkt, now)

    def on_timer(self, now: float) -> None:
        """Run the retransmission timer."""
        self.requester.on_timer(now)

    @property
    def deadline(self) -> float | None:
        """When on_timer next needs calling (None: no timer armed)."""
        return self.requester.deadline
