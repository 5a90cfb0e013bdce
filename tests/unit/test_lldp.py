"""LLDP + IEEE DCBX TLVs (802.1Qaz/Qbb, book ch.11 Capture 11-1): bytes, parsing, negotiation."""

import shutil
import struct
import subprocess
from dataclasses import replace

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from emucore.qos.dcbx import build_lldp_frame, dcbx_tlvs, pfc_active
from emucore.wire.lldp import (DcbxAppPriorityEntry, LLDPDUDcbxAppPriority,
                               LLDPDUDcbxEtsConfiguration, LLDPDUDcbxEtsRecommendation,
                               LLDPDUDcbxPfcConfiguration, Neighbor, parse_lldp_frame)
from emucore.qos.qosconfig import QosConfig
from emucore.qos.interface import InterfaceQos

OUI = bytes.fromhex("0080c2")


def tlv(t: int, value: bytes) -> bytes:
    """Hand-assembled LLDP TLV header: 7-bit type, 9-bit length (IEEE 802.1AB)."""
    return struct.pack("!H", t << 9 | len(value)) + value


# Book config: prio n -> TC n; TC0 50 %, TC3 50 %, TC7 strict (TSA 0), others ETS (2) 0 %.
PRIO_TABLE = bytes([0x01, 0x23, 0x45, 0x67])
BW = bytes([50, 0, 0, 50, 0, 0, 0, 0])
TSA = bytes([2, 2, 2, 2, 2, 2, 2, 0])
ETS_CFG = tlv(127, OUI + b"\x09" + b"\x00" + PRIO_TABLE + BW + TSA)
ETS_REC = tlv(127, OUI + b"\x0a" + b"\x00" + PRIO_TABLE + BW + TSA)
PFC_CFG = tlv(127, OUI + b"\x0b" + bytes([0b0000_1000, 0b0000_1000]))  # cap 8, prio 3 on
APP = tlv(127, OUI + b"\x0c" + b"\x00"
          + bytes([3 << 5 | 3]) + struct.pack("!H", 4791)    # UDP 4791 -> priority 3
          + bytes([3 << 5 | 5]) + struct.pack("!H", 24)      # DSCP 24 -> priority 3
          + bytes([7 << 5 | 5]) + struct.pack("!H", 48))     # DSCP 48 -> priority 7


def on_wire(layer) -> bytes:
    """TLV bytes as sent: Scapy's LLDP strict mode wants an Ethernet layer below (pads to 60 B)."""
    return bytes(Ether(dst="01:80:c2:00:00:0e", src="02:00:00:00:00:01") / layer)[14:]


def test_tlv_lengths_match_the_standard():
    assert len(ETS_CFG) == 2 + 25 and len(ETS_REC) == 2 + 25 and len(PFC_CFG) == 2 + 6
    assert len(APP) == 2 + 5 + 3 * 3 and ETS_CFG[:2] == b"\xfe\x19"


def test_dcbx_layers_exact_bytes():
    assert on_wire(dcbx_tlvs(QosConfig())) == ETS_CFG + ETS_REC + PFC_CFG + APP


@pytest.mark.parametrize("layer, expected", [
    (LLDPDUDcbxPfcConfiguration(willing=1, mbc=1, pfc_cap=4, pfc_enable=0b0001_1000),
     tlv(127, OUI + b"\x0b" + bytes([0b1100_0100, 0b0001_1000]))),
    (LLDPDUDcbxPfcConfiguration(pfc_enable=0), tlv(127, OUI + b"\x0b\x08\x00")),
    (LLDPDUDcbxEtsConfiguration(willing=1, cbs=0, max_tcs=3, tc_bandwidth=[100] + [0] * 7,
                                tsa=[2] * 8, **{f"tc_of_prio{i}": 0 for i in range(8)}),
     tlv(127, OUI + b"\x09" + bytes([0x83]) + bytes(4) + bytes([100] + [0] * 7) + bytes([2] * 8))),
    (LLDPDUDcbxAppPriority(apps=[]), tlv(127, OUI + b"\x0c\x00")),
    (LLDPDUDcbxAppPriority(apps=[DcbxAppPriorityEntry(priority=6, sel=1, protocol=0x8915)]),
     tlv(127, OUI + b"\x0c\x00" + bytes([6 << 5 | 1]) + b"\x89\x15")),
])
def test_single_layer_exact_bytes(layer, expected):
    wire = on_wire(layer)
    assert wire[:len(expected)] == expected
    assert wire[len(expected):] == bytes(max(0, 46 - len(expected)))  # Ethernet padding only


SRC, CHASSIS = "02:00:00:00:01:05", "02:00:00:00:01:00"


def test_whole_frame_exact_bytes():
    frame = build_lldp_frame(SRC, CHASSIS, "eth5", "rail1", QosConfig())
    expected = (bytes.fromhex("0180c200000e") + bytes.fromhex(SRC.replace(":", "")) + b"\x88\xcc"
                + tlv(1, b"\x04" + bytes.fromhex(CHASSIS.replace(":", "")))
                + tlv(2, b"\x05eth5") + tlv(3, struct.pack("!H", 120)) + tlv(5, b"rail1")
                + ETS_CFG + ETS_REC + PFC_CFG + APP + tlv(0, b""))
    assert frame == expected


