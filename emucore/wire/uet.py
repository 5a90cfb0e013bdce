"""Ultra Ethernet Transport (UET) packet formats as Scapy layers: the source of truth for
every UET frame emu sends (issue 16; the seed 004 "Fabric
Setup": FEPs, PDS, SES).

Layouts: the UE 1.0.1 specification as implemented by Wireshark's upstream dissector
(epan/dissectors/packet-uet.c, read for its layouts only) - UDP destination port 4793,
then the PDS header, then (by the PDS next-header field) an SES header, then payload.
Where that code and the field sizes of the facts disagree, emu follows the facts and says
so here:
* NSCC congestion state in ACK_CC: service_time 16 | restore_cwnd 1 | rcv_cwnd_pend 7 |
  rcvd_bytes 24 | ooo_count 16 (the dissector reads restore_cwnd at the service time's
  first byte, which would overlap it);
* SES medium request: 32 bytes, its request length in the 14 low bits of bytes 2-3 (the
  dissector steps over three bytes there, which would make it 33).
Not sent by emu, so not defined: TSS (the two open parsers disagree, UET_FACTS.md),
RUDI, UUD, ACK_CCX / NACK_CCX state (16 opaque bytes), the SES atomic and rendezvous
extension headers.

Every PDS header starts with a 16-bit prologue: type 5 bits | next header (or, for
CTRL, the control type) 4 bits | flags 7 bits. The entropy value (EV) is the UDP source
port: a sender that sprays changes it per packet (`udp_sport` is per packet here, unlike
RoCE's per QP). `scapy_frame` builds the reference frames the fast codec
(emucore.wire.uet_codec) is tested against, with the same IPv4 choices as RoCE
(emucore.wire.roce: id 0, DF, TTL 64) and the UDP checksum 0 (allowed for IPv4; UET's
integrity is the link's CRC and, with TSS, its AEAD).
"""

from __future__ import annotations

import enum

from scapy.fields import (BitEnumField, BitField, ByteEnumField, ByteField,
                          ConditionalField, FlagsField, IntField, LongField, ShortField,
                          SignedShortField, ThreeBytesField, XByteField, XIntField,
                          XLongField, XShortField)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

__all__ = ["UET_UDP_PORT", "PdsType", "NextHdr", "CtrlType", "NackCode", "SesOpcode",
           "RspOpcode", "RetCode", "PDS_FLAGS", "F_RETX", "F_AR", "F_SYN", "F_M", "F_P",
           "F_NT", "SES_FLAGS", "S_SOM", "S_EOM", "S_HD", "S_REL", "S_IE", "S_DC",
           "CC_NSCC", "PDS_LEN", "SES_LEN", "UETPds", "PDSRequest", "PDSAck", "PDSNack",
           "PDSControl", "SESStandard", "SESMedium", "SESSmall", "SESResponse",
           "SESResponseData", "scapy_frame", "UET_IP_ID", "UET_TTL"]

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


class NackCode(enum.IntEnum):
    """PDS NACK codes (the ones emu sends, and their neighbours)."""

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


# PDS flags (7 bits); which apply depends on the type
F_M = 0x20      #: ACK/NACK: a CE-marked packet was received (ECN echo)
F_RETX = 0x10   #: a retransmission
F_AR = 0x08     #: request: ACK requested
F_P = 0x08      #: ACK: answers a probe
F_NT = 0x08     #: NACK: NACK type
F_SYN = 0x04    #: request: the PDC is being set up (dpdcid not known yet)
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

_REQ_TYPES = (PdsType.RUD_REQ, PdsType.ROD_REQ, PdsType.RUD_CC_REQ, PdsType.ROD_CC_REQ)
_ACK_TYPES = (PdsType.ACK, PdsType.ACK_CC)
_NACK_TYPES = (PdsType.NACK,)


def _prologue() -> list:
    return [BitEnumField("type", PdsType.RUD_REQ, 5, {t.value: t.name for t in PdsType}),
            BitEnumField("nh", NextHdr.NONE, 4, {n.value: n.name for n in NextHdr}),
            FlagsField("flags", 0, 7, ["b0", "b1", "syn", "ar", "retx", "m", "b6"])]


class UETPds(Packet):
    """The PDS prologue alone; `dispatch_hook` picks the header of its type."""

    name = "UET PDS"
    fields_desc = _prologue()

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args, **kargs):
        """The PDS class of the type in the first 5 bits."""
        if _pkt and len(_pkt) >= 2:
            t = _pkt[0] >> 3
            if t in _REQ_TYPES:
                return PDSRequest
            if t in _ACK_TYPES:
                return PDSAck
            if t in _NACK_TYPES:
                return PDSNack
            if t == PdsType.CTRL:
                return PDSControl
        return cls


