"""Forwarding decisions of the switch agent: FIB longest-prefix match, seeded ECMP hash,
next-hop resolution, TTL decrement with an incremental checksum (pure, no I/O).

Book ch.10 and ch.12 ("Flow-based load balancing"): every packet of a flow takes the
same path, chosen by a hash of the 5-tuple (src IP, dst IP, protocol, src port, dst
port). The hash is keyed per switch (the seed): equal seeds on every switch reproduce the
book's *hash polarization*; different seeds (the default) decorrelate the stages.
The FIB and neighbour table come from the switch namespace's kernel (the control plane,
docs/ARCHITECTURE.md "Planes and processes"); this module only decides.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
from hashlib import blake2b
from dataclasses import dataclass

from emucore.wire.ether import mac_bytes
from emucore.wire.inet import inet_checksum


@dataclass(frozen=True)
class NextHop:
    """Where a routed frame goes: egress interface and the MAC rewrite."""

    ifname: str
    dst_mac: bytes
    src_mac: bytes

    @property
    def header(self) -> bytes:
        """The 12 bytes that replace the Ethernet addresses."""
        return self.dst_mac + self.src_mac


def ecmp_hash(key: bytes, seed: int) -> int:
    """Seeded 32-bit hash of a flow key (keyed BLAKE2b, computed once per flow: the
    agent caches decisions). A CRC seeded through its initial value would not do: CRC
    is affine, so two seeds give the same path choice for every flow, up to a constant
    flip — every seed would polarize."""
    return int.from_bytes(blake2b(key, digest_size=4, key=(seed & 0xFFFFFFFF).to_bytes(4, "big")).digest(), "big")


def flow_key(frame: bytes | memoryview, l3: int = 14) -> bytes:
    """5-tuple key of an IPv4 frame: src, dst, proto, and ports for TCP/UDP; of a frame
    cut inside its IPv4 header, the bytes it has of it (issue 14: fuzzed frames)."""
    if len(frame) < l3 + 20:
        return bytes(frame[l3:l3 + 20])
    ihl = (frame[l3] & 0x0F) * 4
    proto = frame[l3 + 9]
    addrs = bytes(frame[l3 + 12:l3 + 20])
    if proto in (6, 17) and len(frame) >= l3 + ihl + 4:
        return addrs + bytes((proto,)) + bytes(frame[l3 + ihl:l3 + ihl + 4])
    return addrs + bytes((proto,))


def route_rewrite(frame: bytes, l2: bytes) -> bytearray | None:
    """The routed copy of an IPv4-over-Ethernet frame, in one copy: Ethernet header `l2`
    (14 bytes: next hop's MAC, ours, EtherType), TTL - 1 and the header checksum updated
    per RFC 1624 (HC' = ~(~HC + ~m + m')); None if the TTL would reach 0. The agent's hot
    path (a bytearray written in place costs about half of slicing and joining a new
    bytes)."""
    ttl = frame[22]
    if ttl <= 1:
        return None
    # m = ttl<<8|proto, m' = m - 0x100  ->  ~m + m' = 0xFEFF in ones' complement
    s = (~((frame[24] << 8) | frame[25]) & 0xFFFF) + 0xFEFF
    s = (s & 0xFFFF) + (s >> 16)
    out = bytearray(frame)
    out[:14] = l2
    out[22] = ttl - 1
    out[24] = (~s >> 8) & 0xFF
    out[25] = ~s & 0xFF
    return out


def decrement_ttl(frame: bytes) -> bytes | None:
    """Copy of the frame's IPv4 part (after its Ethernet header) with TTL - 1 and the
    checksum updated (`route_rewrite`); None if the TTL would reach 0."""
    out = route_rewrite(frame, frame[:14])
    return None if out is None else bytes(out[14:])


def icmp_time_exceeded(frame: bytes, src_ip: bytes) -> bytes:
    """IPv4 + ICMP Time Exceeded (type 11, code 0, RFC 792) for an expired frame, from
    `src_ip`, quoting the original IP header and 8 bytes (without Ethernet header)."""
    ihl = (frame[14] & 0x0F) * 4
    quote = frame[14:14 + ihl + 8]
    icmp = bytearray(struct.pack("!BBHI", 11, 0, 0, 0) + quote)
    struct.pack_into("!H", icmp, 2, ipv4_checksum(bytes(icmp)))
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0xC0, 20 + len(icmp), 0, 0, 64, 1, 0,
                               src_ip, frame[26:30]))
    struct.pack_into("!H", ip, 10, ipv4_checksum(bytes(ip)))
    return bytes(ip + icmp)


def ipv4_checksum(header: bytes) -> int:
    """Full IPv4 header checksum (`emucore.wire.inet.inet_checksum`)."""
    return inet_checksum(header)


@dataclass(frozen=True)
class FibRoute:
    """A FIB entry: prefix and its equal-cost next hops (gateway or None, ifname)."""

    prefix: str
    nexthops: tuple[tuple[str | None, str], ...]


class Fib:
    """Longest-prefix-match FIB with ECMP and neighbour resolution.

    `svi` maps an SVI interface (e.g. ``vlan101``) to its layer-2 table (MAC -> port),
    so a route out of the SVI is resolved to the physical access port, as a switch's
    ARP table + MAC table would.
    """

    def __init__(self, routes: list[FibRoute], neighbours: dict[tuple[str, str], str],
                 port_macs: dict[str, str], seed: int = 0,
                 svi: dict[str, dict[str, str]] | None = None,
                 local_ips: dict[str, str] | set[str] | None = None,
                 hash_fields: str = "5-tuple", order: str = "route") -> None:
        self.seed = seed & 0xFFFFFFFF
        self.hash_fields = hash_fields
        self.order = order
        self.local = {socket.inet_aton(ip) for ip in (local_ips or set())}
        self._by_len: dict[int, dict[int, tuple[tuple[str | None, str], ...]]] = {}
        for r in routes:
            net = ipaddress.ip_network(r.prefix, strict=False)
            self._by_len.setdefault(net.prefixlen, {})[int(net.network_address)] = \
                _ordered(r.nexthops, order)
        self._lens = sorted(self._by_len, reverse=True)
        self._masks = {n: (0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF for n in self._lens}
        self.neigh = {(dev, ip): mac_bytes(mac) for (dev, ip), mac in neighbours.items()}
        self.port_macs = {p: mac_bytes(m) for p, m in port_macs.items()}
        self.svi = {dev: {mac_bytes(m): port for m, port in table.items()}
                    for dev, table in (svi or {}).items()}

    def lookup(self, dst: bytes) -> tuple[tuple[str | None, str], ...] | None:
        """Next hops of the longest matching prefix for a 4-byte destination (None for a
        shorter one: a frame cut inside its IPv4 header, issue 14)."""
        if len(dst) != 4:
            return None
        d = int.from_bytes(dst, "big")
        for n in self._lens:
            hops = self._by_len[n].get(d & self._masks[n])
            if hops is not None:
                return hops
        return None

    def resolve(self, dst: bytes, key: bytes) -> NextHop | str:
        """The next hop for destination `dst` and flow key `key` (`flow_key`: the hash
        takes the configured fields of it), or a drop reason."""
        hops = self.lookup(dst)
        if hops is None:
            return "no_route"
        k = ecmp_index(key, self.seed, len(hops), self.hash_fields) if len(hops) > 1 else 0
        return self._resolve_hop(dst, *hops[k])

    def members(self, dst: bytes) -> list[NextHop] | str:
        """Every equal-cost next hop towards `dst` that resolves, in member order; the
        drop reason of the first when none does (or "no_route")."""
        hops = self.lookup(dst)
        if hops is None:
            return "no_route"
        out: list[NextHop] = []
        reason = ""
        for gw, dev in hops:
            nh = self._resolve_hop(dst, gw, dev)
            if isinstance(nh, str):
                reason = reason or nh
            else:
                out.append(nh)
        return out if out else reason

    def _resolve_hop(self, dst: bytes, gw: str | None, dev: str) -> NextHop | str:
        nh_ip = gw if gw is not None else socket.inet_ntoa(dst)
        mac = self.neigh.get((dev, nh_ip))
        if mac is None:
            return "no_neighbor"
        port = dev
        if dev in self.svi:
            port = self.svi[dev].get(mac)
            if port is None:
                return "no_l2_entry"
            src = self.port_macs[port]
        else:
            src = self.port_macs.get(dev)
            if src is None:
                return "no_route"
        return NextHop(port, mac, src)


def ecmp_index(key: bytes, seed: int, n: int, fields: str = "5-tuple") -> int:
    """Member index of a flow over `n` equal-cost next hops: the seeded hash of the
    configured fields of its key (`emucore.lbconfig.HASH_FIELDS`). Pure, so a lab can choose
    flows that collide (L10.4) before it runs."""
    if fields == "5-tuple":
        k = key
    elif fields == "no-sport":
        k = key[:9] + key[11:13]
    elif fields == "3-tuple":
        k = key[:9]
    else:  # dst-ip
        k = key[4:8]
    return ecmp_hash(k, seed) % n


def _port_sort_key(dev: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", dev))


def _ordered(hops: tuple[tuple[str | None, str], ...], order: str) -> tuple[tuple[str | None, str], ...]:
    """ECMP members in the configured order (`emucore.lbconfig.LoadBalance.order`): as the route
    lists them, by local port name (eth2 < eth10), or by next-hop address."""
    if order == "port":
        return tuple(sorted(hops, key=lambda h: _port_sort_key(h[1])))
    if order == "nexthop":
        return tuple(sorted(hops, key=lambda h: socket.inet_aton(h[0]) if h[0] else b""))
    return tuple(hops)


def time_exceeded_reply(fib: Fib, src_ip: bytes | None,
                        frame: bytes) -> tuple[str, bytes] | None:
    """The ICMP Time Exceeded an expired `frame` gets from `src_ip` (the address of the
    port it came in on) and the port it leaves by, (ifname, Ethernet frame); None when
    there is no address or no route back, or the frame is an ICMP error itself (never
    answered)."""
    if src_ip is None or frame[23] == 1 and (len(frame) < 35 or frame[34] == 11):
        return None
    packet = icmp_time_exceeded(frame, src_ip)
    nh = fib.resolve(frame[26:30], packet[12:20] + b"\x01")
    if nh.__class__ is str:  # no route back: the FIB's reason
        return None
    return nh.ifname, nh.header + b"\x08\x00" + packet
