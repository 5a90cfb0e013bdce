"""Fast UET frames for the NIC's data path and the switch's trimming, and a fast parser
(issue 16; the layouts are emucore.wire.uet's Scapy layers, which every frame built here
matches byte for byte: tests/unit/test_uet_wire.py; both are held against hand-written
byte vectors from the UE spec and the UEC's reference provider: tests/unit/uet_vectors.py).

`UetTemplate` holds the Ethernet + IPv4 + UDP bytes of one direction between two FEPs
(fabric addresses); each frame packs the entropy value (UDP source port), the lengths,
the IPv4 checksum, the PDS header and, for requests, the SES standard header. `parse`
reads a frame into `UetFields` (None when it is not a UET frame or is malformed; never
raises) and `malformed` says why. `trim_frame` is the switch's packet trimming (UET_FACTS
"Packet trimming"): it cuts the payload after the UET headers, keeps the headers, sets
the trimmed DSCP (the ECN bits stay) and fixes the IPv4 total length and checksum and the
UDP length (the UDP checksum is 0, as every UET frame emu sends).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from emucore.wire.ether import mac_bytes
from emucore.wire.inet import ipv4_header_sum0, ones_sum, set_ipv4_tos_len
from emucore.wire.uet_codes import (F_EPSN, F_SYN, PDS_LEN, S_HD, S_SOM, SES_LEN, UET_IP_ID,
                                    UET_TTL, UET_UDP_PORT, NextHdr, PdsType)

__all__ = ["UetTemplate", "UetFields", "SesReq", "parse", "malformed", "trim_frame",
           "headers_len", "HDR_LEN"]

HDR_LEN = 14 + 20 + 8  #: Ethernet + IPv4 + UDP
_IP = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_REQ = struct.Struct("!HhIHH")
_ACK = struct.Struct("!HhIHH")
_ACK_EXT = struct.Struct("!BBHQHIH")
_NACK = struct.Struct("!HBBIHHI")
_CTRL = struct.Struct("!HHIHHI")
_SES_STD = struct.Struct("!BBHIHHQIQQI")
_SES_SMALL = struct.Struct("!BBHIHHQ")
_SES_MED = struct.Struct("!BBHIHHQIQ")
_SES_RSP = struct.Struct("!BBHII")


def _prologue(pds_type: int, nh: int, flags: int) -> int:
    return (pds_type & 0x1F) << 11 | (nh & 0xF) << 7 | (flags & 0x7F)


@dataclass(slots=True, frozen=True)
class SesReq:
    """An SES request header's fields (UET_FACTS "SES"): standard (`hdr` REQ_STD, 44 B),
    or for a single-packet message medium (32 B: header data if S_HD, else the buffer
    offset; initiator, memory key) or small (20 B: the buffer offset only). The 14-bit
    request length of medium and small bounds them to 16383 bytes; they carry no
    message ID (parsed as 0)."""

    opcode: int
    flags: int              # S_SOM, S_EOM, S_HD, ... (the version stays 0)
    message_id: int
    job_id: int
    pid_on_fep: int
    resource_index: int
    buffer_offset: int
    mem_key: int
    request_length: int
    header_data: int = 0    # on the first packet (SOM)
    payload_length: int = 0  # on later packets: this packet's payload
    message_offset: int = 0  # on later packets: where it goes in the message
    initiator: int = 0
    index_generation: int = 0
    hdr: int = NextHdr.REQ_STD

    def pack(self) -> bytes:
        """The header bytes (44, 32 or 20 by `hdr`)."""
        ij = (self.index_generation & 0xFF) << 24 | (self.job_id & 0xFFFFFF)
        if self.hdr != NextHdr.REQ_STD:
            if self.request_length > 0x3FFF:
                raise ValueError(f"request_length: {self.request_length} needs the standard "
                                 "header (medium and small hold 14 bits)")
            head = (self.opcode & 0x3F, self.flags & 0x3F, self.request_length, ij,
                    self.pid_on_fep & 0xFFF, self.resource_index & 0xFFF)
            if self.hdr == NextHdr.REQ_SMALL:
                return _SES_SMALL.pack(*head, self.buffer_offset)
            first = self.header_data if self.flags & S_HD else self.buffer_offset
            return _SES_MED.pack(*head, first, self.initiator, self.mem_key)
        tail = self.header_data if self.flags & S_SOM else (
            (self.payload_length & 0x3FFF) << 32 | (self.message_offset & 0xFFFFFFFF))
        return _SES_STD.pack(self.opcode & 0x3F, self.flags & 0x3F, self.message_id & 0xFFFF,
                             ij,
                             self.pid_on_fep & 0xFFF, self.resource_index & 0xFFF,
                             self.buffer_offset, self.initiator, self.mem_key, tail,
                             self.request_length)


class UetTemplate:
    """The frames of one direction between two FEPs (fabric addresses)."""

    __slots__ = ("src_mac", "dst_mac", "src_ip", "dst_ip", "dscp", "ecn", "ctrl_dscp",
                 "ttl", "_hdr", "_sum0")

    def __init__(self, src_mac: str | bytes, dst_mac: str | bytes, src_ip: str, dst_ip: str,
                 dscp: int = 24, ecn: int = 0b10, ctrl_dscp: int = 48,
                 ttl: int = UET_TTL) -> None:
        for name, val, hi in (("dscp", dscp, 63), ("ecn", ecn, 3), ("ctrl_dscp", ctrl_dscp, 63),
                              ("ttl", ttl, 255)):
            if not isinstance(val, int) or not 0 <= val <= hi:
                raise ValueError(f"{name}: must be an integer 0..{hi}, got {val!r}")
        self.src_mac, self.dst_mac = mac_bytes(src_mac), mac_bytes(dst_mac)
        self.src_ip, self.dst_ip = src_ip, dst_ip
        self.dscp, self.ecn, self.ctrl_dscp, self.ttl = dscp, ecn, ctrl_dscp, ttl
        ip = _IP.pack(0x45, 0, 0, UET_IP_ID, 0x4000, ttl, 17, 0, socket.inet_aton(src_ip),
                      socket.inet_aton(dst_ip))
        self._hdr = bytes(self.dst_mac + self.src_mac + b"\x08\x00" + ip)
        self._sum0 = ipv4_header_sum0(ip)

    def _frame(self, sport: int, tos: int, body: bytes) -> bytes:
        ip_len = 28 + len(body)
        hdr = bytearray(self._hdr)
        set_ipv4_tos_len(hdr, 14, self._sum0, tos, ip_len)
        return b"".join((hdr, _UDP.pack(sport, UET_UDP_PORT, ip_len - 20, 0), body))

    def request(self, sport: int, psn: int, spdcid: int, dpdcid: int | None, flags: int,
                ses: SesReq, payload: bytes | memoryview = b"", rod: bool = False,
                psn_offset: int = 0, clear_psn_offset: int = 0, ecn: int | None = None) -> bytes:
        """A RUD (or ROD) request with its SES header (`ses.hdr`: standard, medium or
        small); dpdcid None = SYN (the PDC is new: the PSN offset from its start PSN goes
        where dpdcid would)."""
        if dpdcid is None:
            flags |= F_SYN
            last = psn_offset & 0xFFF
        else:
            flags &= ~F_SYN
            last = dpdcid & 0xFFFF
        t = PdsType.ROD_REQ if rod else PdsType.RUD_REQ
        pds = _REQ.pack(_prologue(t, ses.hdr, flags), clear_psn_offset, psn & 0xFFFFFFFF,
                        spdcid & 0xFFFF, last)
        tos = self.dscp << 2 | (self.ecn if ecn is None else ecn)
        return self._frame(sport, tos, pds + ses.pack() + bytes(payload))

    def ack(self, sport: int, cack_psn: int, ack_psn_offset: int, spdcid: int, dpdcid: int,
            flags: int = 0, sack_offset: int = 0, sack_bitmap: int = 0, service_time: int = 0,
            rcvd_bytes: int = 0, ooo_count: int = 0, rsp: tuple[int, int, int, int, int]
            | None = None, mpr: int = 0) -> bytes:
        """An ACK_CC with the NSCC state (cc type 0); `rsp` = (rsp opcode, return code,
        message id, job id, mod length) adds an SES response header. `mpr` (maximum PSN
        range, units of 128 PSNs in the reference provider) is 0 from emu's target: no
        range advertised (docs/UET.md)."""
        nh = NextHdr.RSP if rsp is not None else NextHdr.NONE
        body = _ACK.pack(_prologue(PdsType.ACK_CC, nh, flags), ack_psn_offset,
                         cack_psn & 0xFFFFFFFF, spdcid & 0xFFFF, dpdcid & 0xFFFF)
        body += _ACK_EXT.pack(0, mpr & 0xFF, sack_offset & 0xFFFF, sack_bitmap & 0xFFFFFFFFFFFFFFFF,
                              service_time & 0xFFFF, rcvd_bytes & 0xFFFFFF, ooo_count & 0xFFFF)
        if rsp is not None:
            op, rc, mid, job, mod = rsp
            body += _SES_RSP.pack(op & 0x3F, rc & 0x3F, mid & 0xFFFF, job & 0xFFFFFF, mod)
        return self._frame(sport, self.ctrl_dscp << 2 | self.ecn, body)

    def nack(self, sport: int, code: int, psn: int, spdcid: int, dpdcid: int,
             payload: int = 0, flags: int = 0) -> bytes:
        """A NACK of `psn` with `code` (NackCode); payload = the highest PSN received + 1."""
        body = _NACK.pack(_prologue(PdsType.NACK, NextHdr.NONE, flags), code & 0xFF, 0,
                          psn & 0xFFFFFFFF, spdcid & 0xFFFF, dpdcid & 0xFFFF,
                          payload & 0xFFFFFFFF)
        return self._frame(sport, self.ctrl_dscp << 2 | self.ecn, body)


@dataclass(slots=True)
class UetFields:
    """What `parse` reads from a UET frame (names as emucore.wire.uet's layers)."""

    src_mac: bytes
    dst_mac: bytes
    src_ip: str
    dst_ip: str
    dscp: int
    ecn: int
    sport: int
    pds_type: int
    nh: int
    flags: int
    spdcid: int
    dpdcid: int | None = None       # None: SYN
    psn: int = 0                    # request, CTRL
    psn_offset: int = 0             # SYN requests
    clear_psn_offset: int = 0
    cack_psn: int = 0               # ACK
    ack_psn_offset: int = 0
    mpr: int = 0                    # ACK_CC: maximum PSN range
    epsn_payload: int = 0           # plain ACK with EPSN
    sack_offset: int = 0
    sack_bitmap: int = 0
    service_time: int = 0
    rcvd_bytes: int = 0
    ooo_count: int = 0
    nack_code: int = 0              # NACK (its PSN in `psn`)
    nack_payload: int = 0
    ses: SesReq | None = None       # request
    rsp: tuple[int, int, int, int, int] | None = None  # ACK with an SES response
    payload: memoryview = memoryview(b"")
    csum_ok: bool = True

    @property
    def ack_psn(self) -> int:
        """The PSN that triggered the ACK (cack_psn + ack_psn_offset)."""
        return (self.cack_psn + self.ack_psn_offset) & 0xFFFFFFFF


def headers_len(pds_type: int, nh: int, flags: int = 0) -> int | None:
    """UET header bytes (PDS + SES) of a packet of this type, next header and PDS flags
    (a plain ACK with EPSN carries 4 more); None if emu does not know them."""
    p = PDS_LEN.get(pds_type)
    s = SES_LEN.get(nh) if pds_type != PdsType.CTRL else 0
    if p is None or s is None:
        return None
    return p + s + (4 if pds_type == PdsType.ACK and flags & F_EPSN else 0)


def _ip_of(mv: memoryview) -> tuple[int, int] | str:
    """(IPv4 offset, UDP offset) of a UET frame, or why it is not one."""
    n = len(mv)
    if n < 14:
        return "shorter than an Ethernet header"
    if mv[12] != 0x08 or mv[13] != 0x00:
        return "not IPv4"
    if n < 34 or mv[14] >> 4 != 4:
        return "cut IPv4 header"
    ihl = (mv[14] & 0xF) * 4
    if ihl < 20 or n < 14 + ihl + 8:
        return "cut IPv4 or UDP header"
    if mv[23] != 17:
        return "not UDP"
    tot = mv[16] << 8 | mv[17]
    if tot != n - 14 and not (n == 60 and tot < 46):  # minimum frames are padded
        return f"IPv4 total length {tot} for a {n - 14}-byte packet"
    u = 14 + ihl
    if (mv[u + 2] << 8 | mv[u + 3]) != UET_UDP_PORT:
        return "not UDP 4793"
    if (mv[u + 4] << 8 | mv[u + 5]) != tot - ihl:
        return "UDP length does not match the IPv4 total length"
    return 14, u


def malformed(frame: bytes | bytearray | memoryview) -> str | None:
    """Why a frame is not a well-formed UET frame emu can read (None: it is one)."""
    mv = memoryview(frame)
    at = _ip_of(mv)
    if isinstance(at, str):
        return at
    _l3, u = at
    end = 14 + (mv[16] << 8 | mv[17])
    if end - (u + 8) < 2:
        return "no PDS prologue"
    w = mv[u + 8] << 8 | mv[u + 9]
    t, nh = w >> 11, w >> 7 & 0xF
    need = headers_len(t, nh, w & 0x7F)
    if need is None:
        return f"PDS type {t} / next header {nh} unknown to emu"
    if end - (u + 8) < need:
        return f"cut UET headers ({end - u - 8} of {need} bytes)"
    return None


def parse(frame: bytes | bytearray | memoryview, verify_csum: bool = False) -> UetFields | None:
    """Decode an Ethernet / IPv4 / UDP 4793 / PDS [/ SES] frame; None if it is not one
    emu reads (see `malformed`). With verify_csum, `csum_ok` says whether the IPv4
    header checksum is right and the UDP checksum 0."""
    mv = memoryview(frame)
    if malformed(mv) is not None:
        return None
    ihl = (mv[14] & 0xF) * 4
    u = 14 + ihl
    end = 14 + (mv[16] << 8 | mv[17])
    p = u + 8
    w = mv[p] << 8 | mv[p + 1]
    t, nh, flags = w >> 11, w >> 7 & 0xF, w & 0x7F
    tos = mv[15]
    f = UetFields(bytes(mv[6:12]), bytes(mv[0:6]), socket.inet_ntoa(mv[26:30]),
                  socket.inet_ntoa(mv[30:34]), tos >> 2, tos & 3, mv[u] << 8 | mv[u + 1],
                  t, nh, flags, 0)
    if verify_csum:
        f.csum_ok = ones_sum(mv[14:14 + ihl]) == 0xFFFF and not (mv[u + 6] or mv[u + 7])
    if t in (PdsType.RUD_REQ, PdsType.ROD_REQ, PdsType.RUD_CC_REQ, PdsType.ROD_CC_REQ):
        _w, f.clear_psn_offset, f.psn, f.spdcid, last = _REQ.unpack_from(mv, p)
        if flags & F_SYN:
            f.psn_offset = last & 0xFFF
        else:
            f.dpdcid = last
        s = p + PDS_LEN[t]
        if nh == NextHdr.REQ_STD:
            (op, sf, mid, ij, pid, ri, boff, init, key, tail,
             rlen) = _SES_STD.unpack_from(mv, s)
            som = bool(sf & S_SOM)
            f.ses = SesReq(op & 0x3F, sf & 0x3F, mid, ij & 0xFFFFFF, pid & 0xFFF, ri & 0xFFF,
                           boff, key, rlen, tail if som else 0,
                           0 if som else (tail >> 32) & 0x3FFF,
                           0 if som else tail & 0xFFFFFFFF, init, ij >> 24)
        elif nh == NextHdr.REQ_SMALL:
            op, sf, rl, ij, pid, ri, boff = _SES_SMALL.unpack_from(mv, s)
            f.ses = SesReq(op & 0x3F, sf & 0x3F, 0, ij & 0xFFFFFF, pid & 0xFFF, ri & 0xFFF,
                           boff, 0, rl & 0x3FFF, index_generation=ij >> 24,
                           hdr=NextHdr.REQ_SMALL)
        elif nh == NextHdr.REQ_MEDIUM:
            op, sf, rl, ij, pid, ri, hd, init, key = _SES_MED.unpack_from(mv, s)
            hdr = bool(sf & S_HD)
            f.ses = SesReq(op & 0x3F, sf & 0x3F, 0, ij & 0xFFFFFF, pid & 0xFFF, ri & 0xFFF,
                           0 if hdr else hd, key, rl & 0x3FFF, hd if hdr else 0, 0, 0, init,
                           ij >> 24, NextHdr.REQ_MEDIUM)
        f.payload = mv[s + SES_LEN[nh]:end]
    elif t in (PdsType.ACK, PdsType.ACK_CC):
        _w, f.ack_psn_offset, f.cack_psn, f.spdcid, f.dpdcid = _ACK.unpack_from(mv, p)
        s = p + 12
        if t == PdsType.ACK and flags & F_EPSN:
            (f.epsn_payload,) = struct.unpack_from("!I", mv, s)
            s += 4
        if t == PdsType.ACK_CC:
            (_cc, f.mpr, f.sack_offset, f.sack_bitmap, f.service_time, rb,
             f.ooo_count) = _ACK_EXT.unpack_from(mv, s)
            f.rcvd_bytes = rb & 0xFFFFFF
            s += 20
        if nh == NextHdr.RSP:
            op, rc, mid, ij, mod = _SES_RSP.unpack_from(mv, s)
            f.rsp = (op & 0x3F, rc & 0x3F, mid, ij & 0xFFFFFF, mod)
        f.payload = mv[s + SES_LEN.get(nh, 0):end]
    elif t == PdsType.NACK:
        (_w, f.nack_code, _v, f.psn, f.spdcid, f.dpdcid,
         f.nack_payload) = _NACK.unpack_from(mv, p)
        f.payload = mv[p + 16:end]
    elif t == PdsType.CTRL:
        _w, _opq, f.psn, f.spdcid, f.dpdcid, f.nack_payload = _CTRL.unpack_from(mv, p)
        f.payload = mv[p + 16:end]
    return f


def trim_frame(frame: bytes | bytearray | memoryview, keep: int, dscp: int) -> bytes | None:
    """The frame with its UDP payload cut to `keep` bytes (never into the UET headers),
    DSCP `dscp` (ECN kept), IPv4 total length and checksum and UDP length fixed; None if
    it is not a UET frame (nothing to trim) or already no longer than that."""
    mv = memoryview(frame)
    if malformed(mv) is not None:
        return None
    ihl = (mv[14] & 0xF) * 4
    u = 14 + ihl
    w = mv[u + 8] << 8 | mv[u + 9]
    hdrs = headers_len(w >> 11, w >> 7 & 0xF, w & 0x7F) or 0
    cut = u + 8 + max(keep, hdrs)
    if cut >= len(mv):
        return None
    out = bytearray(mv[:cut])
    ip_len = cut - 14
    out[15] = (dscp & 0x3F) << 2 | (out[15] & 3)
    out[16:18] = ip_len.to_bytes(2, "big")
    out[24:26] = b"\0\0"
    out[24:26] = (~ones_sum(out[14:14 + ihl]) & 0xFFFF).to_bytes(2, "big")
    out[u + 4:u + 6] = (ip_len - ihl).to_bytes(2, "big")
    return bytes(out)
