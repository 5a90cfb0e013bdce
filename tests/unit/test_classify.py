"""DSCP classification and ECN marking (emucore.qos.classify), book ch.11 Examples 11-1/11-2."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emucore.qos.classify import (
    Classification, Classifier, TrafficClass, ecn_bits, ecn_capable, is_ect, mark_ce,
    mark_ce_inplace, set_ce)
from switch_agent.forward import ipv4_checksum


@pytest.mark.parametrize("dscp, queue", [(24, 3), (48, 7), (0, 0), (26, 0), (46, 0), (63, 0)])
def test_book_classification(dscp, queue):
    c = Classifier.book()
    for ecn in range(4):  # ECN bits never change the class
        assert c.queue_by_tos[dscp << 2 | ecn] == queue
        assert c.priority_by_tos[dscp << 2 | ecn] == queue
        assert c.classify(dscp << 2 | ecn) == (queue, queue)
    assert c.classification.group_of(dscp) == queue


def test_rocev2_tos_byte_of_the_book():
    # the sender NIC sets DSCP 24 + ECN 10 -> TOS 0x62; CNP DSCP 48 -> 0xC0
    c = Classifier.book()
    assert c.queue_by_tos[0x62] == 3 and c.queue_by_tos[0xC0] == 7


def test_custom_mapping_and_cnp_on_priority_6():
    custom = Classification("C", (TrafficClass("R", (26,), 3), TrafficClass("CNP", (48,), 6)), 1)
    c = Classifier(custom, priority_of_group={6: 6, 3: 3})
    assert c.classify(26 << 2) == (3, 3)
    assert c.classify(24 << 2) == (1, 1)  # DSCP 24 no longer RoCE here
    assert c.classify(48 << 2) == (6, 6)
    c2 = Classifier(Classification(), priority_of_group={7: 6})
    assert c2.classify(48 << 2) == (7, 6)  # queue 7, PFC priority 6 (NVIDIA style)


@pytest.mark.parametrize("classes, dscp, priority", [
    (None, 24, 3), (None, 48, 7), (None, 0, 0),
    ((TrafficClass("R", (24,), 4),), 24, 4),  # the NIC pauses what its DSCP maps to
    ((TrafficClass("R", (26,), 3),), 24, 0),
])
def test_priority_of_dscp(classes, dscp, priority):
    c = Classifier(Classification() if classes is None else Classification("C", classes, 0))
    assert c.priority_of_dscp(dscp) == priority


def test_priority_of_dscp_names_the_field():
    with pytest.raises(ValueError, match="dscp"):
        Classifier.book().priority_of_dscp(64)


def test_first_class_wins_and_the_rest_is_default():
    overlap = Classification("O", (TrafficClass("A", (24, 25), 3), TrafficClass("B", (24,), 5)), 2)
    c = Classifier(overlap)
    assert [c.classify(d << 2)[0] for d in (23, 24, 25, 26)] == [2, 3, 3, 2]
    plain = Classifier(Classification("plain", (), 0))
    assert set(plain.queue_by_tos) == {0} and len(plain.queue_by_tos) == 256


@pytest.mark.parametrize("make, field", [
    (lambda: TrafficClass("X", (64,), 3), "dscp"),
    (lambda: TrafficClass("X", (24,), 8), "qos_group"),
    (lambda: Classification("X", (), -1), "default_group"),
    (lambda: Classifier(Classification(), priority_of_group={7: 9}), r"priority_of_group\[7\]"),
    (lambda: Classifier(Classification(), priority_of_group={8: 1}), "priority_of_group key"),
])
def test_validation_names_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize("tos, bits, ect, capable, ce_tos", [
    (0x60, 0b00, False, False, 0x63),
    (0x61, 0b01, True, True, 0x63),
    (0x62, 0b10, True, True, 0x63),
    (0x63, 0b11, False, True, 0x63),
    (0xC2, 0b10, True, True, 0xC3),
])
def test_ecn_helpers(tos, bits, ect, capable, ce_tos):
    assert ecn_bits(tos) == bits
    assert is_ect(tos) is ect
    assert ecn_capable(tos) is capable
    assert set_ce(tos) == ce_tos


def _frame(tos, ident=1, ttl=64, options=b"", payload=b"x" * 30):
    ip = IP(tos=tos, id=ident, ttl=ttl, src="10.0.1.1", dst="10.0.1.3", options=options)
    return bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / ip
                 / UDP(sport=49152, dport=4791) / payload)


def test_mark_ce_matches_scapy_exactly():
    marked = mark_ce(_frame(0x62))
    assert marked == _frame(0x63)  # Scapy recomputes the checksum from scratch
    assert marked[15] == 0x63


def _full_ok(frame, l3=14):
    ihl = (frame[l3] & 0x0F) * 4
    hdr = bytearray(frame[l3:l3 + ihl])
    want = (hdr[10] << 8) | hdr[11]
    hdr[10:12] = b"\0\0"
    return ipv4_checksum(bytes(hdr)) == want


def test_incremental_checksum_equals_full_recomputation():
    rng = random.Random(7)
    for _ in range(400):
        tos = rng.randrange(256) & ~3 | rng.choice((1, 2))
        opts = bytes([1]) * rng.choice((0, 4, 8))  # NOPs: IHL 5..7
        f = _frame(tos, ident=rng.randrange(65536), ttl=rng.randrange(1, 256),
                   options=opts, payload=bytes(rng.randrange(100)))
        m = mark_ce(f)
        assert m[15] == tos | 3
        assert _full_ok(m), f.hex()
        assert m[:15] == f[:15] and m[16:24] == f[16:24] and m[26:] == f[26:]
        buf = bytearray(f)
        assert mark_ce_inplace(buf) is True
        assert bytes(buf) == m


def test_checksum_edge_case_zero():
    # choose the IP id so that the *marked* header's checksum is 0x0000 (never 0xFFFF)
    f = bytearray(_frame(0x62, ident=0))
    hdr = bytearray(f[14:34])
    hdr[1] = 0x63
    hdr[10:12] = b"\0\0"
    s = 0xFFFF - ipv4_checksum(bytes(hdr))  # ones' complement sum without the id
    ident = ~s & 0xFFFF
    f2 = _frame(0x62, ident=ident)
    m = mark_ce(f2)
    assert m[24:26] == b"\x00\x00"
    assert _full_ok(m)


@pytest.mark.parametrize("tos", [0x62, 0x61])
def test_checksum_edge_case_original_zero(tos):
    # original checksum 0x0000 (sum 0xFFFF): the update needs a second end-around carry
    hdr = bytearray(_frame(tos, ident=0)[14:34])
    hdr[10:12] = b"\0\0"
    s = 0xFFFF - ipv4_checksum(bytes(hdr))
    f = _frame(tos, ident=~s & 0xFFFF)
    assert f[24:26] == b"\x00\x00"
    m = mark_ce(f)
    assert _full_ok(m) and m[15] == tos | 3


@pytest.mark.parametrize("tos", [0x60, 0x63])
def test_not_ect_and_ce_are_left_alone(tos):
    f = _frame(tos)
    assert mark_ce(f) is f
    buf = bytearray(f)
    assert mark_ce_inplace(buf) is False and bytes(buf) == f
