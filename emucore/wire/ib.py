"""InfiniBand transport facts that RoCEv2 carries: BTH opcodes, PSNs, the AETH syndrome.

Formats and rules from the InfiniBand Architecture Specification Vol. 1 (IBA): ch.9.2
(BTH; Table 38 opcodes), 9.3 (extension headers: RETH, ImmDt, AETH), 9.7.1 (24-bit PSN
arithmetic), 9.7.5.1 (AETH syndrome, Tables 43-45), 10.9.3 (P_Key matching) and the
RoCEv2 annex A17.9.2 (the CNP opcode). Book ch.9 (Figure 9-5) and ch.12 (Figures
12-1..12-3, 12-7) for the RDMA WRITE packets; docs/FABRIC_FACTS.md "RoCEv2".

`Op` is the one opcode table of the project: each opcode with the operation it belongs
to, its place in a message and the extension headers that follow its BTH; the opcode
sets below are derived from it. `RocePkt` is a packet as a descriptor (field names as
Scapy's BTH/RETH/AETH), what the RC transport produces and consumes; the byte formats
are `emucore.wire.roce` (Scapy) and `emucore.wire.templates` (fast path). Pure: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["Op", "RETH_OPS", "IMM_OPS", "AETH_OPS", "WRITE_OPS", "SEND_OPS", "END_OPS", "RocePkt",
           "PSN_MASK", "PSN_HALF", "psn_add", "psn_diff", "psn_lt", "SYN_ACK", "NAK_PSN_SEQ",
           "NAK_INV_REQ", "NAK_REM_ACCESS", "NAK_REM_OP", "CREDITS_INVALID", "CREDIT_TABLE",
           "AckKind", "encode_ack", "encode_nak", "decode_syndrome", "PATH_MTUS", "pkey_match"]


class Op(enum.IntEnum):
    """BTH opcode (IBA Table 38, RC; annex A17.9.2 CNP) with its operation, its place in
    a message ("first", "middle", "last", "only" or "" for a response) and the extension
    headers after the BTH ("R" RETH, "I" ImmDt, "A" AETH, in wire order)."""

    operation: str
    place: str
    headers: str

    def __new__(cls, code: int, operation: str, place: str, headers: str) -> "Op":
        """An opcode row of the table."""
        op = int.__new__(cls, code)
        op._value_ = code
        op.operation, op.place, op.headers = operation, place, headers
        return op

    SEND_FIRST = 0x00, "SEND", "first", ""
    SEND_MIDDLE = 0x01, "SEND", "middle", ""
    SEND_LAST = 0x02, "SEND", "last", ""
    SEND_LAST_IMM = 0x03, "SEND", "last", "I"
    SEND_ONLY = 0x04, "SEND", "only", ""
    SEND_ONLY_IMM = 0x05, "SEND", "only", "I"
    WRITE_FIRST = 0x06, "WRITE", "first", "R"
    WRITE_MIDDLE = 0x07, "WRITE", "middle", ""
    WRITE_LAST = 0x08, "WRITE", "last", ""
    WRITE_LAST_IMM = 0x09, "WRITE", "last", "I"
    WRITE_ONLY = 0x0A, "WRITE", "only", "R"
    WRITE_ONLY_IMM = 0x0B, "WRITE", "only", "RI"
    READ_REQUEST = 0x0C, "READ", "only", "R"
    ACK = 0x11, "ACK", "", "A"
    RD_ACK = 0x51, "ACK", "", "A"  # Reliable Datagram ACK, decoded as Scapy does
    CNP = 0x81, "CNP", "", ""  # 16 reserved bytes follow (annex A17.9.2)


#: opcodes followed by a RETH (WRITE ONLY with IMM: RETH then ImmDt)
RETH_OPS = frozenset(op for op in Op if "R" in op.headers)
#: opcodes carrying an ImmDt
IMM_OPS = frozenset(op for op in Op if "I" in op.headers)
#: opcodes followed by an AETH
AETH_OPS = frozenset(op for op in Op if "A" in op.headers)
#: the RDMA WRITE request opcodes
WRITE_OPS = frozenset(op for op in Op if op.operation == "WRITE")
#: the SEND request opcodes
SEND_OPS = frozenset(op for op in Op if op.operation == "SEND")
#: opcodes that end a message (its last or only packet)
END_OPS = frozenset(op for op in Op if op.place in ("last", "only"))


@dataclass(slots=True)
class RocePkt:
    """One RoCEv2 packet as a descriptor: BTH + optional RETH / AETH / ImmDt + payload."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: bool = False
    becn: bool = False
    fecn: bool = False
    pkey: int = 0xFFFF
    va: int | None = None       # RETH
    rkey: int | None = None     # RETH
    dlen: int | None = None     # RETH
    syndrome: int | None = None  # AETH
    msn: int | None = None      # AETH
    imm: int | None = None      # ImmDt
    payload: bytes | memoryview = b""
    src: Any = None
    dst: Any = None


