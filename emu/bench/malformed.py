"""Malformed frames for the emulator's parsers (issue 14: fuzzed frames). Pure, no I/O.

Users run the emulator as root, so garbage on a wire must be dropped and counted by
the switch agent and the NICs, never crash them. `malformed_frames(seed, n, base)`
yields n (category, frame) pairs mutated from valid templates (`base_frames`: the
RoCEv2 WRITE ONLY the NIC sends, a PFC pause, an LLDPDU with the DCBX TLVs), the
categories in turn (n // 9 or one more each). Same seed, same frames. `dst_mac` /
`dst_ip` aim the unicast frames at a port or NIC so that they get past its MAC check
and reach its parsers; the IPv4 checksum and the ICRC are recomputed wherever a
category tests something else, so that the frame reaches the layer under test:

* truncated: each template cut at every header boundary (Ethernet, IPv4, UDP, BTH,
  RETH, payload, ICRC; PFC opcode/vector/quanta; every LLDP TLV) and inside the
  headers, then at random points.
* bad_length: IPv4 total length too big, too small, zero; IHL 0..4, 6, 15; UDP length
  0..7, too small, too big; both lengths consistent but too short for BTH or ICRC.
* bad_checksum: IPv4 header checksum, a wrong non-zero UDP checksum, the ICRC, a
  payload or BTH byte changed under the old ICRC.
* bad_opcode: BTH opcodes of other transports (UC, RD, UD, CNP, vendor), RC opcodes
  this NIC does not use (SEND, READ, atomics), reserved ones, ACK over a RETH.
* bad_psn: PSNs just ahead, far ahead (2**23 - 1, 2**23), behind, random, 0, 2**24 - 1.
* bad_rkey: RETH R_Key, virtual address and DMA length nonsense (0, all ones, off by
  one, beyond the MR), unknown destination QPNs (0, 1, 0xFFFFFF, random), P_Keys.
* bad_pfc: short, wrong opcode (802.3x PAUSE, 0, 0xFFFF), class-enable bits beyond 7,
  quanta 0 and 0xFFFF on every class, padded (60 bytes) and unpadded (34), over-long,
  VLAN-tagged, to a unicast address. Any frame of any category that a receiver would
  obey as a pause leaves with its quanta zeroed (`defused`): a valid pause is a storm,
  which is a fault to schedule, not garbage.
* bad_lldp: TLV length overrunning the frame, mandatory TLVs (chassis, port, TTL)
  missing or out of order, DCBX organisation-specific TLVs truncated, zero-length
  TLVs, no End TLV, a TTL TLV of the wrong length.
* random: random bytes of random length 0..9216; an Ethernet header to `dst_mac` (IPv4,
  MAC control, LLDP, 802.1Q, ARP, IPv6 or a random EtherType) + random bytes; IPv4 /
  UDP 4791 headers to `dst_ip` + random BTH and payload (half with a valid ICRC).
"""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator

from emucore.qos.qosconfig import QosConfig
from emucore.wire.ether import mac_bytes
from emucore.wire.ib import Op, psn_add
from emucore.wire.inet import inet_checksum, udp4_checksum
from emucore.qos.dcbx import build_lldp_frame
from emucore.wire.pause import build_pfc_frame, parse_pfc
from emucore.wire.roce import icrc_reference, udp_sport
from emucore.wire.templates import FrameTemplate, parse

__all__ = ["CATEGORIES", "base_frames", "malformed_frames", "MAX_FRAME"]

CATEGORIES = ("truncated", "bad_length", "bad_checksum", "bad_opcode", "bad_psn", "bad_rkey",
              "bad_pfc", "bad_lldp", "random")
MAX_FRAME = 9216  #: the longest random frame (the fabric's jumbo MTU)
_IP, _UDP, _BTH, _RETH = 14, 34, 42, 54  # offsets in an untagged IHL-5 RoCEv2 frame
_PAYLOAD = _RETH + 16
_ETHERTYPES = (0x0800, 0x8808, 0x88CC, 0x8100, 0x0806, 0x86DD)


