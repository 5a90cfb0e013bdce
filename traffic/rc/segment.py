"""Segmentation of an RDMA WRITE or SEND message into RC packets (IBA 9.4.3).

Book ch.12: Figures 12-1..12-3 (a message as WRITE FIRST, MIDDLE..., LAST; the RETH
only in the first packet) and Figure 12-7 (packet spraying: every packet a WRITE ONLY
with its own RETH, so each lands on its own). Lazy and pure: packet i of a message is
computed, never a list of all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from emucore.wire.ib import Op

__all__ = ["Segment", "packet_count", "segment_at", "segments"]


@dataclass(slots=True, frozen=True)
class Segment:
    """One packet of a message: opcode, offset and size of its payload in the message."""

    opcode: Op
    offset: int
    size: int


def packet_count(length: int, mtu: int) -> int:
    """Packets needed for a `length`-byte message at `mtu` (a zero-byte write is one packet)."""
    return max(1, -(-length // mtu))


_SEND = {"only": (Op.SEND_ONLY, Op.SEND_ONLY_IMM), "first": (Op.SEND_FIRST, Op.SEND_FIRST),
         "middle": (Op.SEND_MIDDLE, Op.SEND_MIDDLE), "last": (Op.SEND_LAST, Op.SEND_LAST_IMM)}


def segment_at(i: int, length: int, mtu: int, write_only: bool = False, imm: bool = False,
               send: bool = False) -> Segment:
    """Packet i of a message: FIRST/MIDDLE/LAST/ONLY, or all WRITE ONLY in write-only mode.
    A SEND (`send`) is always FIRST/MIDDLE/LAST/ONLY: it carries no address to be placed
    by on its own, so it cannot be sprayed (write-only mode does not apply)."""
    n = packet_count(length, mtu)
    if not 0 <= i < n:
        raise IndexError(f"i: packet {i} of a {n}-packet message")
    off = i * mtu
    size = min(mtu, length - off)
    last = i == n - 1
    if send:
        place = "only" if n == 1 else "first" if i == 0 else "last" if last else "middle"
        return Segment(_SEND[place][imm], off, size)
    if n == 1 or write_only:
        op = Op.WRITE_ONLY_IMM if imm and last else Op.WRITE_ONLY
    elif i == 0:
        op = Op.WRITE_FIRST
    elif last:
        op = Op.WRITE_LAST_IMM if imm else Op.WRITE_LAST
    else:
        op = Op.WRITE_MIDDLE
    return Segment(op, off, size)


def segments(length: int, mtu: int, write_only: bool = False, imm: bool = False,
             send: bool = False) -> Iterator[Segment]:
    """All packets of a message, lazily (a 64 MB write needs no 64 MB of anything)."""
    for i in range(packet_count(length, mtu)):
        yield segment_at(i, length, mtu, write_only, imm, send)