# PSN arithmetic (24 bit, IBA 9.7.1: comparisons within half the space) ----------
PSN_MASK = (1 << 24) - 1
PSN_HALF = 1 << 23  #: the largest distance two comparable PSNs may have


def psn_add(psn: int, n: int) -> int:
    """psn + n modulo 2**24."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b in [-2**23, 2**23), correct across the 2**24 wrap."""
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


def psn_lt(a: int, b: int) -> bool:
    """True if PSN a comes before PSN b (within a 2**23 window)."""
    return psn_diff(a, b) < 0


# AETH syndrome (IBA 9.7.5.1, Table 43/44/45) -------------------------------------
SYN_ACK = 0x00
NAK_PSN_SEQ = 0x60
NAK_INV_REQ = 0x61
NAK_REM_ACCESS = 0x62
NAK_REM_OP = 0x63
CREDITS_INVALID = 0x1F  # "credit count not valid": what write-only traffic advertises
CREDIT_TABLE = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
                768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)


class AckKind(enum.Enum):
    """The three AETH syndrome kinds."""

    ACK = 0
    RNR_NAK = 1
    NAK = 3


def encode_ack(credits: int | None = None) -> int:
    """ACK syndrome advertising `credits` receive WQEs (rounded down), or 'invalid' if None."""
    if credits is None:
        return SYN_ACK | CREDITS_INVALID
    if credits < 0:
        raise ValueError(f"credits: must be >= 0, got {credits}")
    code = max(i for i, c in enumerate(CREDIT_TABLE) if c <= credits)
    return SYN_ACK | code


def encode_nak(code: int) -> int:
    """NAK syndrome for NAK code 0..4 (PSN seq, invalid req, remote access, remote op, inv RD)."""
    if not 0 <= code <= 4:
        raise ValueError(f"code: NAK code must be 0..4, got {code}")
    return NAK_PSN_SEQ | code


def decode_syndrome(syndrome: int) -> tuple[AckKind, int]:
    """(kind, value): value = credits (ACK; -1 if invalid), RNR timer, or NAK code."""
    if not 0 <= syndrome <= 0xFF:
        raise ValueError(f"syndrome: must be 8 bit, got {syndrome:#x}")
    if (syndrome >> 5) & 0x3 == 2:
        raise ValueError(f"syndrome: reserved kind in {syndrome:#x}")
    kind = AckKind((syndrome >> 5) & 0x3)  # bit 7 reserved
    low = syndrome & 0x1F
    if kind is AckKind.ACK:
        return kind, -1 if low == CREDITS_INVALID else CREDIT_TABLE[low]
    return kind, low


PATH_MTUS = (256, 512, 1024, 2048, 4096)  #: IBA path MTU enumeration (bytes of payload)


def pkey_match(a: int, b: int) -> bool:
    """IBA 10.9.3: same 15-bit partition, at least one of the two a full member (bit 15)."""
    return (a & 0x7FFF) == (b & 0x7FFF) and bool((a | b) & 0x8000)
