"""NX-OS parser: the book's Examples 11-1..11-7 (ch.11) parse into the book configuration."""

from dataclasses import replace

import pytest

from emucore.qos.qosconfig import QosConfig
from emucore.qos.nxos import factory_default, parse_nxos
from emucore.qos.nxos_lines import interface_name
from emucore.qos.nxos_render import to_nxos
from emucore.qos.wred import Wred

# The examples as the seed text of the book prints them (ch.11, "DCQCN Configuration"),
# PDF-extraction artefacts included: merged lines, hyphen wraps, "..." elisions.
EX_11_1 = """\
class-map type qos match-any ROCEv2
match dscp 24

class-map type qos match-any CNP
match dscp 48
"""
EX_11_2 = """\
policy-map type qos QOS_CLASSIFICATION

class ROCEv2

set qos-group 3 class CNP

set qos-group 7 class class-default

set qos-group 0
"""
EX_11_3 = """\
policy-map type queuing QOS_EGRESS_PORT

class type queuing c-out-8q-q6

bandwidth remaining percent 0

...
class type queuing c-out-8q-q3
bandwidth remaining percent 50
random-detect minimum-threshold 150 kbytes maximum-
threshold 3000 kbytes drop-probability 7 weight 0 ecn
...
class type queuing c-out-8q-q7
priority level 1
"""
EX_11_4 = """\
policy-map type network-qos qos_network class type network-
qos c-8q-nq3

mtu 9216

pause pfc-cos 3
"""
EX_11_5 = "priority-flow-control watch-dog-interval on\n"
EX_11_6 = """\
system qos

service-policy type network-qos qos_network

service-policy type queuing output QOS_EGRESS_PORT
"""
EX_11_7 = """\
interface Ethernet 2/24

priority-flow-control mode auto

priority-flow-control watch-dog

service-policy type qos input QOS_CLASSIFICATION
"""
BOOK = "\n".join([EX_11_1, EX_11_2, EX_11_3, EX_11_4, EX_11_5, EX_11_6, EX_11_7])


def test_book_examples_parse_into_the_book_config():
    notes: list[str] = []
    c = parse_nxos(BOOK, warnings=notes)
    assert notes == []
    book = QosConfig()
    assert c.classification == book.classification
    assert c.queuing == book.queuing  # q-default gets the remaining 50 %
    assert c.queuing.queues[3].wred == Wred(150_000, 3_000_000, 7, 0, True)
    assert c.queuing.strict == {7} and c.queuing.queues[6].bandwidth_percent == 0
    assert c.pfc.no_drop == {3} and c.pfc.policy == "qos_network" and c.mtu == 9216
    assert c.watchdog.enabled
    assert c.interfaces == (("Ethernet2/24", c.port("Ethernet2/24")),)
    assert c.port("Ethernet2/24").classify and c.port("Ethernet2/24").pfc_mode == "auto"
    assert c.watchdog_on("Ethernet2/24")
    # the book binds classification on one interface only: other ports stay in group 0
    assert not c.port("eth1").classify
    assert any("applied only on Ethernet2/24" in w for w in c.validate())


def test_book_plus_system_wide_classification_is_exactly_the_default_config():
    text = BOOK + "system qos\n service-policy type qos input QOS_CLASSIFICATION\n"
    c = parse_nxos(text)
    assert replace(c, name="book", interfaces=()) == QosConfig()


def test_unbound_policies_are_not_applied_and_noted():
    notes: list[str] = []
    c = parse_nxos(EX_11_1 + EX_11_2 + EX_11_3 + EX_11_4, warnings=notes)
    assert c == factory_default()
    assert c.pfc.no_drop == frozenset() and c.queuing.queues[0].bandwidth_percent == 100
    assert len(notes) == 3 and all("not bound" in n for n in notes)


def test_factory_default_has_no_lossless_class_and_keeps_thresholds():
    f = factory_default()
    assert f.classification.group_of(24) == 0 and not f.watchdog.enabled
    assert f.pfc.xoff_bytes == QosConfig().pfc.xoff_bytes


@pytest.mark.parametrize("nx, ours", [
    ("Ethernet1/5", "eth5"), ("ethernet1/12", "eth12"), ("Ethernet 2/24", "Ethernet2/24"),
    ("eth3", "eth3")])
def test_interface_names(nx, ours):
    assert interface_name(nx) == ours


def test_interface_ranges_lists_and_modes():
    c = parse_nxos("interface ethernet1/1-3\n priority-flow-control mode on\n"
                   "interface Ethernet1/5, Ethernet1/7\n priority-flow-control mode off\n"
                   "  priority-flow-control watch-dog-interval off\n")
    assert [n for n, _ in c.interfaces] == ["eth1", "eth2", "eth3", "eth5", "eth7"]
    assert c.port("eth2").pfc_mode == "on" and c.port("eth7").pfc_mode == "off"
    assert c.port("eth1").watchdog and not c.port("eth5").watchdog


