"""Fast RoCEv2 frames from precomputed byte templates, and a fast parser.

Book ch.9 (Figure 9-5, the frame the RNIC builds from a work request) and ch.12
(Figures 12-1..12-3 and 12-7, the WRITE FIRST/MIDDLE/LAST/ONLY packets); formats from
the InfiniBand Architecture Specification Vol. 1 ch.9 and annex A17 (RoCEv2 ICRC).

The RNIC's data path cannot afford Scapy (a few hundred frames/s with its ICRC). A
`FrameTemplate` per (QP, direction) holds the Ethernet + IPv4 + UDP + BTH bytes that
never change for that QP, plus the masked ICRC pseudo-header and the CRC-32 state of
its constant prefix; `build` packs the variable fields with struct.pack_into, fixes the
IPv4 total length and header checksum and the UDP length, and appends the ICRC.
Every template frame is byte-identical to `emucore.wire.roce.scapy_frame` with the same
arguments (tests/unit/test_templates.py): IPv4 id 0 + DF, UDP checksum 0, payload
padded with zeros to 4 bytes and BTH padcount set (see emucore/wire/roce.py).

ICRC (annex A17.3.3, as Linux rxe_icrc.c): CRC-32 (zlib's) over 8 bytes of 1s standing
for the LRH, the IPv4 header with TOS, TTL and checksum set to 1s, the UDP header with
its checksum set to 1s, the BTH with its FECN/BECN/resv6 byte set to 1s, then the rest
of the packet up to the ICRC; stored little-endian.
"""

from __future__ import annotations

import socket
import struct
import time
import zlib
from dataclasses import dataclass

from emucore.wire.ether import mac_bytes, mac_str
from emucore.wire.ib import AETH_OPS, IMM_OPS, RETH_OPS, Op
from emucore.wire.dscp import DSCP_CNP, DSCP_ROCEV2
from emucore.wire.inet import ipv4_header_sum0, ones_sum, set_ipv4_tos_len, udp4_ok
from emucore.wire.roce_codes import (CNP_ECN, DATA_ECN, DEFAULT_TTL, IP_FLAGS_DF, IP_ID,
                                    ROCE_UDP_PORT)

__all__ = ["HDR_LEN", "FrameTemplate", "RoceFields", "parse", "malformed", "bench_build"]

HDR_LEN = 14 + 20 + 8 + 12  #: Ethernet + IPv4 + UDP + BTH
_PADS = (b"", b"\x00", b"\x00\x00", b"\x00\x00\x00")
_CNP_PAYLOAD = bytes(16)
_ICRC = struct.Struct("<I")
_RETH = struct.Struct("!QII")
_U32 = struct.Struct("!I")
_TOS_LEN = struct.Struct("!BH")
_U16 = struct.Struct("!H")
_BTH_W = struct.Struct("!BB")
_BTH_PSN = struct.Struct("!I")
_PS_CONST = 10  # pseudo-header bytes before the IPv4 total length: 8 x 0xFF, 0x45, TOS(1s)


