"""PFC (IEEE 802.1Qbb, book ch.11): frame codec, ingress xOFF/xON, egress pause state."""

import math

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from emucore.qos.qosconfig import QosConfig
from emucore.qos.interface import InterfaceQos
from emucore.qos.pfc import Admission, EgressPause, IngressPfc, Pfc, headroom_needed
from emucore.qos.wred import WredVerdict
from emucore.timedil import TimeDilation
from emucore.wire.pause import build_pfc_frame, is_pfc, parse_pfc, pause_frame

ADMIT, XOFF, HEADROOM_DROP = Admission.ADMIT, Admission.XOFF, Admission.HEADROOM_DROP

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


@pytest.mark.parametrize("model_bps, delay_s, mtu, want", [
    # 2 x delay x rate / 8 + 2 x MTU, by hand
    (400e9, 500e-9, 9216, 50_000 + 18_432),  # 100 m of fibre at 400G: 68 432
    (400e9, 1e-6, 9216, 100_000 + 18_432),  # 200 m: 118 432
    (400e9, 1.8e-6, 9216, 180_000 + 18_432),  # 198 432: the default 200 KB still fits
    (400e9, 1.9e-6, 9216, 190_000 + 18_432),  # 208 432: it no longer does
    (200e9, 500e-9, 1500, 25_000 + 3_000),
    (200e9, 0.0, 1500, 3_000),  # no cable: two frames
    (100e9, 10e-6, 9216, 250_000 + 18_432),  # 10 us (UET scale-out bound) at 100G
    (25e9, 1e-9, 1500, 7 + 3_000),  # 6.25 bytes of cable round up to 7
])
def test_headroom_needed(model_bps, delay_s, mtu, want):
    assert headroom_needed(model_bps, delay_s, mtu) == want


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
    cfg = Pfc(xoff_bytes=xoff, xon_bytes=xon, headroom_bytes=headroom)
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
        assert ing.admit(3, 1000, 0.0) is not HEADROOM_DROP  # up to 13 000 = xOFF + headroom
    assert ing.admit(3, 1, 0.0) is HEADROOM_DROP
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
    ({"xoff_bytes": 100, "xon_bytes": 200}, "xon_bytes"),
    ({"xoff_bytes": 100, "xon_bytes": 100}, "xon_bytes"),
    ({"headroom_bytes": -1}, "headroom_bytes"),
    ({"pause_quanta": 0}, "pause_quanta"),
    ({"pause_quanta": 0x10000}, "pause_quanta"),
    ({"no_drop": (8,)}, "no_drop"),
    ({"no_drop": 3}, "no_drop"),
])
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Pfc(**kwargs)
    with pytest.raises(ValueError, match="refresh_fraction"):
        IngressPfc(Pfc(), SRC_B, 400e9, TimeDilation(1), refresh_fraction=1.0)


def test_the_admission_decisions_are_not_wred_verdicts():
    assert [a.name for a in Admission] == ["ADMIT", "XOFF", "HEADROOM_DROP"]
    assert Admission.HEADROOM_DROP is not WredVerdict.DROP
    assert type(Admission.HEADROOM_DROP) is not type(WredVerdict.DROP)


def test_a_port_runs_on_the_schema_type():
    qos = QosConfig()
    assert qos.port_pfc("eth1") is qos.pfc and qos.pfc.no_drop == {3}
    off = QosConfig(interfaces=(("eth2", InterfaceQos(pfc_mode="off")),))
    assert off.port_pfc("eth2").no_drop == frozenset()
    assert off.port_pfc("eth2").xoff_bytes == off.pfc.xoff_bytes
    ing = IngressPfc(qos.port_pfc("eth1"), SRC_B, 400e9, TimeDilation(1))
    assert ing.enabled == [False, False, False, True, False, False, False, False]
    assert (ing.xoff, ing.xon, ing.drop_above) == (3_200_000, 100_000, 3_400_000)
