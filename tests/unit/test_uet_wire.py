"""UET frames (issue 16): the fast codec (emucore/wire/uet_codec.py) byte-identical to
the Scapy layers (emucore/wire/uet.py) for every header emu sends, the parser reading back
what was built, its refusals, and the switch's trimming cut."""

import pytest
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emucore.wire import uet
from emucore.wire.uet import (F_AR, F_M, F_RETX, F_SYN, S_EOM, S_HD, S_SOM, NackCode,
                             NextHdr, PdsType, RetCode, RspOpcode, SesOpcode)
from emucore.wire.uet_codec import SesReq, UetTemplate, malformed, parse, trim_frame
from tests.unit.uet_vectors import VECTORS

MACS = ("02:00:00:00:01:01", "02:00:00:00:02:01")
IPS = ("10.0.1.11", "10.0.1.12")
T = UetTemplate(*MACS, *IPS, dscp=24, ecn=0b10, ctrl_dscp=48)


def ref(pds, ses=None, payload=b"", sport=50000, dscp=24, ecn=0b10):
    return bytes(uet.scapy_frame(*MACS, *IPS, sport, pds, ses, payload, dscp=dscp, ecn=ecn))


SOM = SesReq(SesOpcode.WRITE, S_SOM | S_HD, 7, 0xABCDE, 0x123, 0x456, 0x10000, 0xFEEDF00D,
             12288, header_data=0x8000_0001, initiator=5)
MID = SesReq(SesOpcode.WRITE, S_EOM, 7, 0xABCDE, 0x123, 0x456, 0x10000, 0xFEEDF00D, 12288,
             payload_length=4096, message_offset=8192)


def ses_scapy(s: SesReq):
    kw = dict(opcode=s.opcode, ses_flags=s.flags, message_id=s.message_id, job_id=s.job_id,
              pid_on_fep=s.pid_on_fep, resource_index=s.resource_index,
              buffer_offset=s.buffer_offset, mem_key=s.mem_key, initiator=s.initiator,
              request_length=s.request_length)
    if s.flags & S_SOM:
        kw["header_data"] = s.header_data
    else:
        kw.update(payload_length=s.payload_length, message_offset=s.message_offset)
    return uet.SESStandard(**kw)


@pytest.mark.parametrize("ses, dpdcid, flags, payload", [
    (SOM, None, F_AR, b"\x01" * 4096),          # first packet of a new PDC: SYN
    (SOM, 9, 0, b"abc"),
    (MID, 9, F_RETX, b"\x02" * 4096),           # a later packet of the message
    (MID, 9, F_AR | F_RETX, b"")])
def test_request_bytes_equal_scapy(ses, dpdcid, flags, payload):
    got = T.request(50000, 0x01020304, 3, dpdcid, flags, ses, payload, psn_offset=17)
    pds = uet.PDSRequest(type=PdsType.RUD_REQ, nh=NextHdr.REQ_STD,
                         flags=flags | (F_SYN if dpdcid is None else 0), psn=0x01020304,
                         spdcid=3, **({"psn_offset": 17} if dpdcid is None else
                                      {"dpdcid": dpdcid}))
    assert got == ref(pds, ses_scapy(ses), payload)
    f = parse(got, verify_csum=True)
    assert f.csum_ok and f.ses == ses and bytes(f.payload) == payload
    assert (f.pds_type, f.psn, f.spdcid, f.dpdcid, f.sport, f.dscp, f.ecn) == (
        PdsType.RUD_REQ, 0x01020304, 3, dpdcid, 50000, 24, 0b10)
    assert f.psn_offset == (17 if dpdcid is None else 0)


def test_rod_request_type():
    got = T.request(1, 5, 3, 4, 0, SOM, b"x", rod=True)
    assert got[42] >> 3 == PdsType.ROD_REQ and parse(got).pds_type == PdsType.ROD_REQ


@pytest.mark.parametrize("rsp", [None, (RspOpcode.RESPONSE, RetCode.OK, 7, 0xABCDE, 12288)])
def test_ack_cc_bytes_equal_scapy(rsp):
    got = T.ack(61000, 1000, 3, 4, 9, F_M, sack_offset=1, sack_bitmap=0xF0F0_0000_0000_0001,
                service_time=12, rcvd_bytes=0x123456, ooo_count=2, rsp=rsp)
    pds = uet.PDSAck(type=PdsType.ACK_CC, nh=NextHdr.RSP if rsp else NextHdr.NONE, flags=F_M,
                     ack_psn_offset=3, cack_psn=1000, spdcid=4, dpdcid=9, sack_offset=1,
                     sack_bitmap=0xF0F0_0000_0000_0001, service_time=12, rcvd_bytes=0x123456,
                     ooo_count=2)
    ses = uet.SESResponse(rsp_opcode=rsp[0], return_code=rsp[1], message_id=rsp[2],
                          job_id=rsp[3], mod_length=rsp[4]) if rsp else None
    assert got == ref(pds, ses, sport=61000, dscp=48)
    f = parse(got)
    assert (f.cack_psn, f.ack_psn, f.sack_bitmap, f.rcvd_bytes, f.ooo_count, f.rsp) == (
        1000, 1003, 0xF0F0_0000_0000_0001, 0x123456, 2, rsp)
    assert len(got) == 42 + 32 + (12 if rsp else 0)