class FrameTemplate:
    """Byte template of the RoCEv2 frames of one QP in one direction (to `dqpn`)."""

    __slots__ = ("src_mac", "dst_mac", "src_ip", "dst_ip", "sport", "dqpn", "pkey", "dscp",
                 "ecn", "ttl", "_hdr", "_ps", "_crc0", "_sum0")

    def __init__(self, src_mac: str | bytes, dst_mac: str | bytes, src_ip: str, dst_ip: str,
                 sport: int, dqpn: int, pkey: int = 0xFFFF, dscp: int = DSCP_ROCEV2,
                 ecn: int = DATA_ECN, ttl: int = DEFAULT_TTL) -> None:
        for name, val, hi in (("sport", sport, 0xFFFF), ("dqpn", dqpn, 0xFFFFFF),
                              ("pkey", pkey, 0xFFFF), ("dscp", dscp, 63), ("ecn", ecn, 3),
                              ("ttl", ttl, 255)):
            if not isinstance(val, int) or not 0 <= val <= hi:
                raise ValueError(f"{name}: must be an integer 0..{hi}, got {val!r}")
        self.src_mac, self.dst_mac = mac_bytes(src_mac), mac_bytes(dst_mac)
        self.src_ip, self.dst_ip = src_ip, dst_ip
        self.sport, self.dqpn, self.pkey = sport, dqpn, pkey
        self.dscp, self.ecn, self.ttl = dscp, ecn, ttl
        sip, dip = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, IP_ID, IP_FLAGS_DF, ttl, 17, 0, sip, dip)
        udp = struct.pack("!HHHH", sport, ROCE_UDP_PORT, 0, 0)
        bth = struct.pack("!BBHI I", 0, 0, pkey, dqpn, 0)
        self._hdr = bytes(self.dst_mac + self.src_mac + b"\x08\x00" + ip + udp + bth)
        # checksum of the constant IPv4 words (all but version/IHL+TOS, total length, csum)
        self._sum0 = ipv4_header_sum0(ip)
        ps = bytearray(b"\xff" * 8 + ip + udp + bth)
        ps[9] = 0xFF                    # TOS
        ps[16] = 0xFF                   # TTL
        ps[18:20] = b"\xff\xff"         # IPv4 header checksum
        ps[34:36] = b"\xff\xff"         # UDP checksum
        ps[40] = 0xFF                   # BTH FECN, BECN, resv6
        self._ps = ps
        self._crc0 = zlib.crc32(ps[:_PS_CONST])

    def build(self, opcode: int, psn: int, ackreq: bool = False,
              reth: tuple[int, int, int] | None = None, imm: int | None = None,
              aeth: tuple[int, int] | None = None, payload: bytes | memoryview = b"",
              ecn: int | None = None, becn: bool = False, dscp: int | None = None) -> bytes:
        """One frame: BTH(opcode, psn, ackreq, becn)[/RETH(va, rkey, dlen)][/ImmDt][/AETH(
        syndrome, msn)]/payload/pad/ICRC, with the template's addresses, QP and P_Key."""
        ext = b""
        if reth is not None:
            ext = _RETH.pack(*reth)
        if imm is not None:
            ext += _U32.pack(imm)
        if aeth is not None:
            ext += _U32.pack((aeth[0] << 24) | aeth[1])
        if opcode == Op.CNP:
            pad = 0
            if not payload:
                payload = _CNP_PAYLOAD
        else:
            pad = -len(payload) & 3
        ip_len = 40 + len(ext) + len(payload) + pad + 4
        tos = ((self.dscp if dscp is None else dscp) << 2) | (self.ecn if ecn is None else ecn)
        hdr = bytearray(self._hdr)
        set_ipv4_tos_len(hdr, 14, self._sum0, tos, ip_len)
        _U16.pack_into(hdr, 38, ip_len - 20)
        b43 = pad << 4
        word = (psn & 0xFFFFFF) | (0x80000000 if ackreq else 0)
        _BTH_W.pack_into(hdr, 42, opcode, b43)
        hdr[46] = 0x40 if becn else 0
        _BTH_PSN.pack_into(hdr, 50, word)
        ps = self._ps
        _U16.pack_into(ps, 10, ip_len)
        _U16.pack_into(ps, 32, ip_len - 20)
        _BTH_W.pack_into(ps, 36, opcode, b43)
        _BTH_PSN.pack_into(ps, 44, word)
        crc = zlib.crc32(ps[_PS_CONST:], self._crc0)
        if ext:
            crc = zlib.crc32(ext, crc)
        crc = zlib.crc32(payload, crc)
        if pad:
            crc = zlib.crc32(_PADS[pad], crc)
        return b"".join((hdr, ext, payload, _PADS[pad], _ICRC.pack(crc)))

    def build_cnp(self) -> bytes:
        """A CNP to this template's QP (the sender's QP): opcode 0x81, BECN, 16 reserved
        bytes, DSCP 48 (ch.11) whatever the template's data DSCP."""
        return self.build(Op.CNP, 0, becn=True, dscp=DSCP_CNP, ecn=CNP_ECN)

    def scapy(self, opcode: int, psn: int, **kw):
        """The same frame built by Scapy (`emucore.wire.roce.scapy_frame`), for tests and pcaps."""
        from emucore.wire.roce import scapy_frame  # Scapy only where a test or pcap asks

        kw.setdefault("dscp", self.dscp)
        kw.setdefault("ecn", self.ecn)
        return scapy_frame(mac_str(self.src_mac), mac_str(self.dst_mac), self.src_ip,
                           self.dst_ip, self.sport, opcode, self.dqpn, psn, pkey=self.pkey,
                           ttl=self.ttl, **kw)


