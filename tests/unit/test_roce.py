"""RoCEv2 Scapy layers (emucore/wire/roce.py; opcodes of emucore/wire/ib.py): exact bytes, ICRC against independent vectors."""

import pytest
from scapy.contrib.roce import AETH, BTH, CNP_OPCODE, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emucore.wire import roce
from emucore.wire.ib import AETH_OPS, IMM_OPS, RETH_OPS, Op
from emucore.wire.roce import (ImmDt, RETH, icrc_of, icrc_reference, scapy_cnp, scapy_frame,
                              udp_sport)

MACS = ("02:00:00:00:01:01", "02:00:00:00:02:01")
IPS = ("10.0.1.11", "10.0.1.12")

# A CNP captured on a ConnectX-4 Lx (Scapy's test/contrib/roce.uts): real hardware ICRC.
CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161 0a0011010a00"
    "120100 0012b700280000 8100ffff40000118 0000000000000000000000000000000000000000"
    "82fd002a".replace(" ", ""))


def ones_complement_sum(data: bytes) -> int:
    """RFC 1071 sum of 16-bit words."""
    s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def frame(opcode, **kw):
    """Scapy-built frame with the book's example QP (ch.11 0x123456), P_Key, PSN."""
    kw.setdefault("pkey", 0x8012)
    return scapy_frame(*MACS, *IPS, 0xC0DE, opcode, 0x123456, 0x000ABC, **kw)


def test_icrc_reference_matches_captured_hardware_cnp():
    assert len(CX4_CNP) == 74
    assert icrc_of(CX4_CNP) == 0x2A00FD82  # wire bytes 82 fd 00 2a, little-endian
    assert icrc_reference(CX4_CNP) == icrc_of(CX4_CNP)
    # the masks matter: a different TTL / TOS / checksum leaves the ICRC unchanged,
    # a different QP changes it
    mutated = bytearray(CX4_CNP)
    mutated[15] = 0x00
    mutated[22] = 0x01
    mutated[24:26] = b"\x12\x34"
    assert icrc_reference(bytes(mutated)) == icrc_of(CX4_CNP)
    mutated[49] ^= 1
    assert icrc_reference(bytes(mutated)) != icrc_of(CX4_CNP)


def test_scapy_recomputes_captured_cnp_icrc():
    pkt = Ether(CX4_CNP)
    del pkt[BTH].icrc
    assert bytes(pkt) == CX4_CNP


def test_write_only_exact_bytes():
    """Every header byte of a WRITE ONLY (book ch.12 Figure 12-7), by hand."""
    b = bytes(frame(Op.WRITE_ONLY, ackreq=True, reth=(0x7F0000001000, 0xCAFE, 5),
                    payload=b"hello"))
    expect = (
        "020000000201" "020000000101" "0800"                    # Ethernet
        "4562" "0044" "0000" "4000" "40" "11" "xxxx"            # IPv4: DSCP 24 ECT(0), DF
        "0a00010b" "0a00010c"
        "c0de" "12b7" "0030" "0000"                             # UDP 4791, checksum 0
        "0a" "30" "8012" "00" "123456" "80" "000abc"            # BTH: padcount 3, AckReq
        "00007f0000001000" "0000cafe" "00000005"                # RETH
        "68656c6c6f" "000000")                                  # payload + 3 pad bytes
    assert len(b) == len(expect.replace("xxxx", "0000")) // 2 + 4
    assert b[:24].hex() == expect[:48]
    assert b[26:-4].hex() == expect[52:]
    assert ones_complement_sum(b[14:34]) == 0xFFFF  # a valid IPv4 header checksum
    assert icrc_of(b) == icrc_reference(b)


@pytest.mark.parametrize("opcode,kw,layers", [
    (Op.WRITE_FIRST, {"reth": (1, 2, 8192), "payload": b"x" * 8}, [RETH, Raw]),
    (Op.WRITE_MIDDLE, {"payload": b"x" * 8}, [Raw]),
    (Op.WRITE_LAST, {"payload": b"x" * 8}, [Raw]),
    (Op.WRITE_LAST_IMM, {"imm": 0xDEADBEEF, "payload": b"x" * 8}, [ImmDt, Raw]),
    (Op.WRITE_ONLY, {"reth": (1, 2, 8), "payload": b"x" * 8}, [RETH, Raw]),
    (Op.WRITE_ONLY_IMM, {"reth": (1, 2, 8), "imm": 7, "payload": b"x" * 8},
     [RETH, ImmDt, Raw]),
    (Op.READ_REQUEST, {"reth": (0x1000, 0x42, 65536)}, [RETH]),
    (Op.ACK, {"aeth": (0x1F, 3)}, [AETH]),
    (Op.CNP, {"becn": True, "dscp": 48}, [CNPPadding]),
])
def test_dissect_by_opcode_and_icrc(opcode, kw, layers):
    b = bytes(frame(opcode, **kw))
    pkt = Ether(b)
    got = []
    layer = pkt[BTH].payload
    while layer:  # NoPayload is falsy
        got.append(type(layer))
        layer = layer.payload
    assert got == layers
    assert pkt[BTH].opcode == opcode and pkt[BTH].dqpn == 0x123456 and pkt[BTH].psn == 0xABC
    assert icrc_of(b) == icrc_reference(b), "Scapy's ICRC must cover the extension headers"
    if RETH in layers:
        assert (pkt[RETH].va, pkt[RETH].rkey, pkt[RETH].dlen) == kw["reth"]
    if ImmDt in layers:
        assert pkt[ImmDt].imm == kw["imm"]


