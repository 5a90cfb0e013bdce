"""Verbs-like RDMA objects: device context, PD, MR, CQ and RC QP.

Book ch.9 "RDMA Basics" (Figures 9-2 "Memory Allocation and Registration", 9-3 "Create
Queue Pairs", 9-5/9-6 "Work Request Message"): allocate a Protection Domain, register a
memory block with access rights (-> L_Key, R_Key), create CQs and an RC Queue Pair, walk
the QP through RESET -> INIT (P_Key, access) -> RTR (remote QPN/PSN, path MTU) -> RTS
(start PSN, timeout, retry count), then post Work Requests and poll Completions.
Names follow libibverbs (ibv_alloc_pd, ibv_reg_mr, ibv_modify_qp, ibv_post_send,
ibv_poll_cq) and the InfiniBand Architecture Specification Vol. 1 (IBA) ch.10-11.

The work requests posted to a QP and the completions polled from a CQ are
`traffic.workreq`.

Memory regions sit over a memoryview (normally of a multiprocessing.shared_memory
block, so the worker process and the RNIC process share it: the worker registers the
MR, sends `MR.describe()` to the RNIC, which re-creates it with `Context.import_mr`).
Keys and QP numbers come from an injected `random.Random`. Pure logic: no sockets, no
clocks. The wire facts both sides share (BTH opcodes, the `RocePkt` descriptor, PSN
arithmetic, the AETH syndrome, path MTUs) are `emucore.wire.ib`; the RC transport over
these objects (segmentation, ACK/NAK, retransmission) is traffic/rc/endpoint.py.
"""

from __future__ import annotations

import enum
import random
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

from emucore.wire.ib import PATH_MTUS
from traffic.workreq import IMM_WR_OPS, WC, WR, RecvWR


class VerbsError(Exception):
    """A verbs call with bad arguments or in the wrong state (ibv_* returning EINVAL)."""


class Access(enum.IntFlag):
    """MR / QP access flags (values as in libibverbs' enum ibv_access_flags)."""

    LOCAL_READ = 0  # always granted
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4


class QPState(enum.Enum):
    """RC QP states (IBA 10.3.1; libibverbs enum ibv_qp_state)."""

    RESET = "RESET"
    INIT = "INIT"
    RTR = "RTR"
    RTS = "RTS"
    ERROR = "ERR"


MIN_RNR_TIMER_S = 0.64e-3  #: IBA Table 45, min_rnr_timer 12: the RNR delay emu uses


def ib_timeout_s(exponent: int) -> float:
    """IBA local ACK timeout for a QP 'timeout' attribute: 4.096 us * 2**exponent."""
    if not 0 <= exponent <= 31:
        raise VerbsError(f"timeout: exponent must be 0..31, got {exponent}")
    return 4.096e-6 * (1 << exponent)


def create_shared_buffer(size: int, name: str | None = None) -> shared_memory.SharedMemory:
    """Allocate a shared-memory block to register as an MR (the caller unlinks it)."""
    if size <= 0:
        raise VerbsError(f"size: must be > 0, got {size}")
    return shared_memory.SharedMemory(name=name, create=True, size=size)


def attach_shared_buffer(name: str) -> shared_memory.SharedMemory:
    """Attach to a shared-memory block created by another process (e.g. the worker's MR)."""
    return shared_memory.SharedMemory(name=name, create=False)


@dataclass(slots=True, eq=False)
class MR:
    """A registered memory region: [addr, addr+length) over `buf`, with L_Key and R_Key."""

    pd: PD
    buf: memoryview
    addr: int
    length: int
    access: Access
    lkey: int
    rkey: int
    shm_name: str | None = None

    def contains(self, va: int, length: int) -> bool:
        """True if [va, va+length) lies inside the region (a zero length needs va inside too)."""
        return self.addr <= va and va + length <= self.addr + self.length and length >= 0

    def allows(self, va: int, length: int, access: Access) -> bool:
        """Bounds check plus access-rights check, as the RNIC does before any DMA."""
        return self.contains(va, length) and (self.access & access) == access

    def view(self, va: int, length: int) -> memoryview:
        """The memoryview slice backing [va, va+length) (bounds are checked)."""
        if not self.contains(va, length):
            raise VerbsError(f"va: [{va:#x}, +{length}) outside MR [{self.addr:#x}, +{self.length})")
        off = va - self.addr
        return self.buf[off:off + length]

    def describe(self) -> dict[str, Any]:
        """A JSON-able description, to hand the MR to the RNIC process or to the peer."""
        return {"addr": self.addr, "length": self.length, "access": int(self.access),
                "lkey": self.lkey, "rkey": self.rkey, "shm_name": self.shm_name}


