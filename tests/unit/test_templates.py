"""Byte templates (emucore/wire/templates.py): byte-identical to Scapy for every opcode, parser."""

import pytest

from emucore.wire import roce
from emucore.wire.ib import Op
from emucore.wire.roce import icrc_of, icrc_reference, udp_sport
from emucore.wire.templates import FrameTemplate, HDR_LEN, parse

SIZES = [0, 1, 2, 3, 4, 5, 1023, 4096]
DATA_CASES = [  # opcode, reth, imm
    (Op.WRITE_FIRST, (0x7F0000001000, 0x1234, 3 * 4096), None),
    (Op.WRITE_MIDDLE, None, None),
    (Op.WRITE_LAST, None, None),
    (Op.WRITE_ONLY, (0x10, 0xABCDEF01, 4096), None),
    (Op.WRITE_ONLY_IMM, (0xFFFFFFFFFFFFFFF0, 0x1, 1), 0xDEADBEEF),
    (Op.WRITE_LAST_IMM, None, 0x01020304),
]


@pytest.fixture(scope="module")
def tmpl():
    """Requester -> responder template with the book's P_Key and QP (ch.9, ch.11)."""
    return FrameTemplate("02:00:00:00:01:01", "02:00:00:00:02:01", "10.0.1.11", "10.0.2.12",
                         udp_sport(0x17, 0x123456), 0x123456, pkey=0x8012)


def payload_of(n):
    """Non-trivial payload bytes."""
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("opcode,reth,imm", DATA_CASES)
def test_data_frames_match_scapy_and_parse(tmpl, opcode, reth, imm, size):
    data = payload_of(size)
    psn = 0xFFFFFE if size == 5 else 0x000ABC
    got = tmpl.build(opcode, psn, True, reth, imm, None, data)
    want = bytes(tmpl.scapy(opcode, psn, ackreq=True, reth=reth, imm=imm, payload=data))
    assert got == want
    assert icrc_of(got) == icrc_reference(got)
    f = parse(got, verify_icrc=True)
    assert f.icrc_ok is True
    assert (f.opcode, f.dqpn, f.psn, f.ackreq, f.becn, f.pkey) == (opcode, 0x123456, psn, True,
                                                                    False, 0x8012)
    assert f.reth == reth and f.imm == imm and f.aeth is None
    assert bytes(f.payload) == data and f.padcount == -size & 3
    assert (f.src_ip, f.dst_ip, f.sport, f.dscp, f.ecn) == ("10.0.1.11", "10.0.2.12",
                                                            tmpl.sport, 24, 0b10)


@pytest.mark.parametrize("syndrome,msn", [(0x1F, 0), (0x00, 0xABCDEF), (0x60, 7), (0x62, 1),
                                          (0x21, 0xFFFFFF)])
def test_ack_nak_match_scapy(tmpl, syndrome, msn):
    got = tmpl.build(Op.ACK, 0xABC, aeth=(syndrome, msn))
    assert got == bytes(tmpl.scapy(Op.ACK, 0xABC, aeth=(syndrome, msn)))
    f = parse(got, verify_icrc=True)
    assert f.icrc_ok and f.aeth == (syndrome, msn) and f.reth is None and len(f.payload) == 0


def test_cnp_matches_scapy(tmpl):
    got = tmpl.build_cnp()
    want = bytes(roce.scapy_cnp("02:00:00:00:01:01", "02:00:00:00:02:01", "10.0.1.11",
                                "10.0.2.12", tmpl.sport, 0x123456, pkey=0x8012))
    assert got == want and len(got) == HDR_LEN + 16 + 4
    f = parse(got, verify_icrc=True)
    assert f.icrc_ok and f.opcode == 0x81 and f.becn and f.dscp == 48 and f.ecn == roce.CNP_ECN
    assert bytes(f.payload) == bytes(16)


@pytest.mark.parametrize("ecn,becn,dscp", [(0b11, False, None), (0b00, True, None),
                                           (0b10, False, 26)])
def test_overrides_match_scapy(tmpl, ecn, becn, dscp):
    got = tmpl.build(Op.WRITE_MIDDLE, 9, payload=b"abc", ecn=ecn, becn=becn, dscp=dscp)
    want = bytes(tmpl.scapy(Op.WRITE_MIDDLE, 9, payload=b"abc", ecn=ecn, becn=becn,
                            dscp=24 if dscp is None else dscp))
    assert got == want
    f = parse(got, verify_icrc=True)
    assert f.icrc_ok and f.ecn == ecn and f.becn == becn


def test_ce_marking_keeps_icrc_valid(tmpl):
    """A switch rewrites ECN to CE and the checksum/TTL: the ICRC masks those fields."""
    f = bytearray(tmpl.build(Op.WRITE_MIDDLE, 1, payload=b"x" * 64))
    f[15] |= 0b11
    f[22] -= 1
    f[24:26] = b"\x00\x00"
    p = parse(f, verify_icrc=True)
    assert p.icrc_ok and p.ecn == 0b11


def test_parse_detects_corruption(tmpl):
    f = bytearray(tmpl.build(Op.WRITE_ONLY, 1, reth=(1, 2, 3), payload=b"abc"))
    f[60] ^= 0x01  # inside the RETH
    assert parse(f, verify_icrc=True).icrc_ok is False
    assert parse(f).icrc_ok is None


def test_parse_ignores_ethernet_padding_and_vlan(tmpl):
    f = tmpl.build(Op.WRITE_MIDDLE, 1)
    assert len(f) == 58
    padded = f + bytes(2)  # a NIC pads to the 60-byte minimum
    p = parse(padded, verify_icrc=True)
    assert p.icrc_ok and len(p.payload) == 0
    tagged = f[:12] + b"\x81\x00\x00\x65" + f[12:]  # VLAN 101 (ch.13)
    p = parse(tagged, verify_icrc=True)
    assert p.icrc_ok and p.psn == 1


@pytest.mark.parametrize("frame", [
    b"",
    bytes(12) + b"\x08\x06" + bytes(28),                      # ARP
])
def test_parse_rejects_non_roce(frame):
    assert parse(frame) is None


def test_parse_rejects_other_udp_and_truncated(tmpl):
    f = bytearray(tmpl.build(Op.WRITE_ONLY, 1, reth=(1, 2, 3), payload=b"abcd"))
    other = bytearray(f)
    other[36:38] = (53).to_bytes(2, "big")
    assert parse(other) is None
    assert parse(f[:50]) is None
    assert parse(f[:-10]) is None  # IP total length beyond the frame


@pytest.mark.parametrize("kw,field", [({"sport": -1}, "sport"), ({"dqpn": 1 << 24}, "dqpn"),
                                      ({"pkey": 0x10000}, "pkey"), ({"dscp": 64}, "dscp")])
def test_template_rejects(kw, field):
    args = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
                dst_ip="10.0.0.2", sport=1, dqpn=1)
    args.update(kw)
    with pytest.raises(ValueError, match=field):
        FrameTemplate(**args)

