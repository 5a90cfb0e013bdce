"""Switch QoS configuration: the book's defaults (ch.11), YAML loading, validation."""

import json
from dataclasses import replace

import pytest

from emucore.qos.classify import Classification, TrafficClass
from emucore.qos.qosconfig import QosConfig
from emucore.qos.interface import InterfaceQos
from emucore.qos.pfc import Pfc, headroom_needed
from emucore.qos.queuing import QueueConfig, Queuing
from emucore.qos.wred import Wred
from emucore.qos.load import load_qos


@pytest.mark.parametrize("dscp, group", [(24, 3), (48, 7), (0, 0), (26, 0), (46, 0), (63, 0)])
def test_book_classification(dscp, group):
    assert QosConfig().classification.group_of(dscp) == group


def test_book_queues_pfc_and_rule_of_thumb():
    c = QosConfig()
    q3 = c.queuing.queues[3]
    assert q3.bandwidth_percent == 50 and not q3.strict
    assert q3.wred == Wred(150_000, 3_000_000, 7.0, 0, True)
    assert q3.wred.max_prob == pytest.approx(0.07)
    assert c.queuing.strict == {7}
    assert c.pfc.no_drop == {3} and c.mtu == 9216 and c.pfc.pause_quanta == 0xFFFF
    assert c.cnp_priority == 7 and c.cnp_dscp == 48
    # ch.11: xON < WRED min < WRED max < xOFF
    assert c.pfc.xon_bytes < q3.wred.min_bytes < q3.wred.max_bytes < c.pfc.xoff_bytes
    assert c.validate() == []
    assert c.pfc.headroom_bytes >= headroom_needed(400e9, 1e-6, c.mtu) == 118_432


@pytest.mark.parametrize("name", ["book", "paper"])
def test_presets_load_and_validate_clean(name):
    c = load_qos(name)
    assert c.name == name and c.validate() == []
    w = c.queuing.queues[3].wred
    assert c.pfc.xon_bytes < w.min_bytes < w.max_bytes < c.pfc.xoff_bytes


def test_book_preset_is_the_default_and_paper_values():
    assert load_qos("book") == QosConfig()
    assert load_qos("paper").queuing.queues[3].wred == Wred(5_000, 200_000, 1.0, 0, True)


def test_to_dict_json_round_trip():
    for c in (QosConfig(), load_qos("paper"),
              replace(QosConfig(), interfaces=(("eth2", InterfaceQos("off", False, False)),))):
        d = json.loads(json.dumps(c.to_dict()))
        assert QosConfig.from_dict(d) == c


def test_sizes_and_durations_as_strings():
    c = QosConfig.from_dict({"pfc": {"xoff": "4MB", "xon": "50 KB", "headroom": 300000},
                             "watchdog": {"detect": "100ms", "restore": "1s", "action": "forward"}})
    assert (c.pfc.xoff_bytes, c.pfc.xon_bytes, c.pfc.headroom_bytes) == (4_000_000, 50_000, 300_000)
    assert (c.watchdog.detect_s, c.watchdog.restore_s) == (pytest.approx(0.1), 1.0)


def _q3(wred: dict) -> dict:
    return {"queuing": {"queues": {0: {"bandwidth_percent": 50}, 7: {"strict": True},
                                   3: {"bandwidth_percent": 50, "wred": wred}}}}


@pytest.mark.parametrize("data, needle", [
    (_q3({"min": "-1KB", "max": "3000KB", "max_prob": 7}), "wred.min: must be >= 0"),
    (_q3({"min": "300KB", "max": "200KB", "max_prob": 7}), "wred.min: must be <= max_bytes"),
    (_q3({"min": "1KB", "max": "2KB", "max_prob": 101}), "max_prob: must be in 0..100"),
    (_q3({"min": "1KB", "max": "2KB", "max_prob": 7, "weight": 16}), "weight: must be"),
    (_q3({"min": "1KB", "max": "2KB"}), "wred.max_prob: required"),
    ({"classification": {"classes": [{"name": "X", "dscp": [64], "qos_group": 3}]}},
     "classes[0].dscp: must be an integer in 0..63, got 64"),
    ({"classification": {"classes": [{"name": "X", "dscp": [24], "qos_group": 8}]}},
     "qos_group: must be an integer in 0..7, got 8"),
    ({"queuing": {"queues": {8: {"strict": True}}}}, "queue must be 0..7, got 8"),
    ({"queuing": {"queues": {0: {"bandwidth_percent": 60}, 1: {"bandwidth_percent": 50}}}},
     "sum to 110 %"),
    ({"pfc": {"xon": "3MB", "xoff": "3MB"}}, "pfc.xon: must be < xoff_bytes"),
    ({"pfc": {"no_drop": [9]}}, "no_drop: must be an integer in 0..7, got 9"),
    ({"pfc": {"pause_quanta": 0}}, "pfc.pause_quanta: must be an integer in 1..65535"),
    ({"pfc": {"no_drop": 3}}, "pfc.no_drop: expected a list"),
    ({"interfaces": {"eth1": {"watchdog": "yes"}}}, "interfaces.eth1.watchdog: must be true or"),
    (_q3({"min": "1KB", "max": "2KB", "max_prob": 7, "ecn": 1}), "wred.ecn: must be true or"),
    ({"pfc": {"headroom": "lots"}}, "headroom: not a size"),
    ({"interfaces": {"eth1": {"pfc_mode": "maybe"}}}, "interfaces.eth1.pfc_mode: must be one of"),
    ({"watchdog": {"action": "reboot"}}, "watchdog.action: must be one of drop|forward"),
    ({"watchdog": {"detect": 0}}, "watchdog.detect: must be > 0"),
    ({"mtu": 100}, "mtu: must be an integer in 1500..9216, got 100"),
    ({"cnp": {"priority": 9}}, "cnp_priority"),
    ({"pfx": {}}, "pfx: unknown field"),
])
def test_impossible_values_name_the_field(data, needle):
    with pytest.raises(ValueError) as e:
        QosConfig.from_dict(data)
    assert needle in str(e.value)