class CQ:
    """A bounded completion queue; overflowing it is a CQ overrun (an error, IBA 11.4.2)."""

    def __init__(self, depth: int) -> None:
        """Create a CQ holding at most `depth` completions."""
        if depth <= 0:
            raise VerbsError(f"depth: must be > 0, got {depth}")
        self.depth = depth
        #: (completion, when it was pushed): time.monotonic(), the lab clock - the
        #: completion timestamp of ibv_wc_read_completion_ts, read by `poll_stamped`
        self._q: deque[tuple[WC, float]] = deque()
        self.overrun = False
        self.pushed = 0  # completions added so far (the NIC wakes its CQ waiters on news)

    def push(self, wc: WC) -> None:
        """Add a completion (RNIC side); on overflow the WC is lost and `overrun` is set."""
        if len(self._q) >= self.depth:
            self.overrun = True
            return
        self._q.append((wc, time.monotonic()))
        self.pushed += 1

    def poll(self, n: int = 1) -> list[WC]:
        """Remove and return up to `n` completions, oldest first (ibv_poll_cq)."""
        return [wc for wc, _ in self.poll_stamped(n)]

    def poll_stamped(self, n: int = 1) -> list[tuple[WC, float]]:
        """`poll`, each completion with the lab time it was pushed."""
        q = self._q
        return [q.popleft() for _ in range(min(n, len(q)))]

    def __len__(self) -> int:
        """Number of completions waiting."""
        return len(self._q)


_LEGAL = {
    (QPState.RESET, QPState.INIT), (QPState.INIT, QPState.INIT), (QPState.INIT, QPState.RTR),
    (QPState.RTR, QPState.RTS), (QPState.RTS, QPState.RTS),
}


