"""The credit update of emu's modelled CBFC (issue 16
"CBFC"; seed 004 "Credit-Based Flow Control"): build and parse, pure.

UE's credit-based flow control returns buffer credits per virtual channel from a link's
receiver to its sender, below the MAC; its messages are not public in a form a veth can
carry, so emu sends its own, labelled as a model: a frame to the MAC Control address
01:80:C2:00:00:01 (never forwarded, like PFC) with EtherType 0x88B5 (IEEE 802 Local
Experimental EtherType 1), the 4-byte tag "UECB", the virtual channel (one byte, the
traffic class = PFC priority) and the credits returned (4 bytes, in bytes), padded to
60 bytes. `CbfcUpdate` is the Scapy layer (tests compare the fast builder with it).
"""

from __future__ import annotations

import struct

from scapy.fields import ByteField, IntField, StrFixedLenField
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

__all__ = ["CBFC_DST", "ETHERTYPE_CBFC", "CbfcUpdate", "build_credit_frame", "parse_credit"]

CBFC_DST = bytes.fromhex("0180c2000001")
ETHERTYPE_CBFC = b"\x88\xb5"
TAG = b"UECB"
FRAME_LEN = 60
_BODY = struct.Struct("!4sBI")


class CbfcUpdate(Packet):
    """emu's modelled CBFC credit update (EtherType 0x88B5)."""

    name = "emu CBFC credit update (modelled)"
    fields_desc = [StrFixedLenField("tag", TAG, 4), ByteField("vc", 0), IntField("credits", 0)]


bind_layers(Ether, CbfcUpdate, type=0x88B5)


def build_credit_frame(src_mac: bytes, vc: int, credits: int) -> bytes:
    """The 60-byte update returning `credits` bytes of virtual channel `vc`."""
    if not 0 <= vc <= 7:
        raise ValueError(f"vc: must be in 0..7, got {vc!r}")
    if not 0 < credits <= 0xFFFFFFFF:
        raise ValueError(f"credits: must be in 1..2^32-1, got {credits!r}")
    body = CBFC_DST + bytes(src_mac) + ETHERTYPE_CBFC + _BODY.pack(TAG, vc, credits)
    return body + bytes(FRAME_LEN - len(body))


def parse_credit(frame: bytes) -> tuple[int, int] | None:
    """(vc, credits) of an update, None if the frame is not a well-formed one."""
    if len(frame) < 14 + _BODY.size or frame[12:14] != ETHERTYPE_CBFC:
        return None
    tag, vc, credits = _BODY.unpack_from(frame, 14)
    if tag != TAG or vc > 7 or credits == 0:
        return None
    return vc, credits
