"""Malformed UET frames for the emulator's parsers (issue 32; the RoCE, PFC and LLDP
categories are `emu.bench.malformed`). Pure, no I/O, same seed same frames.

`malformed_uet_frames(seed, n, base)` yields n (category, frame) pairs mutated from valid
UET templates (`uet_base_frames`: a RUD request with the standard SES header and payload,
an ACK_CC with an SES response, a NACK; UE 1.0.1 PDS and SES, docs/UET.md), the
categories in turn. Only UDP payload bytes are changed (the UET UDP checksum is 0, the
IPv4 checksum stays right) except where a cut frame's lengths are made consistent:

* uet_truncated: each template cut inside and after the PDS prologue, the PDS header, the
  SES header, then at random points; half with IPv4/UDP lengths fixed to the cut.
* uet_bad_type: every PDS type 0..31 in a request's and an ACK's prologue.
* uet_bad_next_hdr: every next-header value 0..15 in a request's and an ACK's prologue.
* uet_bad_psn: request PSN and ACK cumulative PSN 0, 2**32 - 1, far ahead, behind, random.
* uet_bad_sack: ACK_CC SACK offset and bitmap nonsense (0xFFFF, all ones, random).
* uet_bad_ses_length: the standard SES header's request length 0, 1, 2**32 - 1, shorter
  than the payload, random; its message ID and buffer offset off the end.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

from emucore.wire.inet import inet_checksum
from emucore.wire.uet import NackCode, RetCode, RspOpcode, S_EOM, S_SOM, SesOpcode
from emucore.wire.uet_codec import SesReq, UetTemplate

__all__ = ["UET_CATEGORIES", "uet_base_frames", "malformed_uet_frames"]

UET_CATEGORIES = ("uet_truncated", "uet_bad_type", "uet_bad_next_hdr", "uet_bad_psn",
                  "uet_bad_sack", "uet_bad_ses_length")
_PDS = 42          # PDS prologue in an untagged IHL-5 frame
_PSN = _PDS + 4    # request PSN / ACK cumulative PSN
_SES = _PDS + 12   # SES header of a request; ACK_CC extension of an ACK
_SACK = _SES + 2   # ACK_CC: SACK offset (2 B), then the 64-bit bitmap
_RLEN = _SES + 40  # standard SES header: request length (last 4 bytes)


def uet_base_frames(src_mac: str = "02:00:00:00:01:01", dst_mac: str = "02:00:00:00:02:01",
                    src_ip: str = "10.0.1.11", dst_ip: str = "10.0.1.12",
                    payload: bytes = bytes(range(64))) -> dict[str, bytes]:
    """Valid templates: "req" a RUD WRITE (standard SES), "ack" an ACK_CC with an SES
    response, "nack" a NACK TRIMMED."""
    t = UetTemplate(src_mac, dst_mac, src_ip, dst_ip)
    ses = SesReq(SesOpcode.WRITE, S_SOM | S_EOM, 1, 0, 0, 2, 0, 0x10, len(payload))
    back = UetTemplate(dst_mac, src_mac, dst_ip, src_ip)
    return {"req": t.request(50000, 100, 7, 9, 0, ses, payload),
            "ack": back.ack(50001, 100, 0, 9, 7, sack_offset=0, sack_bitmap=1,
                            rsp=(RspOpcode.RESPONSE, RetCode.OK, 1, 0, len(payload))),
            "nack": back.nack(50001, NackCode.TRIMMED, 100, 9, 7, 101)}


def _fit(frame: bytes) -> bytes:
    """`frame` with IPv4 total length, UDP length and IPv4 checksum fitted to its size."""
    b = bytearray(frame)
    struct.pack_into("!H", b, 16, len(b) - 14)
    struct.pack_into("!H", b, 38, len(b) - 34)
    b[24:26] = b"\0\0"
    b[24:26] = inet_checksum(b[14:34]).to_bytes(2, "big")
    return bytes(b)


def _put(frame: bytes, off: int, fmt: str, value: int) -> bytes:
    b = bytearray(frame)
    struct.pack_into(fmt, b, off, value)
    return bytes(b)


def _prologue(frame: bytes, pds_type: int | None = None, nh: int | None = None) -> bytes:
    w = struct.unpack_from("!H", frame, _PDS)[0]
    if pds_type is not None:
        w = (w & 0x07FF) | (pds_type & 0x1F) << 11
    if nh is not None:
        w = (w & ~0x0780 & 0xFFFF) | (nh & 0xF) << 7
    return _put(frame, _PDS, "!H", w)


class _UetGen:
    """Templates, random source and occurrences per category of one generator."""

    def __init__(self, rng: random.Random, base: dict[str, bytes]) -> None:
        for key in ("req", "ack", "nack"):
            if key not in base:
                raise ValueError(f"base: needs a {key!r} frame, got keys {sorted(base)}")
        self.rng, self.base = rng, base
        self.seen = {c: 0 for c in UET_CATEGORIES}

    def pick(self, cat: str, options: list) -> object:
        """Options in turn, then random ones."""
        k = self.seen[cat]
        return options[k] if k < len(options) else self.rng.choice(options)

    def uet_truncated(self) -> bytes:
        r = self.rng
        cuts = [(f, c) for f in self.base.values()
                for c in (_PDS, _PDS + 1, _PDS + 2, _PDS + 8, _SES, _SES + 10, _SES + 30)]
        cut = self.pick("uet_truncated", cuts + [None])
        f, c = cut if cut else (r.choice(list(self.base.values())), 0)
        c = c or r.randrange(_PDS, len(f))
        cut = f[:c]
        return _fit(cut) if self.seen["uet_truncated"] & 1 else cut

    def uet_bad_type(self) -> bytes:
        f, t = self.pick("uet_bad_type", [(f, t) for f in (self.base["req"], self.base["ack"])
                                          for t in range(32)])
        return _prologue(f, pds_type=t)

    def uet_bad_next_hdr(self) -> bytes:
        f, nh = self.pick("uet_bad_next_hdr", [(f, n) for f in (self.base["req"],
                                                                 self.base["ack"])
                                               for n in range(16)])
        return _prologue(f, nh=nh)

    def uet_bad_psn(self) -> bytes:
        r = self.rng
        psn = struct.unpack_from("!I", self.base["req"], _PSN)[0]
        vals = [0, 0xFFFFFFFF, psn + 1 << 20, psn - 1, psn - 1000, r.getrandbits(32)]
        f, v = self.pick("uet_bad_psn", [(f, v) for f in (self.base["req"], self.base["ack"],
                                                          self.base["nack"]) for v in vals])
        return _put(f, _PSN, "!I", v & 0xFFFFFFFF)

    def uet_bad_sack(self) -> bytes:
        a, r = self.base["ack"], self.rng
        kind = self.pick("uet_bad_sack", ["off_max", "off_rand", "bits_all", "bits_rand",
                                          "both"])
        if kind in ("off_max", "both"):
            a = _put(a, _SACK, "!H", 0xFFFF)
        if kind == "off_rand":
            a = _put(a, _SACK, "!H", r.getrandbits(16))
        if kind in ("bits_all", "both"):
            a = _put(a, _SACK + 2, "!Q", (1 << 64) - 1)
        if kind == "bits_rand":
            a = _put(a, _SACK + 2, "!Q", r.getrandbits(64))
        return a

    def uet_bad_ses_length(self) -> bytes:
        f, r = self.base["req"], self.rng
        n = len(f) - _RLEN - 4   # payload bytes
        kind = self.pick("uet_bad_ses_length", ["zero", "one", "max", "short", "rand",
                                                "msg_id", "offset"])
        if kind == "msg_id":
            return _put(f, _SES + 2, "!H", 0xFFFF)
        if kind == "offset":
            return _put(f, _SES + 12, "!Q", (1 << 64) - 1)
        v = {"zero": 0, "one": 1, "max": 0xFFFFFFFF, "short": max(0, n - 1),
             "rand": r.getrandbits(32)}[kind]
        return _put(f, _RLEN, "!I", v)


def malformed_uet_frames(seed: int, n: int, base: dict[str, bytes] | None = None
                         ) -> Iterator[tuple[str, bytes]]:
    """n (category, frame) pairs, the UET categories in turn; deterministic in `seed`."""
    g = _UetGen(random.Random(seed), base if base is not None else uet_base_frames())
    for i in range(n):
        cat = UET_CATEGORIES[i % len(UET_CATEGORIES)]
        frame = getattr(g, cat)()
        g.seen[cat] += 1
        yield cat, frame