class QP:
    """An RC queue pair: attributes, state machine, send queue and (optional) receive queue."""

    def __init__(self, pd: PD, qpn: int, send_cq: CQ, recv_cq: CQ, max_send_wr: int) -> None:
        """Create a QP in RESET (use PD.create_qp)."""
        self.pd, self.qpn, self.send_cq, self.recv_cq = pd, qpn, send_cq, recv_cq
        self.max_send_wr = max_send_wr
        self.state = QPState.RESET
        self.pkey = 0xFFFF
        self.access = Access.LOCAL_READ
        self.dest_qpn = 0
        self.rq_psn = 0
        self.sq_psn = 0
        self.path_mtu = 4096
        self.remote_addr: Any = None
        self.local_addr: Any = None
        self.timeout_s = ib_timeout_s(14)
        self.retry_cnt = 7
        self.sq: deque[WR] = deque()
        self.rq: deque[RecvWR] = deque()
        self.rnr_retry = 7
        self.rnr_delay_s = MIN_RNR_TIMER_S  # of the caller's clock

    def _move(self, new: QPState) -> None:
        if (self.state, new) not in _LEGAL:
            raise VerbsError(f"state: illegal QP transition {self.state.value} -> {new.value}")
        self.state = new

    def modify_to_init(self, pkey: int, access: Access = Access.REMOTE_WRITE) -> None:
        """RESET -> INIT: set the P_Key (from the port's P_Key table) and remote access."""
        if not 0 <= pkey <= 0xFFFF:
            raise VerbsError(f"pkey: must be 16 bit, got {pkey:#x}")
        self._move(QPState.INIT)
        self.pkey, self.access = pkey, Access(access)

    def modify_to_rtr(self, dest_qpn: int, rq_psn: int, path_mtu: int = 4096,
                      remote_addr: Any = None, local_addr: Any = None) -> None:
        """INIT -> RTR: remote QPN, expected PSN of the peer, path MTU, remote (fabric) address."""
        if not 0 <= dest_qpn < 1 << 24:
            raise VerbsError(f"dest_qpn: must be 24 bit, got {dest_qpn:#x}")
        if not 0 <= rq_psn < 1 << 24:
            raise VerbsError(f"rq_psn: must be 24 bit, got {rq_psn:#x}")
        if path_mtu not in PATH_MTUS:
            raise VerbsError(f"path_mtu: must be one of {PATH_MTUS}, got {path_mtu}")
        self._move(QPState.RTR)
        self.dest_qpn, self.rq_psn, self.path_mtu = dest_qpn, rq_psn, path_mtu
        self.remote_addr, self.local_addr = remote_addr, local_addr

    def modify_to_rts(self, sq_psn: int, timeout_s: float | None = None, retry_cnt: int = 7,
                      rnr_retry: int = 7, rnr_delay_s: float | None = None) -> None:
        """RTR -> RTS: local start PSN, ACK timeout (seconds, of the caller's clock), retries,
        and how often / after how long a SEND the peer had no receive for is tried again
        (rnr_retry: IBA's 7 means "forever"; emu bounds it at 7 so a job fails, not hangs)."""
        if not 0 <= sq_psn < 1 << 24:
            raise VerbsError(f"sq_psn: must be 24 bit, got {sq_psn:#x}")
        for name, v in (("retry_cnt", retry_cnt), ("rnr_retry", rnr_retry)):
            if not 0 <= v <= 7:
                raise VerbsError(f"{name}: must be 0..7, got {v}")
        for name, t in (("timeout_s", timeout_s), ("rnr_delay_s", rnr_delay_s)):
            if t is not None and t <= 0:
                raise VerbsError(f"{name}: must be > 0, got {t}")
        self._move(QPState.RTS)
        self.sq_psn, self.retry_cnt, self.rnr_retry = sq_psn, retry_cnt, rnr_retry
        if timeout_s is not None:
            self.timeout_s = timeout_s
        if rnr_delay_s is not None:
            self.rnr_delay_s = rnr_delay_s

    def to_error(self) -> None:
        """Any state -> ERROR (outstanding WRs are flushed by the transport)."""
        self.state = QPState.ERROR

    def reset(self) -> None:
        """Any state -> RESET: forget queued work."""
        self.state = QPState.RESET
        self.sq.clear()
        self.rq.clear()

    def post_send(self, wr: WR) -> None:
        """Queue a send WR (ibv_post_send); needs RTS, a bounded queue and sane lengths."""
        if self.state is not QPState.RTS:
            raise VerbsError(f"state: post_send needs RTS, QP {self.qpn:#x} is {self.state.value}")
        if len(self.sq) >= self.max_send_wr:
            raise VerbsError(f"max_send_wr: send queue full ({self.max_send_wr})")
        if not 0 <= wr.length < 1 << 31:
            raise VerbsError(f"length: must be 0..2^31-1, got {wr.length}")
        if (wr.opcode in IMM_WR_OPS) != (wr.imm is not None):
            raise VerbsError(f"imm: required exactly for WRITE_WITH_IMM and SEND_WITH_IMM, "
                             f"got {wr.imm!r} for {wr.opcode.value}")
        if wr.imm is not None and not 0 <= wr.imm <= 0xFFFFFFFF:
            raise VerbsError(f"imm: must be 32 bit, got {wr.imm!r}")
        self.sq.append(wr)

    def post_recv(self, wr_id: int, addr: int = 0, length: int = 0, lkey: int = 0) -> None:
        """Post a receive WR: consumed by an incoming SEND (which lands in [addr, addr +
        length) of the MR of `lkey`) or RDMA WRITE with immediate (no buffer used)."""
        if self.state is QPState.RESET or self.state is QPState.ERROR:
            raise VerbsError(f"state: post_recv needs INIT/RTR/RTS, QP is {self.state.value}")
        if not 0 <= length < 1 << 31:
            raise VerbsError(f"length: must be 0..2^31-1, got {length}")
        if length:
            mr = self.pd.ctx.lookup_lkey(self.pd, lkey)
            if mr is None or not mr.allows(addr, length, Access.LOCAL_WRITE):
                raise VerbsError(f"lkey: no locally writable MR of L_Key {lkey:#x} holds "
                                 f"[{addr:#x}, +{length})")
        self.rq.append(RecvWR(wr_id, addr, length, lkey))

    def take_recv(self) -> RecvWR | None:
        """The oldest posted receive WR, removed from the queue (None: nothing posted)."""
        return self.rq.popleft() if self.rq else None


