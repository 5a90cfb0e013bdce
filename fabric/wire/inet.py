"""The Internet checksum (RFC 1071) of IPv4 headers (RFC 791) and UDP datagrams (RFC 768).

The one implementation the emulator uses to compute and to verify them: the switch
agent's ICMP errors (`switch_agent.forward`), the NIC's receive checks
(`fabric.wire.templates.parse`), the fuzzer's frames (`fabric.fuzz`, issue 14: fuzzed
frames). The 16-bit one's complement sum of a byte string is its value as one big
integer modulo 0xFFFF (2**16 = 1 mod 0xFFFF), which Python computes in C. Pure.
"""

from __future__ import annotations

__all__ = ["ones_sum", "inet_checksum", "udp4_checksum", "udp4_ok"]


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
