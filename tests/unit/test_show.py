"""NX-OS-like show renderers and the command dispatcher, on small state dicts."""

import json

import pytest

from emucore.qos.dcbx import build_lldp_frame
from emucore.wire.lldp import parse_lldp_frame
from emucore.qos.nxos import parse_nxos
from emucore.qos.qosconfig import QosConfig
from switch_agent.show import (dispatch, show_lldp_neighbors, show_pfc, show_policy_map,
                               show_queuing)


def _state() -> dict:
    nbr = parse_lldp_frame(build_lldp_frame("02:00:00:00:09:01", "02:00:00:00:09:00", "eth1",
                                            "spine1", QosConfig())).to_dict()
    plain = parse_lldp_frame(build_lldp_frame("02:00:00:00:08:01", "02:00:00:00:08:01",
                                              "nic0", "h1", None)).to_dict()
    state = {
        "switch": "rail1",
        "qos": QosConfig().to_dict(),
        "ports": {
            "eth3": {
                "queues": {"3": {"depth_bytes": 151_200, "max_depth_bytes": 402_000,
                                 "enq_pkts": 1234, "enq_bytes": 5_000_000, "tx_pkts": 1200,
                                 "tx_bytes": 4_900_000, "ecn_marked": 77,
                                 "drops": {"wred": 0, "tail": 2}},
                           "7": {"tx_pkts": 9, "tx_bytes": 900}},
                "ingress": {"3": {"bytes": 3_300_000, "xoff": True}},
                "pfc": {"mode": "auto", "active": [3], "paused": [3],
                        "rx_pause": {"3": 5}, "tx_pause": {"3": 41},
                        "watchdog": {"enabled": True, "state": "ok", "storms": 0}},
            },
            "eth10": {"pfc": {"mode": "off", "active": [],
                              "watchdog": {"enabled": True, "state": "storm", "storms": 2,
                                           "dropped": 17}}},
        },
        "lldp": {"eth3": {**nbr, "age_s": 20, "capability": "BR"}, "eth1": plain},
    }
    return json.loads(json.dumps(state))  # as it arrives over the control socket


def _line(text: str, start: str) -> str:
    return next(ln for ln in text.splitlines() if ln.strip().startswith(start))


def test_show_queuing_config_and_counters():
    out = show_queuing(_state(), "eth3")
    assert "Egress Queuing for eth3" in out
    assert _line(out, "3 ").split() == ["3", "50", "-", "24000000", "150000", "3000000", "7", "yes"]
    assert _line(out, "7 ").split()[:3] == ["7", "-", "1"]
    assert "xOFF 3200000 B  xON 100000 B" in out
    box = out[out.index("QOS GROUP 3"):out.index("QOS GROUP 0")]
    for label, value in (("ECN Marked Pkts", "77"), ("Tail Drop Pkts", "2"),
                         ("WRED Drop Pkts", "0"),
                         ("Q Depth Byts", "151200"), ("Max Q Depth Byts", "402000"),
                         ("Enq Pkts", "1234"), ("Ingress xOFF", "yes"), ("PFC Paused", "yes")):
        assert _line(box, f"|{label:>28}").split("|")[2].strip() == value, label
    assert "QOS GROUP 6,5,4,2,1: no traffic" in out  # idle queues summarised


def test_show_queuing_all_ports_without_qos():
    st = _state()
    del st["qos"]
    out = show_queuing(st)
    assert out.index("Egress Queuing for eth3") < out.index("Egress Queuing for eth10")
    with pytest.raises(ValueError, match="Invalid interface 'eth9'"):
        show_queuing(st, "eth9")


def test_show_pfc():
    out = show_pfc(_state())
    assert _line(out, "eth3").split() == ["eth3", "Auto", "On", "(8)", "5", "41", "3", "On", "ok"]
    row = _line(out, "eth10").split()
    assert row[:5] == ["eth10", "Off", "Off", "0", "0"] and "storm" in row and "17" in row
    detail = out.split("Prio")[1]
    assert _line(detail, "eth3").split() == ["eth3", "3", "5", "41", "lossless"]


def test_show_policy_map_renders_effective_config_parseable():
    out = show_policy_map(_state())
    assert "random-detect minimum-threshold 150 kbytes maximum-threshold 3000 kbytes " \
           "drop-probability 7 weight 0 ecn" in out
    assert "pause pfc-cos 3" in out and "priority level 1" in out
    assert parse_nxos(out, base=QosConfig()).classification == QosConfig().classification
    with pytest.raises(ValueError, match="No QoS configuration"):
        show_policy_map({})


def test_show_lldp_neighbors():
    out = show_lldp_neighbors(_state())
    assert _line(out, "spine1").split() == ["spine1", "eth3", "100", "BR", "eth1", "3"]
    assert _line(out, "h1").split() == ["h1", "eth1", "120", "nic0", "none"]
    assert "Total entries displayed: 2" in out


@pytest.mark.parametrize("cmd, marker", [
    ("show queuing interface eth3", "Egress Queuing for eth3"),
    ("sh queuing int eth3", "Egress Queuing for eth3"),
    ("sh queu int ethernet1/3", "Egress Queuing for eth3"),
    ("sh queu int Ethernet 1/3", "Egress Queuing for eth3"),
    ("sh q i", "Egress Queuing for eth10"),
    ("show interface priority-flow-control", "Oper(VL bmap)"),
    ("sh int pri", "Oper(VL bmap)"),
    ("sh policy-map", "policy-map type queuing QOS_EGRESS_PORT"),
    ("sh lldp nei", "Total entries displayed"),
])
def test_dispatch_and_abbreviations(cmd, marker):
    assert marker in dispatch(cmd, _state())


@pytest.mark.parametrize("cmd, needle", [
    ("show foo", "Invalid command at '^' marker"),
    ("conf t", "Invalid command"),
    ("show", "Incomplete command"),
    ("sh lldp", "Incomplete command"),
    ("show policy-map extra", "unexpected 'extra'"),
    ("show queuing interface vlan3", "Invalid interface 'vlan3'"),
    ("show queuing interface eth99", "Invalid interface 'eth99'"),
    ("", "Empty command"),
])
def test_dispatch_errors(cmd, needle):
    with pytest.raises(ValueError) as e:
        dispatch(cmd, _state())
    assert needle in str(e.value)