class PD:
    """A protection domain: the 'tenant' (book ch.9) owning MRs and QPs."""

    def __init__(self, ctx: Context, handle: int) -> None:
        """Create a PD (use Context.alloc_pd)."""
        self.ctx, self.handle = ctx, handle

    def reg_mr(self, buf: memoryview | bytearray, access: Access, addr: int | None = None,
               shm_name: str | None = None) -> MR:
        """Register `buf` as an MR at virtual address `addr` (random, page aligned, if None)."""
        view = memoryview(buf).cast("B")
        if view.readonly:
            raise VerbsError("buf: must be writable")
        if addr is None:
            addr = self.ctx.rng.getrandbits(36) << 12
        lkey = self.ctx.new_key()
        rkey = self.ctx.new_key() if access & (Access.REMOTE_WRITE | Access.REMOTE_READ) else 0
        mr = MR(self, view, addr, len(view), Access(access), lkey, rkey, shm_name)
        self.ctx.add_mr(mr)
        return mr

    def create_qp(self, send_cq: CQ, recv_cq: CQ | None = None, max_send_wr: int = 1024) -> QP:
        """Create an RC QP in RESET with a random, unique 24-bit QP number."""
        if max_send_wr <= 0:
            raise VerbsError(f"max_send_wr: must be > 0, got {max_send_wr}")
        qp = QP(self, self.ctx.new_qpn(), send_cq, recv_cq or send_cq, max_send_wr)
        self.ctx.qps[qp.qpn] = qp
        return qp


class Context:
    """An opened RNIC (ibv_context): allocates PDs, CQs, keys and QP numbers."""

    def __init__(self, rng: random.Random) -> None:
        """Create a device context drawing keys and QPNs from `rng`."""
        self.rng = rng
        self._pds = 0
        self.mrs_by_lkey: dict[int, MR] = {}
        self.mrs_by_rkey: dict[int, MR] = {}
        self.qps: dict[int, QP] = {}

    def alloc_pd(self) -> PD:
        """Allocate a protection domain (ibv_alloc_pd)."""
        self._pds += 1
        return PD(self, self._pds)

    def create_cq(self, depth: int = 4096) -> CQ:
        """Create a completion queue (ibv_create_cq)."""
        return CQ(depth)

    def new_key(self) -> int:
        """A random non-zero 32-bit key not used by any MR of this context."""
        while True:
            k = self.rng.getrandbits(32)
            if k and k not in self.mrs_by_lkey and k not in self.mrs_by_rkey:
                return k

    def new_qpn(self) -> int:
        """A random unused 24-bit QP number (0 and 1 are reserved: SMI/GSI QPs)."""
        while True:
            n = self.rng.getrandbits(24)
            if n > 1 and n not in self.qps:
                return n

    def add_mr(self, mr: MR) -> None:
        """Index an MR by its keys (keys must be unique in the context)."""
        if mr.lkey in self.mrs_by_lkey or (mr.rkey and mr.rkey in self.mrs_by_rkey):
            raise VerbsError(f"lkey/rkey: {mr.lkey:#x}/{mr.rkey:#x} already registered")
        self.mrs_by_lkey[mr.lkey] = mr
        if mr.rkey:
            self.mrs_by_rkey[mr.rkey] = mr

    def import_mr(self, pd: PD, desc: dict[str, Any], buf: memoryview | bytearray) -> MR:
        """Re-create an MR registered in another process (from MR.describe()) over `buf`."""
        view = memoryview(buf).cast("B")
        if len(view) < desc["length"]:
            raise VerbsError(f"length: buffer has {len(view)} bytes, MR needs {desc['length']}")
        mr = MR(pd, view[:desc["length"]], desc["addr"], desc["length"], Access(desc["access"]),
                desc["lkey"], desc["rkey"], desc.get("shm_name"))
        self.add_mr(mr)
        return mr

    def dereg_mr(self, mr: MR) -> None:
        """Deregister an MR: its keys stop working and its view is released (so the
        SharedMemory can be closed once no packet descriptor holds a slice of it)."""
        self.mrs_by_lkey.pop(mr.lkey, None)
        if mr.rkey:
            self.mrs_by_rkey.pop(mr.rkey, None)
        mr.buf.release()

    def lookup_lkey(self, pd: PD, lkey: int) -> MR | None:
        """The MR of `pd` with this L_Key, or None."""
        mr = self.mrs_by_lkey.get(lkey)
        return mr if mr is not None and mr.pd is pd else None

    def lookup_rkey(self, pd: PD, rkey: int) -> MR | None:
        """The MR of `pd` with this R_Key, or None (an R_Key of another PD is invalid)."""
        mr = self.mrs_by_rkey.get(rkey)
        return mr if mr is not None and mr.pd is pd else None
