"""Work requests and completions (book ch.9 Figures 9-5/9-6 "Work Request Message"): what
an application posts to a QP's send and receive queues (ibv_send_wr, ibv_recv_wr with one
SGE) and polls back from a CQ (ibv_wc), with their opcodes and status codes - the
vocabulary the verbs objects (traffic.verbs), the transports (traffic/rc/, traffic/uet/)
and the NIC's clients share. Names follow libibverbs and the InfiniBand Architecture
Specification Vol. 1 ch.10-11. Pure data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class WROpcode(enum.Enum):
    """Send work request opcodes supported by the emulated RNIC."""

    WRITE = "RDMA_WRITE"
    WRITE_WITH_IMM = "RDMA_WRITE_WITH_IMM"
    SEND = "SEND"                      #: into the peer's next posted receive buffer
    SEND_WITH_IMM = "SEND_WITH_IMM"


#: opcodes that carry an immediate / that consume a receive WR at the peer
IMM_WR_OPS = frozenset({WROpcode.WRITE_WITH_IMM, WROpcode.SEND_WITH_IMM})
SEND_WR_OPS = frozenset({WROpcode.SEND, WROpcode.SEND_WITH_IMM})


class WCStatus(enum.Enum):
    """Work completion status (subset of enum ibv_wc_status)."""

    SUCCESS = "SUCCESS"
    LOC_PROT_ERR = "LOC_PROT_ERR"
    REM_ACCESS_ERR = "REM_ACCESS_ERR"
    REM_INV_REQ_ERR = "REM_INV_REQ_ERR"
    REM_OP_ERR = "REM_OP_ERR"
    RETRY_EXC_ERR = "RETRY_EXC_ERR"
    RNR_RETRY_EXC_ERR = "RNR_RETRY_EXC_ERR"  #: the peer had no receive posted, too long
    LOC_LEN_ERR = "LOC_LEN_ERR"          #: a SEND longer than the posted receive buffer
    WR_FLUSH_ERR = "WR_FLUSH_ERR"


class WCOpcode(enum.Enum):
    """Work completion opcode: a send-side RDMA write or SEND, a received SEND, or the
    receive WR an RDMA WRITE with immediate consumed."""

    RDMA_WRITE = "RDMA_WRITE"
    SEND = "SEND"
    RECV = "RECV"
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"


def wc_opcode_of(op: WROpcode) -> WCOpcode:
    """The send-side completion opcode of a work request."""
    return WCOpcode.SEND if op in SEND_WR_OPS else WCOpcode.RDMA_WRITE


@dataclass(slots=True)
class WR:
    """A send work request (ibv_send_wr with one SGE), posted to a QP's send queue."""

    wr_id: int
    opcode: WROpcode
    local_addr: int
    length: int
    lkey: int
    remote_addr: int
    rkey: int
    signaled: bool = True
    imm: int | None = None


@dataclass(slots=True, frozen=True)
class RecvWR:
    """A receive work request (ibv_recv_wr with at most one SGE): a SEND lands in
    [addr, addr + length) of the MR of `lkey`; length 0 takes only WRITEs with immediate
    and zero-byte SENDs."""

    wr_id: int
    addr: int = 0
    length: int = 0
    lkey: int = 0


@dataclass(slots=True, frozen=True)
class WC:
    """A work completion (ibv_wc): what the application polls from a CQ."""

    wr_id: int
    status: WCStatus
    opcode: WCOpcode
    byte_len: int = 0
    qp_num: int = 0
    imm: int | None = None