@pytest.mark.parametrize("code", [NackCode.TRIMMED, NackCode.TRIMMED_LASTHOP])
def test_nack_bytes_equal_scapy(code):
    got = T.nack(61000, code, 77, 4, 9, payload=80, flags=F_RETX)
    pds = uet.PDSNack(type=PdsType.NACK, flags=F_RETX, nack_code=code, nack_psn=77, spdcid=4,
                      dpdcid=9, nack_payload=80)
    assert got == ref(pds, sport=61000, dscp=48)
    f = parse(got)
    assert (f.nack_code, f.psn, f.spdcid, f.dpdcid, f.nack_payload) == (code, 77, 4, 9, 80)


def test_scapy_dissects_its_own_frames_by_udp_port():
    frame = Ether(T.request(50000, 5, 3, 4, 0, SOM, b"x" * 8))
    assert frame.haslayer(uet.PDSRequest) and frame[uet.SESStandard].header_data == 0x80000001


@pytest.mark.parametrize("mutate, why", [
    (lambda b: b[:30], "cut IPv4 header"),
    (lambda b: b[:12] + b"\x86\xdd" + b[14:], "not IPv4"),
    (lambda b: b[:36] + b"\x12\xb7" + b[38:], "not UDP 4793"),
    (lambda b: b[:-1], "IPv4 total length"),
    (lambda b: b[:42] + bytes([0xF8, 0]) + b[44:], "PDS type 31"),
    (lambda b: _shorten(b, 40), "cut UET headers")])
def test_malformed_frames_say_why_and_do_not_parse(mutate, why):
    bad = mutate(T.request(50000, 5, 3, 4, 0, SOM, b"x" * 8))
    assert why in (malformed(bad) or "") and parse(bad) is None


def _shorten(b: bytes, udp_payload: int) -> bytes:
    """A frame whose lengths agree but whose UDP payload is only `udp_payload` bytes."""
    out = bytearray(b[:42 + udp_payload])
    out[16:18] = (28 + udp_payload).to_bytes(2, "big")
    out[38:40] = (8 + udp_payload).to_bytes(2, "big")
    return bytes(out)


def test_trim_keeps_the_headers_fixes_lengths_and_checksum():
    full = T.request(50000, 5, 3, 4, F_AR, SOM, b"\x07" * 4096, ecn=0b11)
    cut = trim_frame(full, 64, dscp=11)
    assert len(cut) == 42 + 64   # 64 B of UDP payload: the 56 B of headers + 8 of data
    f = parse(cut, verify_csum=True)
    assert f.csum_ok and f.dscp == 11 and f.ecn == 0b11 and f.ses == SOM
    assert bytes(f.payload) == b"\x07" * 8
    assert trim_frame(cut, 64, 11) is None   # nothing left to cut
    assert trim_frame(b"\x00" * 60, 64, 11) is None
    only_hdrs = trim_frame(full, 10, dscp=11)
    assert len(only_hdrs) == 42 + 56 and parse(only_hdrs).payload.nbytes == 0


SMALL = SesReq(SesOpcode.SEND, S_SOM | S_EOM, 0, 0xABCDE, 0x123, 0x456, 0, 0, 1000,
               hdr=NextHdr.REQ_SMALL)
MED_HD = SesReq(SesOpcode.SEND, S_SOM | S_EOM | S_HD, 0, 0xABCDE, 0x123, 0x456, 0, 0, 16383,
                header_data=0xDEADBEEF, hdr=NextHdr.REQ_MEDIUM)
MED_OFF = SesReq(SesOpcode.WRITE, S_SOM | S_EOM, 0, 0xABCDE, 0x123, 0x456, 0x7000,
                 0xFEEDF00D, 4096, initiator=5, hdr=NextHdr.REQ_MEDIUM)


@pytest.mark.parametrize("ses", [SMALL, MED_HD, MED_OFF], ids=["small", "medium_hd", "medium"])
def test_small_and_medium_request_bytes_equal_scapy(ses):
    got = T.request(50000, 9, 3, 4, F_AR, ses, b"\x05" * 10)
    common = dict(opcode=ses.opcode, ses_flags=ses.flags, job_id=ses.job_id,
                  pid_on_fep=ses.pid_on_fep, resource_index=ses.resource_index,
                  request_length=ses.request_length)
    if ses.hdr == NextHdr.REQ_SMALL:
        layer = uet.SESSmall(buffer_offset=ses.buffer_offset, **common)
    else:
        extra = ({"header_data": ses.header_data} if ses.flags & S_HD
                 else {"buffer_offset": ses.buffer_offset})
        layer = uet.SESMedium(initiator=ses.initiator, mem_key=ses.mem_key, **extra, **common)
    pds = uet.PDSRequest(type=PdsType.RUD_REQ, nh=ses.hdr, flags=F_AR, psn=9, spdcid=3,
                         dpdcid=4)
    assert got == ref(pds, layer, b"\x05" * 10)
    assert len(got) == 42 + 12 + {NextHdr.REQ_SMALL: 20, NextHdr.REQ_MEDIUM: 32}[ses.hdr] + 10
    f = parse(got)
    assert f.ses == ses and f.nh == ses.hdr and bytes(f.payload) == b"\x05" * 10


def test_small_and_medium_refuse_a_length_past_14_bits():
    big = SesReq(SesOpcode.SEND, S_SOM | S_EOM, 0, 1, 0, 0, 0, 0, 16384, hdr=NextHdr.REQ_SMALL)
    with pytest.raises(ValueError, match="request_length"):
        big.pack()


def test_an_epsn_ack_needs_its_payload():
    (v,) = [v for v in VECTORS if v.name == "ack_epsn"]
    frame = bytes(uet.scapy_frame(*MACS, *IPS, 61000, Raw(v.data)))
    assert parse(frame).epsn_payload == 0x65
    assert "cut UET headers (12 of 16 bytes)" in malformed(_shorten(frame, 12))