def _ses_class(nh: int):
    return {NextHdr.REQ_SMALL: SESSmall, NextHdr.REQ_MEDIUM: SESMedium,
            NextHdr.REQ_STD: SESStandard, NextHdr.RSP: SESResponse,
            NextHdr.RSP_DATA: SESResponseData}.get(nh, Raw)


class _Pds(Packet):
    def guess_payload_class(self, payload: bytes):
        """The SES header its next-header field names (payload otherwise)."""
        return _ses_class(self.nh)


class PDSRequest(_Pds):
    """RUD / ROD request (12 B; the _CC types 16 B): clear PSN offset, PSN, source PDC,
    destination PDC - or, with SYN, the PDC mode and the PSN offset from the start PSN."""

    name = "UET PDS request"
    fields_desc = _prologue() + [
        SignedShortField("clear_psn_offset", 0),
        IntField("psn", 0),
        ShortField("spdcid", 0),
        ConditionalField(ShortField("dpdcid", 0), lambda p: not p.flags & F_SYN),
        ConditionalField(BitField("use_rsv", 0, 1), lambda p: bool(p.flags & F_SYN)),
        ConditionalField(BitField("pdc_rsv", 0, 3), lambda p: bool(p.flags & F_SYN)),
        ConditionalField(BitField("psn_offset", 0, 12), lambda p: bool(p.flags & F_SYN)),
        ConditionalField(ByteField("ccc_id", 0),
                         lambda p: p.type in (PdsType.RUD_CC_REQ, PdsType.ROD_CC_REQ)),
        ConditionalField(ThreeBytesField("credit_target", 0),
                         lambda p: p.type in (PdsType.RUD_CC_REQ, PdsType.ROD_CC_REQ)),
    ]


