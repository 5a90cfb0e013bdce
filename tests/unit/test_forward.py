"""FIB lookup, ECMP hashing, TTL/checksum rewrite (switch_agent.forward)."""

import random
import socket
import struct
from hashlib import blake2b

import pytest

from emucore.wire.ether import mac_bytes
from switch_agent.forward import (Fib, FibRoute, decrement_ttl, ecmp_hash, flow_key, ipv4_checksum,
                                  route_rewrite)
from traffic.tools.rawgen import build_frame

A = bytes.fromhex("020000000101")
R = bytes.fromhex("020000000500")


def frame(src="10.0.1.11", dst="10.0.2.14", sport=49152, dport=4791, ttl=64, **kw):
    return bytes(build_frame(A, R, src, dst, 100, sport, dport, ttl=ttl, **kw))


def make_fib(seed=0):
    routes = [FibRoute("10.0.1.0/24", ((None, "vlan101"),)),
              FibRoute("10.0.2.0/24", (("172.16.1.1", "eth5"), ("172.16.2.1", "eth6"))),
              FibRoute("10.0.2.128/25", (("172.16.2.1", "eth6"),)),
              FibRoute("0.0.0.0/0", (("172.16.1.1", "eth5"),))]
    neigh = {("vlan101", "10.0.1.12"): "02:00:00:00:02:01", ("eth5", "172.16.1.1"): "02:00:00:00:07:01",
             ("eth6", "172.16.2.1"): "02:00:00:00:08:01"}
    macs = {"eth1": "02:00:00:00:05:00", "eth2": "02:00:00:00:05:00", "eth5": "02:00:00:00:05:05",
            "eth6": "02:00:00:00:05:06"}
    svi = {"vlan101": {"02:00:00:00:01:01": "eth1", "02:00:00:00:02:01": "eth2"}}
    return Fib(routes, neigh, macs, seed, svi, {"10.0.1.1"})


def ip(s):
    return socket.inet_aton(s)


def test_longest_prefix_match():
    fib = make_fib()
    assert fib.lookup(ip("10.0.2.200")) == (("172.16.2.1", "eth6"),)
    assert len(fib.lookup(ip("10.0.2.14"))) == 2
    assert fib.lookup(ip("10.0.1.12")) == ((None, "vlan101"),)
    assert fib.lookup(ip("8.8.8.8")) == (("172.16.1.1", "eth5"),)


def test_resolve_through_svi_to_access_port():
    nh = make_fib().resolve(ip("10.0.1.12"), b"k")
    assert nh.ifname == "eth2"
    assert nh.dst_mac == mac_bytes("02:00:00:00:02:01")
    assert nh.src_mac == mac_bytes("02:00:00:00:05:00")


def test_resolve_drop_reasons():
    fib = make_fib()
    assert fib.resolve(ip("10.0.1.99"), b"k") == "no_neighbor"
    empty = Fib([], {}, {})
    assert empty.resolve(ip("10.0.1.12"), b"k") == "no_route"


SPORTS = range(49152, 49168)  # 16 RoCE flows 10.0.1.11 -> 10.0.2.14:4791


def blake2b_keyed_32(key: bytes, seed: int) -> int:
    """The documented hash, written again here: keyed BLAKE2b, 4-byte digest, key = the
    seed as 4 big-endian bytes, digest read big-endian."""
    return int.from_bytes(blake2b(key, digest_size=4, key=seed.to_bytes(4, "big")).digest(), "big")


def rocev2_key(sport: int) -> bytes:
    return ip("10.0.1.11") + ip("10.0.2.14") + b"\x11" + struct.pack("!HH", sport, 4791)


@pytest.mark.parametrize("seed, n, want", [
    # next-hop index of each of the 16 flows, computed with blake2b_keyed_32 % n
    (7, 2, [1, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0]),
    (1, 2, [1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1]),
    (99, 4, [0, 0, 0, 1, 0, 1, 2, 0, 1, 0, 1, 0, 3, 2, 3, 3]),
])
def test_ecmp_hash_is_exactly_the_documented_one(seed, n, want):
    assert ecmp_hash(rocev2_key(49152), 7) == 0x64432BA3
    keys = [flow_key(frame(sport=p)) for p in SPORTS]
    assert keys == [rocev2_key(p) for p in SPORTS]
    assert [ecmp_hash(k, seed) % n for k in keys] == want
    assert [blake2b_keyed_32(k, seed) % n for k in keys] == want


