"""Issue 32: malformed UET frames (emu.bench.malformed_uet) - truncated prologues, bad PDS
types and next headers, bogus PSNs, SACK offsets and SES lengths - fed in-process to the
UET parser, a trimming switch agent and both UET NICs of a live connection: no frame
raises, every one is counted, and the connection still completes a WRITE afterwards."""

import collections
import traceback

from emu.bench.malformed_uet import UET_CATEGORIES, malformed_uet_frames, uet_base_frames
from emucore.wire.uet_codec import parse as uet_parse
from traffic.workreq import WCStatus

from .test_nic import connected
from .test_nic_uet import _write, pump
from .test_trim import make_agent

N = 6000


def test_same_seed_same_frames_each_category_in_turn():
    a = list(malformed_uet_frames(3, 600))
    assert a == list(malformed_uet_frames(3, 600)) and a != list(malformed_uet_frames(4, 600))
    assert [c for c, _ in a[:len(UET_CATEGORIES)]] == list(UET_CATEGORIES)
    assert collections.Counter(c for c, _ in a) == {c: 100 for c in UET_CATEGORIES}
    req = uet_base_frames()["req"]
    types = [f[42] >> 3 for c, f in a if c == "uet_bad_type"]
    assert types[:32] == list(range(32))
    assert all(f == req[:len(f)] for c, f in a[:6 * 7:12])   # the even ones: cut, lengths kept


def feed(fn, frames):
    """Call fn on every frame; the crashes (category, traceback)."""
    crashes = []
    for cat, f in frames:
        try:
            fn(f)
        except Exception:   # noqa: BLE001 - counting crashes is the point
            crashes.append((cat, traceback.format_exc()))
    return crashes


def test_the_parser_never_raises():
    frames = list(malformed_uet_frames(1, N))
    assert feed(uet_parse, frames) == []


def test_a_trimming_switch_drops_or_forwards_every_frame_without_crashing():
    a = make_agent(threshold=2000)
    inp = a.ports["eth1"]
    frames = list(malformed_uet_frames(2, N, uet_base_frames(dst_mac="02:00:00:00:02:01")))
    assert feed(lambda f: a.on_frame(inp, f, 0.0), frames) == []
    for t in (0.001, 0.01, 0.1):
        a.service(t)


def test_both_uet_nics_count_every_frame_and_still_complete_a_write():
    size = 4096
    with connected(size, bytes(range(256)) * 16, transport="uet") as c:
        _write(c, size)
        wc, now, sent = pump(c, 100.0)
        assert wc.status == WCStatus.SUCCESS
        ack = uet_base_frames()["ack"]   # replaced below by a real one
        c.b.on_frame(memoryview(bytearray(sent[0])), now)
        ack = c.b.raw.frames.pop() if c.b.raw.frames else ack
        c.b.raw.frames.clear()
        base = {"req": sent[0], "ack": ack, "nack": ack}
        frames = list(malformed_uet_frames(5, N, base))
        rx_a, rx_b = c.a.c["rx_frames"], c.b.c["rx_frames"]
        crashes = feed(lambda f: c.b.on_frame(memoryview(bytearray(f)), now), frames)
        crashes += feed(lambda f: c.a.on_frame(memoryview(bytearray(f)), now), frames)
        assert crashes == []
        assert c.a.c["rx_frames"] - rx_a == N and c.b.c["rx_frames"] - rx_b == N
        c.a.raw.frames.clear()
        c.b.raw.frames.clear()
        c.a.cqs[c.ca].poll(100)
        _write(c, size)
        wc, _now, _sent = pump(c, now + 1.0)
        assert wc.status == WCStatus.SUCCESS
