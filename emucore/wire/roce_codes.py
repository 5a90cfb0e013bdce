"""RoCEv2's fixed choices and frame arithmetic without Scapy: the UDP port, the IP/ECN
choices of every RoCE frame, the pad count, the UDP source port of a QP pair, the ICRC's
place and the CNP test. emucore.wire.roce (the Scapy layers) re-exports them; the NIC and
switch processes import them from here, so starting one does not import Scapy (~0.5 s of
CPU each).

Sources as emucore.wire.roce: the InfiniBand Architecture Specification Vol. 1 (9.2 the
pad; Table 38 opcodes) and its RoCEv2 annex A17 (UDP port 4791, the CNP, A17.9.2); book
ch.11 (Figure 11-3: the CNP).
"""

from __future__ import annotations

import struct

from emucore.wire.dscp import ECN_ECT0
from emucore.wire.ib import Op

__all__ = ["ROCE_UDP_PORT", "DATA_ECN", "CNP_ECN", "IP_ID", "IP_FLAGS_DF", "DEFAULT_TTL",
           "pad_count", "udp_sport", "icrc_of", "is_cnp"]

ROCE_UDP_PORT = 4791  #: RoCEv2 UDP destination port (IANA, annex A17)

DATA_ECN = ECN_ECT0  #: data frames leave ECN-capable
CNP_ECN = ECN_ECT0  #: as ConnectX NICs send CNPs (see module docstring)
IP_ID = 0  #: IPv4 identification of every RoCE frame
IP_FLAGS_DF = 0x4000  #: flags/fragment word: DF set, offset 0
DEFAULT_TTL = 64


def pad_count(payload_len: int) -> int:
    """Pad bytes that align a payload to 4 bytes (BTH padcount, IBA 9.2)."""
    return -payload_len & 3


def udp_sport(src_qpn: int, dst_qpn: int) -> int:
    """UDP source port of a QP pair, in 0xC000-0xFFFF (Linux rdma_get_udp_sport:
    flow label from lqpn x rqpn folded to 14 bits)."""
    v = (src_qpn & 0xFFFFFF) * (dst_qpn & 0xFFFFFF)
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    return ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000


def icrc_of(frame: bytes) -> int:
    """The ICRC stored in a frame's last 4 bytes (little-endian on the wire, as Scapy and rxe)."""
    return struct.unpack_from("<I", frame, len(frame) - 4)[0]


_ROCE_DPORT = ROCE_UDP_PORT.to_bytes(2, "big")


def is_cnp(frame: bytes) -> bool:
    """True for a RoCEv2 CNP frame: IPv4 without options, UDP 4791, BTH opcode 0x81
    (annex A17.9.2; ch.11 Figure 11-3). Cheap enough for a switch's data path."""
    return (72 <= len(frame) < 100 and frame[42] == Op.CNP and frame[12:14] == b"\x08\x00"
            and frame[14] == 0x45 and frame[23] == 17 and frame[36:38] == _ROCE_DPORT)