def test_match_all_any_and_dscp_lists():
    c = parse_nxos("class-map type qos match-any A\n match dscp 10,12-14\n match dscp 20\n"
                   "class-map type qos match-all B\n match dscp 30-40\n match dscp 34,50\n"
                   "policy-map type qos P\n class A\n  set qos-group 2\n class B\n"
                   "  set qos-group 5\n class class-default\n  set qos-group 1\n"
                   "system qos\n service-policy type qos input P\n")
    cl = c.classification
    assert [(t.name, t.dscp, t.qos_group) for t in cl.classes] == [
        ("A", (10, 12, 13, 14, 20), 2), ("B", (34,), 5)]
    assert [cl.group_of(d) for d in (12, 20, 34, 35, 0)] == [2, 2, 5, 1, 1]
    assert c.default_interface.classify


def test_user_queuing_class_map_and_explicit_default():
    c = parse_nxos("class-map type queuing RDMA\n match qos-group 4\n"
                   "policy-map type queuing OUT\n class type queuing RDMA\n"
                   "  bandwidth remaining percent 70\n"
                   "  random-detect minimum-threshold 100 kbytes maximum-threshold 2 mbytes "
                   "drop-probability 10 weight 2\n"
                   " class type queuing c-out-8q-q-default\n  bandwidth remaining percent 30\n"
                   "system qos\n service-policy type queuing output OUT\n")
    q4 = c.queuing.queues[4]
    assert q4.bandwidth_percent == 70 and q4.wred == Wred(100_000, 2_000_000, 10, 2, False)
    assert c.queuing.queues[0].bandwidth_percent == 30 and c.queuing.strict == frozenset()


def test_to_nxos_round_trip():
    for cfg in (QosConfig(), parse_nxos(BOOK)):
        back = parse_nxos(to_nxos(cfg), base=cfg)
        assert replace(back, name=cfg.name) == cfg


@pytest.mark.parametrize("text, line, needle", [
    ("system qos\n\n  bogus command here\n", 3, "expected class-map or policy-map"),
    ("class-map type qos match-any X\n match dscp 64\n", 2, "dscp: must be 0..63"),
    ("set qos-group 3\n", 1, "outside a class of a policy-map type qos"),
    ("policy-map type qos P\n class NOPE\n", 2, "no class-map type qos of that name"),
    ("system qos\n service-policy type queuing output NOPE\n", 2, "no policy-map type queuing"),
    ("policy-map type queuing Q\n class type queuing c-out-8q-q3\n"
     "  random-detect minimum-threshold 150 kbytes\n", 3, "maximum-threshold missing"),
    ("policy-map type queuing Q\n class type queuing c-out-8q-q3\n"
     "  random-detect minimum-threshold 3 mbytes maximum-threshold 1 mbytes\n", 3,
     "min_bytes: must be <= max_bytes"),
    ("policy-map type queuing Q\n class type queuing c-out-8q-q7\n priority level 2\n", 3,
     "only level 1"),
    ("policy-map type queuing Q\n class type queuing c-out-8q-q1\n"
     " bandwidth remaining percent 101\n", 3, "must be 0..100"),
    ("policy-map type queuing Q\n class type queuing c-out-8q-q9\n", 2,
     "no class-map type queuing"),
    ("interface vlan10\n", 1, "not an Ethernet interface"),
    ("interface ethernet1/5\n priority-flow-control mode sometimes\n", 2,
     "expected auto or on or off"),
    ("priority-flow-control mode on\n", 1, "outside an interface"),
    ("policy-map type queuing Q\ninterface ethernet1/5\n service-policy type queuing output Q\n",
     3, "type qos input"),
    ("class-map type qos match-any A\n match dscp\n", 2, "expected dscp"),
])
def test_errors_name_the_line(text, line, needle):
    with pytest.raises(ValueError) as e:
        parse_nxos(text)
    msg = str(e.value)
    bad = text.splitlines()[line - 1].strip()
    assert msg.startswith(f"line {line}: {bad!r}") and needle in msg, msg


def test_bandwidth_over_100_is_an_error():
    with pytest.raises(ValueError, match="sum to 120 %"):
        parse_nxos("policy-map type queuing Q\n class type queuing c-out-8q-q1\n"
                   "  bandwidth remaining percent 60\n class type queuing c-out-8q-q2\n"
                   "  bandwidth remaining percent 60\nsystem qos\n"
                   " service-policy type queuing output Q\n")


def test_two_classification_policies_rejected():
    pm = ("class-map type qos match-any A\n match dscp 1\n"
          "policy-map type qos P1\n class A\n  set qos-group 1\n"
          "policy-map type qos P2\n class A\n  set qos-group 2\n")
    with pytest.raises(ValueError, match="only one classification policy"):
        parse_nxos(pm + "interface ethernet1/1\n service-policy type qos input P1\n"
                   "interface ethernet1/2\n service-policy type qos input P2\n")
