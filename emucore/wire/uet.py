"""Ultra Ethernet Transport (UET) packet formats as Scapy layers: the source of truth for
every UET frame emu sends (issue 16; the seed 004 "Fabric
Setup": FEPs, PDS, SES).

Layouts: the UE 1.0.1 specification; every header here was checked field by field against
the UEC's reference provider (uet-ref-prov, `uet_pkt_hdr.h`: `uet_pds_req`, `uet_pds_ack`,
`uet_pds_ack_cc`, `uet_pds_nack`, `uet_pds_ctrl`, `uet_ses_req_std`, `uet_ses_req_smsg`,
`uet_ses_req_onm`, `uet_ses_rsp`) and Wireshark's upstream `packet-uet.c`. The bytes are
pinned by hand-written vectors (tests/unit/uet_vectors.py). Where Wireshark's dissector
differs the reference provider agrees with emu:
* NSCC congestion state in ACK_CC: service_time 16 | restore_cwnd 1 | rcv_cwnd_pend 7 |
  rcvd_bytes 24 | ooo_count 16 (the dissector reads restore_cwnd at the service time's
  first byte, which would overlap it);
* SES medium request: 32 bytes, its request length in the 14 low bits of bytes 2-3 (the
  dissector steps over three bytes there, which would make it 33).
ACK_CC `mpr` (maximum PSN range) is 0 in every ACK emu sends: the reference provider
encodes it in units of 128 PSNs (it sends 1) and reads 0 as "no range advertised"; emu's
target advertises none. The SYN request's use_rsv bit is disputed (Wireshark: 0x8000 of
the dpdcid slot, the reference provider: 0x1000); emu sends 0 there.
Not sent by emu, so not defined: TSS, RUDI, UUD, ACK_CCX / NACK_CCX state (16 opaque
bytes), the SES atomic and rendezvous extension headers.

The code points and sizes are emucore.wire.uet_codes'. Every PDS header starts with a
16-bit prologue: type 5 bits | next header (or, for CTRL, the control type) 4 bits | flags
7 bits. The entropy value (EV) is the UDP source
port: a sender that sprays changes it per packet (`udp_sport` is per packet here, unlike
RoCE's per QP). `scapy_frame` builds the reference frames the fast codec
(emucore.wire.uet_codec) is tested against, with the same IPv4 choices as RoCE
(emucore.wire.roce: id 0, DF, TTL 64) and the UDP checksum 0 (allowed for IPv4; UET's
integrity is the link's CRC and, with TSS, its AEAD).
"""

from __future__ import annotations

from scapy.fields import (BitEnumField, BitField, ByteEnumField, ByteField,
                          ConditionalField, FlagsField, IntField, LongField, ShortField,
                          SignedShortField, ThreeBytesField, XByteField, XIntField,
                          XLongField, XShortField)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

# the code points live in emucore.wire.uet_codes; re-exported so callers keep one import
from emucore.wire.uet_codes import (CC_NSCC, F_AR, F_EPSN, F_ISROD, F_M, F_NT, F_P,  # noqa: F401
                                    F_REQ_CLEAR, F_REQ_CLOSE, F_RETX, F_SYN, NACK_RESERVED,
                                    PDS_FLAGS, PDS_LEN, S_DC, S_EOM, S_HD, S_IE, S_REL, S_SOM,
                                    SES_FLAGS, SES_LEN, UET_IP_ID, UET_TTL, UET_UDP_PORT,
                                    CtrlType, NackCode, NextHdr, PdsType, RetCode,
                                    RspOpcode, SesOpcode)

__all__ = ["UET_UDP_PORT", "PdsType", "NextHdr", "CtrlType", "NackCode", "SesOpcode",
           "RspOpcode", "RetCode", "NACK_RESERVED", "PDS_FLAGS", "F_RETX", "F_AR", "F_SYN",
           "F_M", "F_P", "F_NT", "F_EPSN", "F_REQ_CLEAR", "F_REQ_CLOSE", "F_ISROD",
           "SES_FLAGS", "S_SOM", "S_EOM", "S_HD", "S_REL", "S_IE", "S_DC", "CC_NSCC",
           "PDS_LEN", "SES_LEN", "UETPds", "PDSRequest", "PDSAck", "PDSNack", "PDSControl",
           "SESStandard", "SESMedium", "SESSmall", "SESResponse", "SESResponseData",
           "scapy_frame", "UET_IP_ID", "UET_TTL"]

_REQ_TYPES = (PdsType.RUD_REQ, PdsType.ROD_REQ, PdsType.RUD_CC_REQ, PdsType.ROD_CC_REQ)
_ACK_TYPES = (PdsType.ACK, PdsType.ACK_CC)
_NACK_TYPES = (PdsType.NACK,)


def _prologue() -> list:
    return [BitEnumField("type", PdsType.RUD_REQ, 5, {t.value: t.name for t in PdsType}),
            BitEnumField("nh", NextHdr.NONE, 4, {n.value: n.name for n in NextHdr}),
            FlagsField("flags", 0, 7, ["b0", "b1", "syn", "ar", "retx", "m", "epsn"])]


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
    the PDCs; ACK_CC adds the CC type, the maximum PSN range (mpr), the SACK offset and
    64-bit bitmap and the NSCC state (service time, restore cwnd, cwnd penalty, received
    bytes, out-of-order count). A plain ACK with EPSN carries 4 more bytes (16 B, the
    reference provider's `uet_pds_ack_epsn`)."""

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
        ConditionalField(XIntField("epsn_payload", 0),
                         lambda p: p.type == PdsType.ACK and bool(p.flags & F_EPSN)),
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