def base_frames(src_mac: str = "02:00:00:00:01:01", dst_mac: str = "02:00:00:00:02:01",
                src_ip: str = "10.0.1.11", dst_ip: str = "10.0.1.12", dqpn: int = 0x123456,
                psn: int = 0xABC, va: int = 0x7F0000001000, rkey: int = 0x1234,
                payload: bytes = bytes(range(64)),
                qos: QosConfig | None = None) -> dict[str, bytes]:
    """Valid templates: "roce" a WRITE ONLY with AckReq, RETH and ICRC as the NIC builds
    it (book ch.12 Fig 12-7; QPN and PSN of Fig 9-5), "pfc" a pause of priority 3 for
    0xFFFF quanta, "lldp" an LLDPDU with the DCBX TLVs of `qos` (the book's by default)."""
    t = FrameTemplate(src_mac, dst_mac, src_ip, dst_ip, udp_sport(1, dqpn), dqpn)
    return {"roce": t.build(Op.WRITE_ONLY, psn, True, (va, rkey, len(payload)), payload=payload),
            "pfc": build_pfc_frame(mac_bytes(src_mac), 0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
            "lldp": build_lldp_frame(src_mac, src_mac, "eth1", "fuzz",
                                     qos if qos is not None else QosConfig())}


# -- fixing what a mutation should not break ------------------------------------------
def _fix_ip(b: bytearray) -> bytearray:
    """Recompute the IPv4 header checksum (over the IHL's bytes, at least 20)."""
    n = max(20, (b[_IP] & 0xF) * 4)
    b[_IP + 10:_IP + 12] = b"\0\0"
    b[_IP + 10:_IP + 12] = inet_checksum(b[_IP:_IP + n]).to_bytes(2, "big")
    return b


def _fix_icrc(b: bytearray) -> bytearray:
    """Recompute the ICRC (IHL 5, annex A17.3.3)."""
    struct.pack_into("<I", b, len(b) - 4, icrc_reference(bytes(b)))
    return b


def _aim(roce: bytes, dst_mac: bytes | None, dst_ip: str | None) -> bytes:
    b = bytearray(roce)
    if dst_mac is not None:
        b[0:6] = dst_mac
    if dst_ip is not None:
        b[_IP + 16:_IP + 20] = socket.inet_aton(dst_ip)
    return bytes(_fix_icrc(_fix_ip(b)))


def _tlvs(lldp: bytes) -> list[tuple[int, bytes]]:
    """(type, value) of every TLV of a valid LLDP frame, End included."""
    out, off = [], 14
    while off + 2 <= len(lldp):
        h = int.from_bytes(lldp[off:off + 2], "big")
        t, n = h >> 9, h & 0x1FF
        out.append((t, lldp[off + 2:off + 2 + n]))
        off += 2 + n
        if t == 0:
            break
    return out


def _tlv(t: int, value: bytes, length: int | None = None) -> bytes:
    n = len(value) if length is None else length
    return ((t << 9) | (n & 0x1FF)).to_bytes(2, "big") + value


class _Gen:
    """The state of one generator: templates, random source, occurrences per category."""

    def __init__(self, rng: random.Random, base: dict, dst_mac: bytes | None,
                 dst_ip: str | None) -> None:
        for key in ("roce", "pfc", "lldp"):
            if key not in base:
                raise ValueError(f"base: needs a {key!r} frame, got keys {sorted(base)}")
        f = parse(base["roce"])
        if f is None or f.va is None or base["roce"][12:15] != b"\x08\x00\x45":
            raise ValueError("base['roce']: must be an untagged IHL-5 RoCEv2 frame with a RETH")
        self.rng = rng
        self.roce = _aim(base["roce"], dst_mac, dst_ip)
        self.pfc, self.lldp = bytes(base["pfc"]), bytes(base["lldp"])
        self.dst_mac = dst_mac if dst_mac is not None else self.roce[0:6]
        self.psn = f.psn
        self.seen = {c: 0 for c in CATEGORIES}

    def pick(self, cat: str, options: list) -> object:
        """Options in turn, then random ones: every variant appears within len(options)."""
        k = self.seen[cat]
        return options[k] if k < len(options) else self.rng.choice(options)

    # -- categories -----------------------------------------------------------------
    def truncated(self) -> bytes:
        r, p, ll = self.roce, self.pfc, self.lldp
        tlv_cuts, off = [14], 14
        for _t, v in _tlvs(ll):  # inside the TLV header, inside its value, after it
            tlv_cuts += [off + 1, off + 2 + len(v) // 2, off + 2 + len(v)]
            off += 2 + len(v)
        cuts = ([(r, c) for c in (0, 1, 6, 12, 13, 14, 15, 20, 24, 33, 34, 36, 38, 41, 42, 43,
                                   46, 50, 53, 54, 60, 62, 66, 69, 70, len(r) - 5, len(r) - 4,
                                   len(r) - 1)]
                + [(p, c) for c in (13, 14, 15, 16, 17, 18, 20, 33, 34, 59)]
                + [(ll, c) for c in sorted(set(tlv_cuts)) if c < len(ll)])
        frame, cut = self.pick("truncated", cuts)
        if self.seen["truncated"] >= len(cuts):
            frame = self.rng.choice((r, p, ll))
            cut = self.rng.randrange(len(frame))
        return frame[:cut]

    def bad_length(self) -> bytes:
        b = bytearray(self.roce)
        ip_len = len(b) - _IP
        kind, v = self.pick("bad_length", [
            ("ip", ip_len + 1), ("ip", ip_len + 100), ("ip", 0xFFFF), ("ip", 0), ("ip", 19),
            ("ip", 20), ("ip", 28), ("ip", ip_len - 1), ("ip", ip_len - 4), ("ihl", 0),
            ("ihl", 1), ("ihl", 4), ("ihl", 6), ("ihl", 15), ("udp", 0), ("udp", 1), ("udp", 7),
            ("udp", 8), ("udp", ip_len - 21), ("udp", ip_len - 19), ("udp", 0xFFFF),
            ("both", 8), ("both", 12), ("both", 20), ("both", 24), ("both", 36)])
        if kind == "ip":
            b[_IP + 2:_IP + 4] = v.to_bytes(2, "big")
        elif kind == "ihl":
            b[_IP] = 0x40 | v
        elif kind == "udp":
            b[_UDP + 4:_UDP + 6] = v.to_bytes(2, "big")
        else:  # IPv4 and UDP lengths agree on a datagram too short for BTH (+ RETH) + ICRC
            b = b[:_UDP + v]
            b[_IP + 2:_IP + 4] = (20 + v).to_bytes(2, "big")
            b[_UDP + 4:_UDP + 6] = v.to_bytes(2, "big")
        return bytes(_fix_ip(b))

    def bad_checksum(self) -> bytes:
        b = bytearray(self.roce)
        kind = self.pick("bad_checksum", ["ip", "udp", "icrc", "payload", "bth"])
        x = self.rng.randrange(1, 0x10000)  # never 0: the field really changes
        if kind == "ip":
            b[_IP + 10] ^= x >> 8 or 1
        elif kind == "udp":
            seg = bytes(b[_UDP:_UDP + 6]) + b"\0\0" + bytes(b[_UDP + 8:])
            good = udp4_checksum(b[_IP + 12:_IP + 16], b[_IP + 16:_IP + 20], seg)
            bad = good ^ x
            b[_UDP + 6:_UDP + 8] = (bad if bad else good ^ 1).to_bytes(2, "big")
        elif kind == "icrc":
            b[-4] ^= x & 0xFF or 1
        elif kind == "payload":
            b[self.rng.randrange(_PAYLOAD, len(b) - 4)] ^= x & 0xFF or 1
        else:  # P_Key, QPN or PSN byte: ICRC-covered
            b[self.rng.choice((44, 45, 48, 49, 52, 53))] ^= x & 0xFF or 1
        return bytes(b)

    def bad_opcode(self) -> bytes:
        b = bytearray(self.roce)
        ops = ([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x08, 0x0C, 0x0D, 0x0E, 0x0F, 0x10,
                0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x1F, 0x20, 0x2A, 0x3F, 0x40,
                0x4A, 0x51, 0x5F, 0x64, 0x65, 0x7F, 0x80, 0x81, 0x82, 0xC0, 0xFF])
        b[_BTH] = self.pick("bad_opcode", ops)
        return bytes(_fix_icrc(b))

    def bad_psn(self) -> bytes:
        b = bytearray(self.roce)
        p = self.psn
        psn = self.pick("bad_psn", [psn_add(p, 1), psn_add(p, 2), psn_add(p, (1 << 23) - 1),
                                    psn_add(p, 1 << 23), psn_add(p, -1), psn_add(p, -(1 << 22)),
                                    0, 0xFFFFFF, None])
        if psn is None:
            psn = self.rng.getrandbits(24)
        ack = self.rng.getrandbits(1) << 31
        struct.pack_into("!I", b, _BTH + 8, ack | psn)
        return bytes(_fix_icrc(b))

    def bad_rkey(self) -> bytes:
        b = bytearray(self.roce)
        va, rkey, dlen = struct.unpack_from("!QII", b, _RETH)
        rnd = self.rng.getrandbits
        field, v = self.pick("bad_rkey", [
            ("rkey", 0), ("rkey", 0xFFFFFFFF), ("rkey", rkey ^ 1), ("rkey", rnd(32)),
            ("va", 0), ("va", (1 << 64) - 1), ("va", va - 1), ("va", va + (1 << 40)),
            ("va", (1 << 64) - 8), ("dlen", 0), ("dlen", 0xFFFFFFFF), ("dlen", dlen + 1),
            ("dlen", dlen - 1), ("dlen", 1 << 31), ("qpn", 0), ("qpn", 1), ("qpn", 0xFFFFFF),
            ("qpn", rnd(24)), ("pkey", 0), ("pkey", 0x7FFF), ("pkey", rnd(16))])
        if field == "rkey":
            struct.pack_into("!I", b, _RETH + 8, v)
        elif field == "va":
            struct.pack_into("!Q", b, _RETH, v)
        elif field == "dlen":
            struct.pack_into("!I", b, _RETH + 12, v)
        elif field == "qpn":
            b[_BTH + 5:_BTH + 8] = v.to_bytes(3, "big")
        else:
            b[_BTH + 2:_BTH + 4] = v.to_bytes(2, "big")
        return bytes(_fix_icrc(b))

    def bad_pfc(self) -> bytes:
        p = self.pfc
        body = p[:34]
        q = struct.Struct("!H8H")
        kind = self.pick("bad_pfc", ["short", "pause_opcode", "opcode0", "opcodeFFFF",
                                     "ce_high", "ce_all", "quanta0", "quantaFFFF",
                                     "unpadded", "long", "vlan", "unicast"])
        if kind == "short":
            return p[:self.rng.randrange(14, 34)]
        if kind in ("pause_opcode", "opcode0", "opcodeFFFF"):
            op = {"pause_opcode": 1, "opcode0": 0, "opcodeFFFF": 0xFFFF}[kind]
            return p[:14] + op.to_bytes(2, "big") + p[16:]
        if kind in ("ce_high", "ce_all"):
            ce = 0xFF08 if kind == "ce_high" else 0xFFFF
            return p[:16] + q.pack(ce, *[0xFFFF] * 8) + p[34:]
        if kind in ("quanta0", "quantaFFFF"):
            v = 0 if kind == "quanta0" else 0xFFFF
            return p[:16] + q.pack(0xFF, *[v] * 8) + p[34:]
        if kind == "unpadded":
            return body
        if kind == "long":
            return p + self.rng.randbytes(self.rng.randrange(1, 1500))
        if kind == "vlan":
            return p[:12] + b"\x81\x00\x60\x00" + p[12:]
        return self.dst_mac + p[6:]

    def bad_lldp(self) -> bytes:
        tlvs = _tlvs(self.lldp)
        head = self.lldp[:14]
        end = _tlv(0, b"")
        body = [_tlv(t, v) for t, v in tlvs if t != 0]
        org = [i for i, (t, _) in enumerate(tlvs) if t == 127]
        kind = self.pick("bad_lldp", ["overrun_last", "overrun_first", "len511",
                                      "no_chassis", "no_port", "no_ttl", "swapped",
                                      "dcbx_short", "org_no_oui", "zero_chassis", "zero_org",
                                      "zero_ttl", "no_end", "no_end_garbage", "ttl_len4",
                                      "empty"])
        if kind == "overrun_last":
            t, v = tlvs[org[-1]]
            return head + b"".join(body[:-1]) + _tlv(t, v, len(v) + 40)
        if kind == "overrun_first":
            t, v = tlvs[0]
            return head + _tlv(t, v, 300) + b"".join(body[1:]) + end
        if kind == "len511":
            t, v = tlvs[1]
            return head + body[0] + _tlv(t, v, 511) + b"".join(body[2:]) + end
        if kind in ("no_chassis", "no_port", "no_ttl"):
            drop = {"no_chassis": 0, "no_port": 1, "no_ttl": 2}[kind]
            return head + b"".join(x for i, x in enumerate(body) if i != drop) + end
        if kind == "swapped":
            return head + body[1] + body[0] + b"".join(body[2:]) + end
        if kind == "dcbx_short":  # one DCBX TLV cut short, its length saying so
            t, v = tlvs[self.rng.choice(org)]
            cut = self.rng.randrange(4, len(v))
            return head + b"".join(body[:4]) + _tlv(t, v[:cut]) + end
        if kind == "org_no_oui":
            return head + b"".join(body[:4]) + _tlv(127, b"\x00\x80") + end
        if kind == "zero_chassis":
            return head + _tlv(1, b"") + b"".join(body[1:]) + end
        if kind == "zero_org":
            return head + b"".join(body[:4]) + _tlv(127, b"") + end
        if kind == "zero_ttl":
            return head + b"".join(body[:2]) + _tlv(3, b"") + b"".join(body[3:]) + end
        if kind == "no_end":
            return head + b"".join(body)
        if kind == "no_end_garbage":
            return head + b"".join(body) + self.rng.randbytes(self.rng.randrange(1, 64))
        if kind == "ttl_len4":
            ttl4 = _tlv(3, b"\x00\x78\x00\x00")
            return head + b"".join(body[:2]) + ttl4 + b"".join(body[3:]) + end
        return head

    def random(self) -> bytes:
        rng = self.rng
        size = rng.choice((rng.randrange(0, 64), rng.randrange(0, 1515),
                           rng.randrange(0, MAX_FRAME + 1)))
        kind = self.pick("random", ["bytes", "ether", "roce", "roce_icrc"])
        if kind == "bytes":
            return rng.randbytes(size)
        if kind == "ether":
            et = rng.choice(_ETHERTYPES + (rng.getrandbits(16),))
            return self.dst_mac + self.roce[6:12] + et.to_bytes(2, "big") + rng.randbytes(
                max(0, size - 14))
        rest = rng.randbytes(max(12, size - _BTH))
        b = bytearray(self.roce[:_BTH] + rest)
        b[_IP + 2:_IP + 4] = (len(b) - _IP).to_bytes(2, "big")
        b[_UDP + 4:_UDP + 6] = (len(b) - _UDP).to_bytes(2, "big")
        _fix_ip(b)
        return bytes(_fix_icrc(b) if kind == "roce_icrc" else b)


def malformed_frames(seed: int, n: int, base: dict, dst_mac: str | bytes | None = None,
                     dst_ip: str | None = None) -> Iterator[tuple[str, bytes]]:
    """n (category, frame) pairs from the templates of `base` ("roce", "pfc", "lldp":
    `base_frames`), the categories of `CATEGORIES` in turn; deterministic in `seed`.
    `dst_mac` / `dst_ip` replace the RoCE template's addresses (and are the destination
    of the random frames with an Ethernet header); None keeps the template's."""
    g = _Gen(random.Random(seed), base, None if dst_mac is None else mac_bytes(dst_mac), dst_ip)
    for i in range(n):
        cat = CATEGORIES[i % len(CATEGORIES)]
        frame = getattr(g, cat)()
        g.seen[cat] += 1
        yield cat, defused(frame)


def defused(frame: bytes) -> bytes:
    """`frame`, or, when a receiver would obey it as a pause (a well-formed PFC frame with
    a non-zero quanta for an enabled class), the same frame with every quanta 0 — a
    valid pause is not garbage, it is a storm (the `storm` and `pause` faults of
    emu.faults.schedule), and it would stop the legitimate flow the fuzz bench checks."""
    pfc = parse_pfc(frame)
    if pfc is None or not any(q for p, q in enumerate(pfc[1]) if pfc[0] >> p & 1):
        return frame
    return frame[:18] + bytes(16) + frame[34:]