@dataclass(slots=True)
class RoceFields:
    """What `parse` reads from a RoCEv2 frame (field names as Scapy's BTH/RETH/AETH)."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: bool
    becn: bool
    fecn: bool
    pkey: int
    padcount: int
    va: int | None
    rkey: int | None
    dlen: int | None
    imm: int | None
    syndrome: int | None
    msn: int | None
    payload: memoryview
    src_ip: str
    dst_ip: str
    sport: int
    dscp: int
    ecn: int
    src_mac: bytes
    dst_mac: bytes
    icrc_ok: bool | None = None
    csum_ok: bool | None = None  # IPv4 header checksum right, UDP checksum 0 or right

    @property
    def reth(self) -> tuple[int, int, int] | None:
        """(va, rkey, dlen) or None."""
        return None if self.va is None else (self.va, self.rkey, self.dlen)

    @property
    def aeth(self) -> tuple[int, int] | None:
        """(syndrome, msn) or None."""
        return None if self.syndrome is None else (self.syndrome, self.msn)


def parse(frame: bytes | bytearray | memoryview, verify_icrc: bool = False,
          verify_csum: bool = False) -> RoceFields | None:
    """Decode an Ethernet [802.1Q] / IPv4 / UDP 4791 / BTH frame; None if it is not one
    or is malformed (cut, IPv4 total length or UDP length not matching the frame, headers
    or pad longer than the datagram). Never raises. With verify_icrc, `icrc_ok` tells
    whether the ICRC is right; with verify_csum, `csum_ok` whether the IPv4 header
    checksum is right and the UDP checksum 0 or right (issue 14: fuzzed frames)."""
    mv = memoryview(frame)
    n = len(mv)
    l3 = 14
    etype = (mv[12] << 8) | mv[13] if n >= 14 else 0
    if etype == 0x8100 and n >= 18:
        etype = (mv[16] << 8) | mv[17]
        l3 = 18
    if etype != 0x0800 or n < l3 + 20 or mv[l3] >> 4 != 4 or mv[l3 + 9] != 17:
        return None
    ihl = (mv[l3] & 0xF) * 4
    ip_len = (mv[l3 + 2] << 8) | mv[l3 + 3]
    l4 = l3 + ihl
    end = l3 + ip_len  # drop Ethernet padding beyond the IP datagram
    if ihl < 20 or end > n or l4 + 8 + 12 + 4 > end:
        return None
    if (mv[l4 + 2] << 8) | mv[l4 + 3] != ROCE_UDP_PORT:
        return None
    if (mv[l4 + 4] << 8) | mv[l4 + 5] != end - l4:  # UDP length: the rest of the datagram
        return None
    b = l4 + 8
    opcode = mv[b]
    padcount = (mv[b + 1] >> 4) & 3
    fb = mv[b + 4]
    dqpn = (mv[b + 5] << 16) | (mv[b + 6] << 8) | mv[b + 7]
    aw = _BTH_PSN.unpack_from(mv, b + 8)[0]
    off = b + 12
    va = rkey = dlen = imm = syndrome = msn = None
    try:
        if opcode in RETH_OPS:
            va, rkey, dlen = _RETH.unpack_from(mv, off)
            off += 16
        if opcode in IMM_OPS:
            imm = _U32.unpack_from(mv, off)[0]
            off += 4
        if opcode in AETH_OPS:
            w = _U32.unpack_from(mv, off)[0]
            syndrome, msn = w >> 24, w & 0xFFFFFF
            off += 4
    except struct.error:
        return None
    pend = end - 4 - (0 if opcode == Op.CNP else padcount)
    if pend < off:
        return None
    tos = mv[l3 + 1]
    f = RoceFields(opcode, dqpn, aw & 0xFFFFFF, bool(aw >> 31), bool(fb & 0x40), bool(fb & 0x80),
                   (mv[b + 2] << 8) | mv[b + 3], padcount, va, rkey, dlen, imm, syndrome, msn,
                   mv[off:pend], socket.inet_ntoa(mv[l3 + 12:l3 + 16]),
                   socket.inet_ntoa(mv[l3 + 16:l3 + 20]), (mv[l4] << 8) | mv[l4 + 1],
                   tos >> 2, tos & 3, bytes(mv[6:12]), bytes(mv[0:6]))
    if verify_icrc:
        ps = bytearray(b"\xff" * 8)
        ps += mv[l3:b + 12]
        ps[9] = 0xFF
        ps[16] = 0xFF
        ps[18:20] = b"\xff\xff"
        u = 8 + ihl
        ps[u + 6:u + 8] = b"\xff\xff"
        ps[u + 12] = 0xFF
        crc = zlib.crc32(mv[b + 12:end - 4], zlib.crc32(ps))
        f.icrc_ok = crc == _ICRC.unpack_from(mv, end - 4)[0]
    if verify_csum:
        ok = ones_sum(mv[l3:l4]) == 0xFFFF
        if ok and (mv[l4 + 6] or mv[l4 + 7]):  # RoCEv2 NICs send UDP checksum 0
            ok = udp4_ok(mv[l3 + 12:l3 + 16], mv[l3 + 16:l3 + 20], mv[l4:end])
        f.csum_ok = ok
    return f


def malformed(frame: bytes | bytearray | memoryview) -> bool:
    """For a frame `parse` returned None for: True when it is broken where a RoCEv2
    receiver reads it (no whole Ethernet header; an IPv4 header cut, not version 4, IHL
    below 5 or a total length outside the frame; IPv4 / UDP 4791 that does not decode),
    False when it is simply not RoCEv2 (ARP, LLDP, TCP, other UDP ports). Never raises."""
    mv = memoryview(frame)
    n = len(mv)
    if n < 14:
        return True
    l3 = 14
    etype = (mv[12] << 8) | mv[13]
    if etype == 0x8100:
        if n < 18:
            return True
        etype, l3 = (mv[16] << 8) | mv[17], 18
    if etype != 0x0800:
        return False
    if n < l3 + 20 or mv[l3] >> 4 != 4:
        return True
    ihl = (mv[l3] & 0xF) * 4
    ip_len = (mv[l3 + 2] << 8) | mv[l3 + 3]
    if ihl < 20 or ip_len < ihl or l3 + ip_len > n:
        return True
    if mv[l3 + 9] != 17:
        return False
    l4 = l3 + ihl
    if l4 + 4 > l3 + ip_len:
        return True  # UDP ports cut
    return (mv[l4 + 2] << 8) | mv[l4 + 3] == ROCE_UDP_PORT


def bench_build(n: int = 20000, payload_size: int = 4096) -> tuple[float, float]:
    """Frames per second of a WRITE ONLY with RETH: (template build, Scapy build); Scapy
    builds min(n, 200) frames (it is slow). For `python -m emu bench rnic`."""
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.11", "10.0.2.11",
                      0xC123, 0x123456, pkey=0x8012)
    payload = bytes(payload_size)
    reth = (0x7F0000001000, 0x1234, payload_size)
    t0 = time.perf_counter()
    for i in range(n):
        t.build(Op.WRITE_ONLY, i, True, reth, None, None, payload)
    t1 = time.perf_counter()
    m = max(1, min(n, 200))
    for i in range(m):
        bytes(t.scapy(Op.WRITE_ONLY, i, ackreq=True, reth=reth, payload=payload))
    t2 = time.perf_counter()
    return n / (t1 - t0), m / (t2 - t1)