def test_direct_construction_is_checked_too():
    with pytest.raises(ValueError, match="xon_bytes"):
        Pfc(xon_bytes=5, xoff_bytes=5)
    with pytest.raises(ValueError, match="min_bytes"):
        Wred(2, 1, 5)
    with pytest.raises(ValueError, match="queues: need exactly 8"):
        Queuing("X", (QueueConfig(),))
    with pytest.raises(ValueError, match="duplicate interface 'eth1'"):
        QosConfig(interfaces=(("eth1", InterfaceQos()), ("eth1", InterfaceQos())))


def _warn(cfg: QosConfig, needle: str) -> None:
    w = cfg.validate()
    assert any(needle in x for x in w), w


def test_xoff_before_ecn_is_a_warning_not_an_error():
    c = replace(QosConfig(), pfc=replace(QosConfig().pfc, xon_bytes=50_000, xoff_bytes=120_000))
    _warn(c, "xOFF before ECN")


def test_rule_of_thumb_broken_warning():
    c = replace(QosConfig(), pfc=replace(QosConfig().pfc, xon_bytes=200_000))
    _warn(c, "rule of thumb xON < WRED min < WRED max < xOFF broken")
    c = replace(QosConfig(), pfc=replace(QosConfig().pfc, xoff_bytes=2_000_000))
    _warn(c, "rule of thumb")


def test_other_warnings():
    base = QosConfig()
    qs = list(base.queuing.queues)
    qs[3] = replace(qs[3], wred=replace(qs[3].wred, ecn=False))
    _warn(replace(base, queuing=Queuing("P", tuple(qs))), "no WRED with ecn")
    qs = list(base.queuing.queues)
    qs[7] = QueueConfig(bandwidth_percent=0)
    _warn(replace(base, queuing=Queuing("P", tuple(qs))), "cnp_priority 7: queue is not strict")
    _warn(replace(base, cnp_dscp=46), "cnp_dscp 46 is classified into qos-group 0")
    qs = list(base.queuing.queues)
    qs[3] = replace(qs[3], limit_bytes=1_000_000)
    _warn(replace(base, queuing=Queuing("P", tuple(qs))), "the switch agent raises the limit to WRED max")
    dup = Classification("C", (TrafficClass("A", (24,), 3), TrafficClass("B", (24,), 5)), 0)
    _warn(replace(base, classification=dup), "DSCP 24 is in classes A and B")
    assert dup.group_of(24) == 3
    w = replace(base, interfaces=(("eth9", InterfaceQos()),)).validate(ports=["eth1", "eth2"])
    assert any("'eth9' is not a port" in x for x in w)


def test_headroom_below_what_a_link_needs_is_a_warning():
    c = QosConfig()  # headroom 200 000 bytes, MTU 9216
    # needs 2 x delay x rate / 8 + 2 x 9216: eth1 198 432, eth2 208 432, eth3 168 432
    links = {"eth1": (400e9, 1.8e-6), "eth2": (400e9, 1.9e-6), "eth3": (200e9, 3.0e-6)}
    assert c.validate(links=links) == [
        "eth2: pfc.headroom_bytes 200000 < 208432 needed at 400 Gbps over 1.9 us of cable "
        "(2 x delay x rate + 2 x MTU 9216): expect headroom drops on no-drop priorities [3]"]
    lossy = replace(c, pfc=replace(c.pfc, no_drop=frozenset()))
    assert lossy.validate(links=links) == []  # no no-drop priority: nothing to absorb


def test_nvidia_cnp_priority_6_allowed():
    c = QosConfig.from_dict({
        "classification": {"classes": [{"name": "ROCEv2", "dscp": [24], "qos_group": 3},
                                       {"name": "CNP", "dscp": [48], "qos_group": 6}]},
        "queuing": {"queues": {0: {"bandwidth_percent": 50}, 6: {"strict": True},
                               3: {"bandwidth_percent": 50,
                                   "wred": {"min": "150KB", "max": "3000KB", "max_prob": 7}}}},
        "cnp": {"priority": 6}})
    assert c.cnp_priority == 6 and c.classification.group_of(48) == 6
    assert c.validate() == []


def test_port_lookup_and_watchdog():
    c = replace(QosConfig(), interfaces=(("eth2", InterfaceQos("on", False, True)),))
    assert c.port("eth2").pfc_mode == "on" and c.port("eth1") == c.default_interface
    assert c.watchdog_on("eth1") and not c.watchdog_on("eth2")
    off = replace(c, watchdog=replace(c.watchdog, enabled=False))
    assert not off.watchdog_on("eth1")


def test_load_qos_files_and_errors(tmp_path):
    y = tmp_path / "q.yaml"
    y.write_text("pfc: {xoff: 3300KB}\n")
    assert load_qos(str(y)).pfc.xoff_bytes == 3_300_000
    n = tmp_path / "q.nxos"
    n.write_text("policy-map type network-qos NQ\n class type network-qos c-8q-nq4\n"
                 "  pause pfc-cos 4\nsystem qos\n service-policy type network-qos NQ\n")
    assert load_qos(n).pfc.no_drop == {4}
    with pytest.raises(ValueError, match="neither a file nor a preset"):
        load_qos("nosuch")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pfc: [unclosed\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_qos(bad)
    assert load_qos({"mtu": 4200}).mtu == 4200