def test_hand_assembled_bytes_dissect_into_dcbx_layers():
    pkt = Ether(bytes.fromhex("0180c200000e") + bytes(6) + b"\x88\xcc"
                + tlv(1, b"\x04" + bytes(6)) + tlv(2, b"\x05eth1") + tlv(3, b"\x00\x78")
                + ETS_CFG + ETS_REC + PFC_CFG + APP + tlv(0, b""))
    for cls in (LLDPDUDcbxEtsConfiguration, LLDPDUDcbxEtsRecommendation,
                LLDPDUDcbxPfcConfiguration, LLDPDUDcbxAppPriority):
        assert cls in pkt
    assert int(pkt[LLDPDUDcbxPfcConfiguration].pfc_enable) == 0x08
    assert pkt[LLDPDUDcbxEtsConfiguration].tc_bandwidth == list(BW)
    assert [(a.priority, a.sel, a.protocol) for a in pkt[LLDPDUDcbxAppPriority].apps] == [
        (3, 3, 4791), (3, 5, 24), (7, 5, 48)]


def test_parse_round_trip():
    n = parse_lldp_frame(build_lldp_frame(SRC, CHASSIS, "eth5", "spine1", QosConfig(), ttl=90))
    assert (n.chassis_id, n.port_id, n.ttl, n.system_name, n.src_mac) == (
        CHASSIS, "eth5", 90, "spine1", SRC)
    assert n.pfc_enabled == {3} and n.pfc_cap == 8 and not n.pfc_willing
    assert n.ets_bandwidth == tuple(BW) and n.ets_tsa == tuple(TSA)
    assert n.ets_tc_of_prio == tuple(range(8))
    assert n.app == ((3, 3, 4791), (3, 5, 24), (7, 5, 48))
    assert n.to_dict()["pfc_enabled"] == [3]


def test_plain_lldp_has_no_dcbx():
    n = parse_lldp_frame(build_lldp_frame(SRC, CHASSIS, "eth1", "h1", None))
    assert n.pfc_enabled is None and n.app == () and n.to_dict()["pfc_enabled"] is None


def test_mode_off_advertises_no_pfc_priority():
    cfg = replace(QosConfig(), interfaces=(("eth2", InterfaceQos(pfc_mode="off")),))
    assert parse_lldp_frame(build_lldp_frame(SRC, CHASSIS, "eth2", "r", cfg)).pfc_enabled == set()
    assert parse_lldp_frame(build_lldp_frame(SRC, CHASSIS, "eth1", "r", cfg)).pfc_enabled == {3}


def test_not_lldp_is_rejected():
    with pytest.raises(ValueError, match="not an LLDP frame"):
        parse_lldp_frame(bytes(Ether(dst="ff:ff:ff:ff:ff:ff", type=0x0800) / (b"\x00" * 46)))


def _nbr(enabled):
    return Neighbor("aa", "eth1", 120, pfc_enabled=None if enabled is None else frozenset(enabled))


@pytest.mark.parametrize("mode, neighbour, expected", [
    ("auto", _nbr({3}), {3}),
    ("auto", _nbr({3, 4}), {3}),
    ("auto", _nbr(set()), set()),
    ("auto", _nbr({4}), set()),
    ("auto", _nbr(None), set()),   # peer without DCBX
    ("auto", None, set()),         # no LLDP neighbour at all
    ("on", None, {3}),
    ("on", _nbr(set()), {3}),
    ("off", _nbr({3}), set()),
])
def test_pfc_active(mode, neighbour, expected):
    cfg = replace(QosConfig(), interfaces=(("eth1", InterfaceQos(pfc_mode=mode)),))
    assert pfc_active(cfg, neighbour, "eth1") == expected


def test_pfc_active_between_two_book_switches():
    cfg = QosConfig()
    peer = parse_lldp_frame(build_lldp_frame(SRC, CHASSIS, "eth1", "spine1", cfg))
    assert pfc_active(cfg, peer, "eth3") == {3} and pfc_active(cfg, peer) == {3}


@pytest.mark.skipif(shutil.which("tshark") is None,
                    reason="needs tshark (Debian package tshark; ./setup.sh installs it)")
def test_tshark_decodes_dcbx(tmp_path):
    pcap = tmp_path / "lldp.pcap"
    wrpcap(str(pcap), [Ether(build_lldp_frame(SRC, CHASSIS, "eth5", "rail1", QosConfig()))])
    out = subprocess.run(["tshark", "-r", str(pcap), "-V"], capture_output=True, text=True,
                         timeout=60).stdout
    for needle in ("ETS Configuration", "ETS Recommendation",
                   "Priority Flow Control Configuration", "PFC for Priority 3: Enabled",
                   "PFC for Priority 4: Disabled", "Max PFC Enabled Traffic Classes: 8",
                   "TSA for Traffic Class 7: Strict Priority", "Application Protocol Id: 0x12b7",
                   "Port Id: eth5", "System Name: rail1"):
        assert needle in out, needle
