"""PFC (IEEE 802.1Qbb, book ch.11): frame codec, ingress xOFF/xON, egress pause state."""

import math

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from fabric.timedil import TimeDilation
from fabric.qos.pfc import (
    ADMIT, DROP, XOFF, EgressPause, IngressPfc, PfcConfig, build_pfc_frame, headroom_bytes,
    is_pfc, parse_pfc, pause_frame)

SRC = "02:00:00:00:0a:01"
SRC_B = bytes.fromhex(SRC.replace(":", ""))


def scapy_pfc(vector, quanta):
    fields = {}
    for p in range(8):
        fields[f"c{p}_enabled"] = vector >> p & 1
        fields[f"c{p}_pause_time"] = quanta[p]
    return bytes(Ether(dst="01:80:c2:00:00:01", src=SRC)
                 / MACControlClassBasedFlowControl(**fields))


@pytest.mark.parametrize("vector, quanta", [
    (0x08, (0, 0, 0, 0xFFFF, 0, 0, 0, 0)),  # the book: pause priority 3
    (0x08, (0,) * 8),  # resume priority 3
    (0x00, (0,) * 8),
    (0xFF, (1, 2, 3, 0x1234, 0x8000, 0xFFFE, 7, 0xFFFF)),
    (0x81, (0x10, 0, 0, 0, 0, 0, 0, 0x20)),
])
def test_frame_bytes_equal_scapy(vector, quanta):
    frame = build_pfc_frame(SRC_B, vector, quanta)
    assert len(frame) == 60
    assert frame == scapy_pfc(vector, quanta)
    assert parse_pfc(frame) == (vector, quanta)


def test_priority_3_class_enable_vector():
    f = pause_frame(SRC_B, 3)
    assert f[:6] == bytes.fromhex("0180c2000001") and f[6:12] == SRC_B
    assert f[12:16] == b"\x88\x08\x01\x01"
    assert f[16:18] == b"\x00\x08"  # 0000 1000
    assert f[24:26] == b"\xff\xff"  # c3 quanta
    pkt = Ether(f)
    assert pkt[MACControlClassBasedFlowControl].c3_enabled == 1
    assert pkt[MACControlClassBasedFlowControl].c3_pause_time == 0xFFFF


def test_parse_rejects_other_frames():
    pause_8023x = bytes.fromhex("0180c2000001") + SRC_B + b"\x88\x08\x00\x01\xff\xff" + bytes(42)
    assert parse_pfc(pause_8023x) is None and not is_pfc(pause_8023x)
    assert parse_pfc(bytes(12) + b"\x08\x00" + bytes(46)) is None
    assert parse_pfc(pause_frame(SRC_B, 3)[:20]) is None


@pytest.mark.parametrize("vector, quanta, field", [
    (0x100, (0,) * 8, "class_enable"),
    (1, (0,) * 7, "quanta"),
    (1, (0x10000,) + (0,) * 7, "quanta"),
])
def test_codec_validation(vector, quanta, field):
    with pytest.raises(ValueError, match=field):
        build_pfc_frame(SRC_B, vector, quanta)


def test_headroom_formula():
    # 400G, 100 m of fibre (500 ns), MTU 9216: 2x9216 + 2 x 500 ns x 400G / 8 + 3840
    assert headroom_bytes(400e9, 500e-9, 9216) == 18_432 + 50_000 + 3_840
    assert headroom_bytes(200e9, 0.0, 1500, response_bits=0, extra_bytes=10) == 3010


def test_pause_duration_quanta_x_512_bit_times():
    assert TimeDilation(1).pause_model_s(0xFFFF, 400e9) == pytest.approx(83.886e-6, rel=1e-4)
    ep = EgressPause(400e9, TimeDilation(1000))
    ep.on_pfc(0x08, (0, 0, 0, 0xFFFF, 0, 0, 0, 0), now=10.0)
    lab = 1000 * 0xFFFF * 512 / 400e9  # 83.886 ms in the lab at TDF 1000
    assert ep.paused_mask(10.0) == 0x08
    assert ep.paused_mask(10.0 + lab * 0.999) == 0x08
    assert ep.paused_mask(10.0 + lab) == 0
    assert ep.paused_time(3, 20.0) == pytest.approx(lab)
    assert ep.pauses_rx[3] == 1


def test_resume_other_priorities_and_timer_reload():
    ep = EgressPause(100e9, TimeDilation(1))
    q = 0xFFFF * 512 / 100e9  # 335 us at 100G
    ep.on_frame(build_pfc_frame(SRC_B, 0x09, (100, 0, 0, 0xFFFF, 0, 0, 0, 0)), 0.0)
    assert ep.paused_mask(0.0) == 0x09
    assert ep.paused_mask(100 * 512 / 100e9) == 0x08  # priority 0's short pause expired
    ep.on_pfc(0x08, (0,) * 8, now=q / 2)  # resume priority 3 early
    assert ep.paused_mask(q / 2) == 0
    assert ep.resumes_rx[3] == 1 and ep.paused_time(3, q) == pytest.approx(q / 2)
    ep.on_pfc(0x08, (0, 0, 0, 10, 0, 0, 0, 0), now=1.0)
    ep.on_pfc(0x08, (0, 0, 0, 0xFFFF, 0, 0, 0, 0), now=1.0 + 5 * 512 / 100e9)  # refresh
    assert ep.paused_mask(1.0 + 20 * 512 / 100e9) == 0x08  # reloaded, not expired
    assert ep.last_rx[3] == 1.0 + 5 * 512 / 100e9
    assert not ep.on_frame(bytes(60), 2.0)
    c = ep.counters(10.0)
    assert c["pauses_rx"][3] == 3 and c["paused_mask"] == 0


