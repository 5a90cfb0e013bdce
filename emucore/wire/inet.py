"""The Internet checksum (RFC 1071) of IPv4 headers (RFC 791) and UDP datagrams (RFC 768).

The one implementation the emulator uses to compute and to verify them: the switch
agent's ICMP errors (`switch_agent.forward`), the NIC's receive checks
(`emucore.wire.templates.parse`), the fuzzer's frames (`emu.bench.malformed`, issue 14: fuzzed
frames). The 16-bit one's complement sum of a byte string is its value as one big
integer modulo 0xFFFF (2**16 = 1 mod 0xFFFF), which Python computes in C. Pure.
"""

from __future__ import annotations

import struct

__all__ = ["ones_sum", "inet_checksum", "udp4_checksum", "udp4_ok", "ipv4_header_sum0",
           "set_ipv4_tos_len"]

_TOS_LEN = struct.Struct("!BH")
_U16 = struct.Struct("!H")


def ones_sum(data: bytes | bytearray | memoryview) -> int:
    """16-bit one's complement sum of `data` (an odd length is padded with a zero byte);
    0xFFFF rather than 0 unless every byte is 0, as the end-around-carry sum gives."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    r = int.from_bytes(data, "big") % 0xFFFF
    return r if r or not any(data) else 0xFFFF


def inet_checksum(data: bytes | bytearray | memoryview) -> int:
    """The checksum to store: one's complement of the sum, the field zeroed in `data`."""
    return ~ones_sum(data) & 0xFFFF


def _pseudo(src: bytes, dst: bytes, length: int) -> bytes:
    return bytes(src) + bytes(dst) + bytes((0, 17)) + length.to_bytes(2, "big")


def udp4_checksum(src: bytes, dst: bytes, segment: bytes | bytearray | memoryview) -> int:
    """UDP checksum over the IPv4 pseudo-header (4-byte `src`, `dst`) and `segment` (UDP
    header with its checksum field 0, then data); 0 is sent as 0xFFFF (RFC 768)."""
    c = inet_checksum(_pseudo(src, dst, len(segment)) + bytes(segment))
    return c or 0xFFFF


def udp4_ok(src: bytes, dst: bytes, segment: bytes | bytearray | memoryview) -> bool:
    """True when a received UDP segment's checksum is right (or 0: none was sent)."""
    if segment[6] == 0 and segment[7] == 0:
        return True
    return ones_sum(_pseudo(src, dst, len(segment)) + bytes(segment)) == 0xFFFF


def ipv4_header_sum0(ip: bytes) -> int:
    """The sum of a 20-byte IPv4 header's constant words: all but version/IHL + TOS,
    the total length and the checksum (which must be 0 in `ip`) - what a frame template
    precomputes so that each frame's checksum costs three additions."""
    return sum(struct.unpack("!10H", ip)) - (ip[0] << 8)


def set_ipv4_tos_len(hdr: bytearray, at: int, sum0: int, tos: int, ip_len: int) -> None:
    """Write TOS, total length and the header checksum into the IPv4 header at `at` of
    `hdr`, from its constant words' sum (`ipv4_header_sum0`)."""
    _TOS_LEN.pack_into(hdr, at + 1, tos, ip_len)
    s = sum0 + (hdr[at] << 8 | tos) + ip_len
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    _U16.pack_into(hdr, at + 10, ~s & 0xFFFF)
