"""UET code points and header sizes (issue 16; issue 32): the PDS types, next headers,
control types, NACK codes, SES opcodes and return codes, the PDS and SES flag bits, as the
UE 1.0.1 specification and the UEC's reference provider (uet-ref-prov, `uet_pkt_hdr.h`)
define them. Shared by the Scapy layers (emucore.wire.uet), the fast codec
(emucore.wire.uet_codec) and, by value, the Lua dissector (wireshark/uet.lua).
"""

from __future__ import annotations

import enum

UET_UDP_PORT = 4793  #: UET over IPv4/UDP, destination port (IANA)
UET_IP_ID = 0
UET_TTL = 64


class PdsType(enum.IntEnum):
    """PDS header types (the prologue's 5-bit type)."""

    TSS = 1
    RUD_REQ = 2
    ROD_REQ = 3
    RUDI_REQ = 4
    RUDI_RESP = 5
    UUD_REQ = 6
    ACK = 7
    ACK_CC = 8
    ACK_CCX = 9
    NACK = 10
    CTRL = 11
    NACK_CCX = 12
    RUD_CC_REQ = 13
    ROD_CC_REQ = 14


class NextHdr(enum.IntEnum):
    """What follows the PDS header (the prologue's 4-bit next-header field)."""

    NONE = 0
    REQ_SMALL = 1
    REQ_MEDIUM = 2
    REQ_STD = 3
    RSP = 4
    RSP_DATA = 5
    RSP_DATA_SMALL = 6


class CtrlType(enum.IntEnum):
    """PDS control packet types (in the next-header position of a CTRL)."""

    NOOP = 0
    REQ_ACK = 1
    CLEAR = 2
    REQ_CLEAR = 3
    CLOSE = 4
    REQ_CLOSE = 5
    PROBE = 6
    CREDIT = 7
    CREDIT_REQ = 8
    NEGOTIATION = 9


class NackCode(enum.IntEnum):
    """PDS NACK codes (the ones emu sends, and their neighbours). TRIMMED_ACK (0x03) is
    in 1.0.1 and the reference provider but reserved from spec 1.0.3 on: emu never sends
    it (`NACK_RESERVED`)."""

    TRIMMED = 0x01
    TRIMMED_LASTHOP = 0x02
    TRIMMED_ACK = 0x03
    NO_PDC_AVAIL = 0x04
    NO_RESOURCE = 0x0A
    PSN_OOR_WINDOW = 0x0B
    ROD_OOO = 0x0D
    INV_DPDCID = 0x0E
    PDC_MODE_MISMATCH = 0x16
    RCVR_INFER_LOSS = 0x1A


#: NACK codes reserved in the newest spec (1.0.3) though named in 1.0.1
NACK_RESERVED = frozenset({NackCode.TRIMMED_ACK})


class SesOpcode(enum.IntEnum):
    """SES request opcodes (6 bits)."""

    NO_OP = 0x00
    WRITE = 0x01
    READ = 0x02
    ATOMIC = 0x03
    FETCHING_ATOMIC = 0x04
    SEND = 0x05
    RENDEZVOUS_SEND = 0x06
    DATAGRAM_SEND = 0x07
    DEFERRABLE_SEND = 0x08
    TAGGED_SEND = 0x09


class RspOpcode(enum.IntEnum):
    """SES response opcodes (6 bits)."""

    DEFAULT_RESPONSE = 0x00
    RESPONSE = 0x01
    RESPONSE_W_DATA = 0x02
    NO_RESPONSE = 0x03


class RetCode(enum.IntEnum):
    """SES response return codes (the ones emu uses)."""

    NULL = 0x00
    OK = 0x01
    NO_MATCH = 0x05
    BAD_MKEY = 0x1C
    BAD_ADDR = 0x1D
    TOO_LONG = 0x22   #: RC_TOO_LONG: the message is longer than the buffer it addressed


# PDS flags (7 bits); which apply depends on the type (reference provider uet_pkt_hdr.h)
F_EPSN = 0x40   #: ACK: a 0-RTT closing ACK carrying the expected PSN (4-byte payload)
F_M = 0x20      #: ACK/NACK: a CE-marked packet was received (ECN echo)
F_ISROD = 0x20  #: CTRL: the PDC is ROD (0: RUD)
F_RETX = 0x10   #: a retransmission
F_AR = 0x08     #: request: ACK requested
F_P = 0x08      #: ACK: answers a probe
F_NT = 0x08     #: NACK: NACK type
F_SYN = 0x04    #: request, CTRL: the PDC is being set up (dpdcid not known yet)
F_REQ_CLOSE = 0x04  #: ACK: the target requests a close (2-bit REQ field = 2)
F_REQ_CLEAR = 0x02  #: ACK: the target requests a clear (2-bit REQ field = 1)
PDS_FLAGS = {"m": F_M, "retx": F_RETX, "ar": F_AR, "syn": F_SYN}

# SES request flags (the low 6 bits of the flags byte; the top 2 are the version)
S_DC, S_IE, S_REL, S_HD, S_EOM, S_SOM = 0x20, 0x10, 0x08, 0x04, 0x02, 0x01
SES_FLAGS = ["som", "eom", "hd", "rel", "ie", "dc"]
CC_NSCC = 0  #: ACK_CC congestion-control type of NSCC (1 = credit)

#: header bytes by PDS type (with prologue) and by next header
PDS_LEN = {PdsType.RUD_REQ: 12, PdsType.ROD_REQ: 12, PdsType.RUD_CC_REQ: 16,
           PdsType.ROD_CC_REQ: 16, PdsType.ACK: 12, PdsType.ACK_CC: 32, PdsType.NACK: 16,
           PdsType.CTRL: 16}
SES_LEN = {NextHdr.NONE: 0, NextHdr.REQ_SMALL: 20, NextHdr.REQ_MEDIUM: 32,
           NextHdr.REQ_STD: 44, NextHdr.RSP: 12, NextHdr.RSP_DATA: 20}
