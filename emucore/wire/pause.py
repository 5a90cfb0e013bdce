"""The PFC frame (IEEE 802.1Qbb; book ch.11 Step 3, Fig 11-4): build and parse, pure.

MAC Control frame to 01:80:C2:00:00:01, Ethertype 0x8808, opcode 0x0101, class-enable
vector (bit n = priority n, priority 3 -> 0x0008), eight 16-bit pause quanta (1 quantum
= 512 bit times), padded to 60 bytes (64 with the FCS the kernel adds). Byte-identical
to Scapy's ``scapy.contrib.mac_control.MACControlClassBasedFlowControl`` (tests/unit/
test_pfc.py). What a pause does to a port is `emucore.qos.pfc`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

PFC_DST = bytes.fromhex("0180c2000001")
ETHERTYPE_MAC_CONTROL = b"\x88\x08"
OPCODE_PFC = b"\x01\x01"
PFC_FRAME_LEN = 60  # without FCS
MAX_QUANTA = 0xFFFF

_QUANTA = struct.Struct("!8H")


def build_pfc_frame(src_mac: bytes, class_enable: int, quanta: Sequence[int]) -> bytes:
    """The 60-byte PFC frame from `src_mac` with the given vector and 8 quanta."""
    if not 0 <= class_enable <= 0xFF:
        raise ValueError(f"class_enable: must be in 0..255, got {class_enable!r}")
    if len(quanta) != 8 or any(not 0 <= q <= MAX_QUANTA for q in quanta):
        raise ValueError(f"quanta: 8 values in 0..65535, got {quanta!r}")
    body = (PFC_DST + bytes(src_mac) + ETHERTYPE_MAC_CONTROL + OPCODE_PFC
            + class_enable.to_bytes(2, "big") + _QUANTA.pack(*quanta))
    return body + bytes(PFC_FRAME_LEN - len(body))


def pause_frame(src_mac: bytes, priority: int, quanta: int = MAX_QUANTA) -> bytes:
    """PFC frame pausing one priority for `quanta` (0 = resume)."""
    q = [0] * 8
    q[priority] = quanta
    return build_pfc_frame(src_mac, 1 << priority, q)


def is_pfc(frame: bytes) -> bool:
    """True for a MAC Control frame with the PFC opcode."""
    return frame[12:14] == ETHERTYPE_MAC_CONTROL and frame[14:16] == OPCODE_PFC


def parse_pfc(frame: bytes) -> tuple[int, tuple[int, ...]] | None:
    """(class-enable vector, 8 quanta) of a PFC frame, or None if it is not one."""
    if len(frame) < 34 or not is_pfc(frame):
        return None
    return frame[17], _QUANTA.unpack_from(frame, 18)