def test_icrc_changes_with_extension_header():
    a = bytes(frame(Op.WRITE_ONLY, reth=(1, 2, 4), payload=b"abcd"))
    b = bytes(frame(Op.WRITE_ONLY, reth=(1, 3, 4), payload=b"abcd"))
    assert a[:-8] != b[:-8] and icrc_of(a) != icrc_of(b)
    assert icrc_of(b) == icrc_reference(b)


def test_ip_udp_choices():
    pkt = Ether(bytes(frame(Op.WRITE_MIDDLE, payload=b"abcd")))
    assert pkt[IP].tos == (24 << 2) | 0b10
    assert pkt[IP].flags == "DF" and pkt[IP].id == 0 and pkt[IP].ttl == 64
    assert pkt[UDP].sport == 0xC0DE and pkt[UDP].dport == 4791 and pkt[UDP].chksum == 0


def test_cnp_format():
    pkt = scapy_cnp(*MACS, *IPS, udp_sport(5, 9), dqpn=0x000042, pkey=0x8012)
    b = bytes(pkt)
    p = Ether(b)
    assert len(b) == 74
    assert p[IP].tos >> 2 == 48 and p[IP].tos & 3 == roce.CNP_ECN
    assert p[BTH].opcode == 0x81 and p[BTH].becn == 1 and p[BTH].fecn == 0
    assert p[BTH].dqpn == 0x42 and p[BTH].psn == 0 and p[BTH].ackreq == 0
    assert bytes(p[CNPPadding]) == bytes(16)
    assert icrc_of(b) == icrc_reference(b)


@pytest.mark.parametrize("n,pad", [(0, 0), (1, 3), (2, 2), (3, 1), (4, 0), (4097, 3)])
def test_padcount(n, pad):
    b = bytes(frame(Op.WRITE_MIDDLE, payload=b"\x01" * n))
    assert Ether(b)[BTH].padcount == pad
    assert len(b) == 54 + n + pad + 4
    assert b[54 + n:54 + n + pad] == bytes(pad)


def test_aeth_bound_once():
    aeth_rc = [fv for fv, cls in BTH.payload_guess if cls is AETH and fv.get("opcode") == 0x11]
    assert len(aeth_rc) == 1


def test_udp_sport():
    assert udp_sport(0x11, 0x22) == 0xC242  # 0x11 * 0x22 = 0x242, folded, | 0xC000
    assert udp_sport(5, 9) == udp_sport(9, 5)
    ports = {udp_sport(q, 0x123456) for q in range(100, 200)}
    assert len(ports) > 90 and all(0xC000 <= p <= 0xFFFF for p in ports)


@pytest.mark.parametrize("field,kw", [("sport", {"sport": 70000}), ("dscp", {"dscp": 64}),
                                      ("ecn", {"ecn": 4})])
def test_scapy_frame_rejects(field, kw):
    args = dict(src_mac=MACS[0], dst_mac=MACS[1], src_ip=IPS[0], dst_ip=IPS[1], sport=1,
                opcode=7, dqpn=1, psn=1)
    args.update(kw)
    with pytest.raises(ValueError, match=field):
        scapy_frame(**args)


def test_opcode_table_sets_are_iba_table_38():
    """The sets derived from emucore.wire.ib.Op, against IBA Table 38 by value."""
    assert sorted(RETH_OPS) == [0x06, 0x0A, 0x0B, 0x0C]
    assert sorted(IMM_OPS) == [0x03, 0x05, 0x09, 0x0B]
    assert sorted(AETH_OPS) == [0x11, 0x51]
    assert Op.CNP == CNP_OPCODE == 0x81


@pytest.mark.parametrize("op", sorted(RETH_OPS | IMM_OPS))
def test_scapy_binds_every_extension_header_of_the_table(op):
    """Scapy dissects exactly the headers the opcode table lists after the BTH."""
    kw = {"reth": (1, 2, 4)} if "R" in op.headers else {}
    if "I" in op.headers:
        kw["imm"] = 5
    layer, got = Ether(bytes(frame(op, payload=b"abcd", **kw)))[BTH].payload, []
    while layer:
        got.append(type(layer))
        layer = layer.payload
    want = [h for h, flag in ((RETH, "R"), (ImmDt, "I")) if flag in op.headers] + [Raw]
    assert got == want


def test_is_cnp_only_for_cnp_frames():
    cnp = bytes(scapy_cnp(*MACS, *IPS, udp_sport(5, 9), dqpn=0x42, pkey=0x8012))
    assert roce.is_cnp(cnp)
    ack = bytes(scapy_frame(*MACS, *IPS, udp_sport(5, 9), Op.ACK, 0x42, 7, aeth=(0, 1)))
    write = bytes(frame(Op.WRITE_MIDDLE, payload=b"abcd"))
    assert not roce.is_cnp(ack) and not roce.is_cnp(write)
    assert not roce.is_cnp(cnp[:60])  # truncated
    other_port = cnp[:36] + b"\x12\xb8" + cnp[38:]
    options = cnp[:14] + b"\x46" + cnp[15:]  # IHL 6: the BTH is not at byte 42
    assert not roce.is_cnp(other_port) and not roce.is_cnp(options)