def make_ingress(xoff=10_000, xon=5_000, headroom=3_000, tdf=1000.0, rate=400e9):
    cfg = PfcConfig(xoff_bytes=xoff, xon_bytes=xon, headroom_bytes=headroom)
    return IngressPfc(cfg, SRC_B, rate, TimeDilation(tdf))


def test_xoff_xon_hysteresis_without_chatter():
    ing = make_ingress()
    acts = [ing.admit(3, 1000, 0.0) for _ in range(11)]
    assert acts == [ADMIT] * 10 + [XOFF]  # 11 000 > xOFF 10 000
    assert ing.admit(3, 1000, 0.0) == ADMIT  # already paused: no second pause
    # drain to 6 000 (between xON and xOFF): no resume; refill past xOFF: no new pause
    assert [ing.release(3, 1000, 0.0) for _ in range(6)] == [False] * 6
    assert [ing.admit(3, 1000, 0.0) for _ in range(6)] == [ADMIT] * 6
    assert [ing.release(3, 1000, 0.0) for _ in range(7)] == [False] * 7  # held 5 000
    assert ing.release(3, 1, 0.0) is True  # 4 999 < xON
    assert ing.release(3, 1000, 0.0) is False
    assert ing.xoff_sent[3] == 1 and ing.xon_sent[3] == 1
    # a second congestion episode pauses again
    assert ADMIT in [ing.admit(3, 1000, 0.0) for _ in range(6)]
    assert ing.admit(3, 1000, 0.0) == XOFF and ing.xoff_sent[3] == 2


def test_headroom_overflow_drops_and_is_counted():
    ing = make_ingress(xoff=10_000, headroom=3_000)
    for _ in range(13):
        assert ing.admit(3, 1000, 0.0) != DROP  # up to 13 000 = xOFF + headroom
    assert ing.admit(3, 1, 0.0) == DROP
    assert ing.held[3] == 13_000 and ing.headroom_drops[3] == 1


def test_lossy_priorities_are_not_accounted():
    ing = make_ingress()
    for _ in range(100):
        assert ing.admit(0, 9000, 0.0) == ADMIT
    assert ing.held[0] == 0 and ing.release(0, 9000, 0.0) is False


def test_pause_refreshed_while_above_xon():
    ing = make_ingress(tdf=1000.0, rate=400e9)
    dur = 1000 * 0xFFFF * 512 / 400e9
    assert ing.pause_s == pytest.approx(dur) and ing.refresh_s == pytest.approx(dur / 2)
    for _ in range(11):
        ing.admit(3, 1000, 5.0)
    r = ing.refresh_s
    assert ing.next_refresh == 5.0 + r
    assert ing.tick(5.0 + r - 1e-9) == []
    assert ing.tick(5.0 + r) == [3]
    assert ing.tick(5.0 + r + 1e-9) == []  # re-armed
    assert ing.tick(5.0 + 2 * r) == [3]
    for _ in range(7):
        ing.release(3, 1000, 5.0 + dur)
    assert ing.paused[3] is False and ing.next_refresh == math.inf
    assert ing.tick(100.0) == []
    assert ing.refreshes[3] == 2


def test_frames_sent_by_ingress():
    ing = make_ingress()
    assert parse_pfc(ing.pause_frames[3]) == (0x08, (0, 0, 0, 0xFFFF, 0, 0, 0, 0))
    assert parse_pfc(ing.resume_frames[3]) == (0x08, (0,) * 8)
    assert ing.pause_frames[3][6:12] == SRC_B


@pytest.mark.parametrize("kwargs, field", [
    ({"xoff_bytes": 0}, "xoff_bytes"),
    ({"xoff_bytes": 100, "xon_bytes": 200}, "xon_bytes"),
    ({"headroom_bytes": -1}, "headroom_bytes"),
    ({"quanta": 0}, "quanta"),
    ({"refresh_fraction": 1.0}, "refresh_fraction"),
    ({"no_drop": (8,)}, "no_drop"),
])
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PfcConfig(**kwargs)


def test_book_rule_of_thumb():
    assert PfcConfig().check_order(150_000, 3_000_000) == []
    bad = PfcConfig(xoff_bytes=1_000_000, xon_bytes=200_000).check_order(150_000, 3_000_000)
    assert len(bad) == 2


def test_from_qos_config():
    qos_config = pytest.importorskip("fabric.qos.config")
    cfg = PfcConfig.from_qos(qos_config.QosConfig(), "eth1")
    assert cfg.no_drop == (3,) and cfg.xoff_bytes > 3_000_000 > 150_000 > cfg.xon_bytes