class PDSAck(_Pds):
    """ACK (12 B) and ACK_CC (32 B): the ACK PSN as an offset from the cumulative ACK PSN,
    the PDCs; ACK_CC adds the CC type, the SACK offset and 64-bit bitmap and the NSCC
    state (service time, restore cwnd, cwnd penalty, received bytes, out-of-order count)."""

    name = "UET PDS ACK"
    fields_desc = _prologue() + [
        SignedShortField("ack_psn_offset", 0),
        IntField("cack_psn", 0),
        ShortField("spdcid", 0),
        ShortField("dpdcid", 0),
        ConditionalField(BitField("cc_type", CC_NSCC, 4), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(BitField("cc_flags", 0, 4), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(ByteField("mpr", 0), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(ShortField("sack_offset", 0), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(XLongField("sack_bitmap", 0), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(ShortField("service_time", 0), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(BitField("restore_cwnd", 0, 1), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(BitField("rcv_cwnd_pend", 0, 7), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(ThreeBytesField("rcvd_bytes", 0), lambda p: p.type == PdsType.ACK_CC),
        ConditionalField(ShortField("ooo_count", 0), lambda p: p.type == PdsType.ACK_CC),
    ]


class PDSNack(_Pds):
    """NACK (16 B): code, vendor code, the NACKed PSN, the PDCs, a 32-bit payload (the
    highest PSN received + 1)."""

    name = "UET PDS NACK"
    fields_desc = _prologue() + [
        ByteEnumField("nack_code", NackCode.TRIMMED, {c.value: c.name for c in NackCode}),
        XByteField("vendor_code", 0),
        IntField("nack_psn", 0),
        ShortField("spdcid", 0),
        ShortField("dpdcid", 0),
        IntField("nack_payload", 0),
    ]


class PDSControl(_Pds):
    """CTRL (16 B): the control type sits in the next-header position; probe opaque, PSN,
    the PDCs, a 32-bit payload."""

    name = "UET PDS control"
    fields_desc = _prologue() + [
        XShortField("probe_opaque", 0),
        IntField("psn", 0),
        ShortField("spdcid", 0),
        ShortField("dpdcid", 0),
        XIntField("ctrl_payload", 0),
    ]

    def guess_payload_class(self, payload: bytes):
        """Nothing follows a control packet's header."""
        return Raw


def _req_head() -> list:
    return [BitField("rsv", 0, 2),
            BitEnumField("opcode", SesOpcode.WRITE, 6, {o.value: o.name for o in SesOpcode}),
            BitField("ver", 0, 2),
            FlagsField("ses_flags", 0, 6, SES_FLAGS)]


def _ids() -> list:
    return [ByteField("index_generation", 0),
            ThreeBytesField("job_id", 0),
            BitField("rsv_pid", 0, 4), BitField("pid_on_fep", 0, 12),
            BitField("rsv_ri", 0, 4), BitField("resource_index", 0, 12)]


class SESStandard(Packet):
    """SES standard request header (44 B): opcode, flags, message ID, the target (job,
    PID on FEP, resource index), buffer offset, initiator, memory key / match bits, then
    header data (on the message's first packet) or payload length and message offset,
    and the request length."""

    name = "UET SES standard"
    fields_desc = _req_head() + [ShortField("message_id", 0)] + _ids() + [
        LongField("buffer_offset", 0),
        XIntField("initiator", 0),
        XLongField("mem_key", 0),
        ConditionalField(XLongField("header_data", 0), lambda p: bool(p.ses_flags & S_SOM)),
        ConditionalField(BitField("rsv4", 0, 18), lambda p: not p.ses_flags & S_SOM),
        ConditionalField(BitField("payload_length", 0, 14), lambda p: not p.ses_flags & S_SOM),
        ConditionalField(IntField("message_offset", 0), lambda p: not p.ses_flags & S_SOM),
        IntField("request_length", 0),
    ]


class SESMedium(Packet):
    """SES medium request header (32 B): a single-packet request with header data (HD)
    or a buffer offset, initiator and memory key."""

    name = "UET SES medium"
    fields_desc = _req_head() + [BitField("rsv2", 0, 2), BitField("request_length", 0, 14)] \
        + _ids() + [
        ConditionalField(XLongField("header_data", 0), lambda p: bool(p.ses_flags & S_HD)),
        ConditionalField(LongField("buffer_offset", 0), lambda p: not p.ses_flags & S_HD),
        XIntField("initiator", 0),
        XLongField("mem_key", 0),
    ]


class SESSmall(Packet):
    """SES small request header (20 B): a single-packet request to a buffer offset."""

    name = "UET SES small"
    fields_desc = _req_head() + [BitField("rsv2", 0, 2), BitField("request_length", 0, 14)] \
        + _ids() + [LongField("buffer_offset", 0)]


class SESResponse(Packet):
    """SES response header (12 B, after an ACK): opcode, return code, the message ID,
    job, and the modified length (bytes of the message delivered)."""

    name = "UET SES response"
    fields_desc = [BitField("list", 0, 2),
                   BitEnumField("rsp_opcode", RspOpcode.DEFAULT_RESPONSE, 6,
                                {o.value: o.name for o in RspOpcode}),
                   BitField("ver", 0, 2),
                   BitEnumField("return_code", RetCode.OK, 6, {c.value: c.name for c in RetCode}),
                   ShortField("message_id", 0),
                   ByteField("index_generation", 0),
                   ThreeBytesField("job_id", 0),
                   IntField("mod_length", 0)]


class SESResponseData(Packet):
    """SES response with data header (20 B): as the response, plus the read request's
    message ID, the payload length and the message offset of the data carried."""

    name = "UET SES response with data"
    fields_desc = [BitField("list", 0, 2),
                   BitEnumField("rsp_opcode", RspOpcode.RESPONSE_W_DATA, 6,
                                {o.value: o.name for o in RspOpcode}),
                   BitField("ver", 0, 2),
                   BitEnumField("return_code", RetCode.OK, 6, {c.value: c.name for c in RetCode}),
                   ShortField("message_id", 0),
                   ByteField("rsv", 0),
                   ThreeBytesField("job_id", 0),
                   ShortField("read_message_id", 0),
                   BitField("rsv2", 0, 2), BitField("payload_length", 0, 14),
                   IntField("mod_length", 0),
                   IntField("message_offset", 0)]


bind_layers(UDP, UETPds, dport=UET_UDP_PORT)


def scapy_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int,
                pds: Packet, ses: Packet | None = None, payload: bytes = b"",
                dscp: int = 24, ecn: int = 0b10, ttl: int = UET_TTL) -> Ether:
    """The reference UET frame: Ether / IPv4 (id 0, DF) / UDP (sport = the entropy
    value, dport 4793, checksum 0) / PDS / [SES] / payload."""
    if not 0 <= sport <= 0xFFFF:
        raise ValueError(f"sport: the entropy value must be a 16-bit port, got {sport!r}")
    ip = IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, ttl=ttl, id=UET_IP_ID, flags="DF")
    pkt = (Ether(src=src_mac, dst=dst_mac) / ip / UDP(sport=sport, dport=UET_UDP_PORT, chksum=0)
           / pds)
    if ses is not None:
        pkt = pkt / ses
    if payload:
        pkt = pkt / Raw(payload)
    return pkt
