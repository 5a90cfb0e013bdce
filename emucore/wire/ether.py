"""Ethernet MAC addresses: text <-> the 6 bytes on the wire (IEEE 802, EUI-48).

The one conversion every frame builder uses (RoCE templates, the switch agent's
next-hop rewrite, the benchmarks' frames). Pure.
"""

from __future__ import annotations

__all__ = ["mac_bytes", "mac_str"]


def mac_bytes(mac: str | bytes) -> bytes:
    """6 MAC bytes from 'aa:bb:cc:dd:ee:ff', 'aa-bb-...' or 6 bytes."""
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise ValueError(f"mac: need 6 bytes, got {bytes(mac)!r}")
        return bytes(mac)
    try:
        b = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    except ValueError:
        b = b""
    if len(b) != 6:
        raise ValueError(f"mac: not a MAC address: {mac!r}")
    return b


def mac_str(mac: bytes) -> str:
    """'aa:bb:cc:dd:ee:ff' from 6 MAC bytes."""
    return ":".join(f"{x:02x}" for x in mac_bytes(mac))