def test_seeded_fib_spreads_the_flows_exactly():
    fib = make_fib(seed=7)  # 10.0.2.0/24 -> (eth5, eth6): index 0 = eth5, 1 = eth6
    got = [fib.resolve(ip("10.0.2.14"), flow_key(frame(sport=p))).ifname for p in SPORTS]
    assert got == ["eth6" if i else "eth5" for i in [1, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0]]
    assert got.count("eth5") == 8 and got.count("eth6") == 8


def test_ecmp_deterministic_per_flow():
    fib = make_fib(seed=7)
    f = frame()
    k = flow_key(f)
    assert {fib.resolve(ip("10.0.2.14"), k).ifname for _ in range(20)} == {make_fib(7).resolve(ip("10.0.2.14"), k).ifname}


def test_ecmp_spread_over_many_flows():
    fib = make_fib(seed=1)
    rng = random.Random(3)
    counts = {"eth5": 0, "eth6": 0}
    for _ in range(4000):
        k = flow_key(frame(sport=rng.randrange(49152, 65536)))
        counts[fib.resolve(ip("10.0.2.14"), k).ifname] += 1
    assert abs(counts["eth5"] - 2000) < 200, counts


def test_ecmp_hash_four_way_spread():
    rng = random.Random(5)
    buckets = [0] * 4
    for _ in range(8000):
        buckets[ecmp_hash(rng.randbytes(13), 99) % 4] += 1
    assert max(buckets) - min(buckets) < 400, buckets


def test_seed_changes_mapping_polarization_with_same_seed():
    keys = [flow_key(frame(sport=p)) for p in range(50000, 50200)]
    a = [ecmp_hash(k, 1) % 2 for k in keys]
    b = [ecmp_hash(k, 1) % 2 for k in keys]
    c = [ecmp_hash(k, 2) % 2 for k in keys]
    assert a == b          # same seed on two switches: identical choices (polarization)
    assert a != c          # another seed decorrelates


def test_flow_key_fields():
    f = frame(sport=1234, dport=4791)
    assert flow_key(f) == ip("10.0.1.11") + ip("10.0.2.14") + b"\x11" + struct.pack("!HH", 1234, 4791)


@pytest.mark.parametrize("ttl", [64, 2, 255, 17])
def test_decrement_ttl_checksum_matches_full_recompute(ttl):
    rng = random.Random(ttl)
    for _ in range(50):
        f = frame(src=socket.inet_ntoa(rng.randbytes(4)), ttl=ttl, dscp=rng.randrange(64),
                  ecn=rng.randrange(4))
        out = decrement_ttl(f)
        hdr = out[:20]
        assert hdr[8] == ttl - 1
        assert ipv4_checksum(hdr[:10] + b"\0\0" + hdr[12:]) == struct.unpack("!H", hdr[10:12])[0]
        assert ipv4_checksum(hdr) == 0
        assert out[20:] == f[34:]


def test_ttl_expiry():
    assert decrement_ttl(frame(ttl=1)) is None


@pytest.mark.parametrize("ttl", [64, 2, 255, 17])
def test_route_rewrite_is_the_new_header_plus_decrement_ttl(ttl):
    rng = random.Random(ttl)
    l2 = bytes.fromhex("020000000701" "020000000505" "0800")
    for _ in range(50):
        f = frame(src=socket.inet_ntoa(rng.randbytes(4)), ttl=ttl, dscp=rng.randrange(64),
                  ecn=rng.randrange(4))
        out = route_rewrite(f, l2)
        assert bytes(out) == l2 + decrement_ttl(f)
        assert ipv4_checksum(bytes(out[14:34])) == 0


def test_route_rewrite_expiry():
    assert route_rewrite(frame(ttl=1), bytes(14)) is None
    assert route_rewrite(frame(ttl=0), bytes(14)) is None
