"""The Lua UET dissector (wireshark/uet.lua, issues 16 and 32) decodes every header emu sends:
frames built by the codec (byte-identical to the Scapy layers, test_uet_wire.py) are
written to a pcap and read back by tshark with the script; field values must be the
ones built, not just present. A cut frame is an expert error, never a Lua error."""

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from emucore.wire.uet import (F_AR, F_M, F_RETX, CtrlType, NackCode, PdsType, RetCode,
                             RspOpcode, SesOpcode)
from emucore.wire.uet_codec import trim_frame
from tests.unit.test_uet_vectors import frame_of
from tests.unit.test_uet_wire import MED_HD, MED_OFF, MID, SMALL, SOM, T
from tests.unit.uet_vectors import VECTORS

LUA = Path(__file__).resolve().parents[2] / "wireshark" / "uet.lua"
pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="needs tshark (Debian package tshark; setup.sh installs it)")

FIELDS = ["emu_uet." + n for n in (
    "pds.type", "pds.nh", "pds.flags", "pds.flags.syn", "pds.flags.m", "pds.flags.retx",
    "pds.psn", "pds.spdcid", "pds.dpdcid", "pds.psn_offset", "pds.start_psn",
    "pds.cack_psn", "pds.ack_psn", "pds.sack_offset", "pds.sack_bitmap",
    "pds.nscc.service_time", "pds.nscc.rcvd_bytes", "pds.nscc.ooo_count", "pds.nack_code",
    "pds.nack_payload", "ses.opcode", "ses.som", "ses.eom", "ses.hd", "ses.message_id",
    "ses.job_id", "ses.pid_on_fep", "ses.resource_index", "ses.buffer_offset",
    "ses.mem_key", "ses.header_data", "ses.payload_length", "ses.message_offset",
    "ses.request_length", "ses.rsp_opcode", "ses.return_code", "ses.mod_length", "payload",
    "ses.request_length_small", "ses.initiator", "pds.nh")]


def decode(tmp_path, frames):
    pcap = tmp_path / "emu_uet.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames])
    cmd = ["tshark", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-T", "fields",
           "-E", "occurrence=f"] + [x for f in FIELDS for x in ("-e", f)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Lua" not in r.stderr, r.stderr
    return [dict(zip(FIELDS, line.split("\t"))) for line in r.stdout.splitlines()]


def info(tmp_path, frames):
    pcap = tmp_path / "info.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames])
    r = subprocess.run(["tshark", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-T", "fields",
                        "-e", "_ws.col.Info", "-e", "_ws.expert.message"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Lua" not in r.stderr, r.stderr
    return r.stdout.splitlines()


def test_request_fields(tmp_path):
    syn, mid = decode(tmp_path, [T.request(50000, 100, 3, None, F_AR, SOM, b"\x01" * 64,
                                           psn_offset=4),
                                 T.request(50001, 101, 3, 9, F_RETX, MID, b"\x02" * 64)])
    assert (syn["emu_uet.pds.type"], syn["emu_uet.pds.psn"], syn["emu_uet.pds.spdcid"]) == (
        str(int(PdsType.RUD_REQ)), "100", "3")
    assert syn["emu_uet.pds.flags.syn"] == "1" and syn["emu_uet.pds.dpdcid"] == ""
    assert (syn["emu_uet.pds.psn_offset"], syn["emu_uet.pds.start_psn"]) == ("4", "96")
    assert (syn["emu_uet.ses.opcode"], syn["emu_uet.ses.som"], syn["emu_uet.ses.hd"]) == (
        str(int(SesOpcode.WRITE)), "1", "1")
    assert int(syn["emu_uet.ses.header_data"], 16) == SOM.header_data
    assert (syn["emu_uet.ses.message_id"], syn["emu_uet.ses.job_id"], syn["emu_uet.ses.pid_on_fep"],
            syn["emu_uet.ses.resource_index"]) == ("7", str(0xABCDE), str(0x123), str(0x456))
    assert int(syn["emu_uet.ses.buffer_offset"], 16) == SOM.buffer_offset
    assert int(syn["emu_uet.ses.mem_key"], 16) == SOM.mem_key
    assert syn["emu_uet.ses.request_length"] == "12288" and len(syn["emu_uet.payload"]) == 2 * 64
    assert mid["emu_uet.pds.dpdcid"] == "9" and mid["emu_uet.pds.flags.retx"] == "1"
    assert (mid["emu_uet.ses.som"], mid["emu_uet.ses.eom"], mid["emu_uet.ses.payload_length"],
            mid["emu_uet.ses.message_offset"]) == ("0", "1", "4096", "8192")


def test_ack_and_nack_fields(tmp_path):
    ack, nack = decode(tmp_path, [
        T.ack(61000, 1000, 3, 9, 3, F_M, sack_offset=1, sack_bitmap=0x8000_0000_0000_0005,
              service_time=12, rcvd_bytes=0x123456, ooo_count=2,
              rsp=(RspOpcode.RESPONSE, RetCode.OK, 7, 0xABCDE, 12288)),
        T.nack(61000, NackCode.TRIMMED_LASTHOP, 102, 9, 3, payload=103)])
    assert (ack["emu_uet.pds.type"], ack["emu_uet.pds.cack_psn"], ack["emu_uet.pds.ack_psn"]) == (
        str(int(PdsType.ACK_CC)), "1000", "1003")
    assert ack["emu_uet.pds.flags.m"] == "1" and ack["emu_uet.pds.sack_offset"] == "1"
    assert int(ack["emu_uet.pds.sack_bitmap"], 16) == 0x8000_0000_0000_0005
    assert (ack["emu_uet.pds.nscc.service_time"], ack["emu_uet.pds.nscc.rcvd_bytes"],
            ack["emu_uet.pds.nscc.ooo_count"]) == ("12", str(0x123456), "2")
    assert (ack["emu_uet.ses.rsp_opcode"], ack["emu_uet.ses.return_code"],
            ack["emu_uet.ses.message_id"],
            ack["emu_uet.ses.mod_length"]) == ("1", "0x01", "7", "12288")
    assert (nack["emu_uet.pds.type"], nack["emu_uet.pds.nack_code"], nack["emu_uet.pds.psn"],
            nack["emu_uet.pds.nack_payload"]) == (str(int(PdsType.NACK)), "0x02", "102", "103")


def test_trimmed_frame_keeps_its_headers_for_the_dissector(tmp_path):
    (cut,) = decode(tmp_path, [trim_frame(T.request(50000, 102, 3, 9, 0, MID, b"\x03" * 4096),
                                          64, dscp=11)])
    assert cut["emu_uet.pds.psn"] == "102" and cut["emu_uet.ses.payload_length"] == "4096"
    assert len(cut["emu_uet.payload"]) == 2 * 8


def test_info_column_and_a_cut_frame_is_an_expert_error(tmp_path):
    lines = info(tmp_path, [T.request(50000, 100, 3, None, F_AR, SOM, b"\x01" * 64),
                            T.nack(61000, NackCode.TRIMMED, 102, 9, 3, payload=103),
                            T.request(50000, 103, 3, 9, 0, MID, b"\x03" * 64)[:60]])
    assert lines[0].startswith("RUD_REQ psn=100 SYN,AR | SES WRITE som,hd msg=7 len=12288")
    assert lines[1].startswith("NACK TRIMMED psn=102")
    assert "UET headers need 56 bytes" in lines[2]


def test_small_and_medium_request_fields(tmp_path):
    small, med_hd, med = decode(tmp_path, [T.request(50000, 5, 3, 4, F_AR, s, b"\x03" * 8)
                                           for s in (SMALL, MED_HD, MED_OFF)])
    for row, ses in ((small, SMALL), (med_hd, MED_HD), (med, MED_OFF)):
        assert row["emu_uet.pds.nh"] == str(int(ses.hdr))
        assert (row["emu_uet.ses.opcode"], row["emu_uet.ses.som"], row["emu_uet.ses.eom"]) == (
            str(int(ses.opcode)), "1", "1")
        assert row["emu_uet.ses.request_length_small"] == str(ses.request_length)
        assert (row["emu_uet.ses.job_id"], row["emu_uet.ses.pid_on_fep"],
                row["emu_uet.ses.resource_index"]) == (str(0xABCDE), str(0x123), str(0x456))
        assert row["emu_uet.ses.message_id"] == "" and len(row["emu_uet.payload"]) == 2 * 8
    assert int(small["emu_uet.ses.buffer_offset"], 16) == 0 and small["emu_uet.ses.mem_key"] == ""
    assert int(med_hd["emu_uet.ses.header_data"], 16) == 0xDEADBEEF
    assert med_hd["emu_uet.ses.buffer_offset"] == "" and med_hd["emu_uet.ses.hd"] == "1"
    assert int(med["emu_uet.ses.buffer_offset"], 16) == 0x7000
    assert int(med["emu_uet.ses.mem_key"], 16) == 0xFEEDF00D
    assert med["emu_uet.ses.initiator"] in ("5", "0x00000005")
    assert any("SEND" in line and "len=1000" in line
               for line in info(tmp_path, [T.request(50000, 5, 3, 4, 0, SMALL, b"")]))


def test_negotiation_epsn_and_the_reserved_nack_code_are_named(tmp_path):
    by_name = {v.name: v for v in VECTORS}
    lines = info(tmp_path, [frame_of(by_name["ctrl_negotiation"]),
                            frame_of(by_name["ack_epsn"]),
                            T.nack(61000, NackCode.TRIMMED_ACK, 5, 9, 3)])
    assert lines[0].startswith("CTRL NEGOTIATION AR,ISROD")
    assert lines[1].startswith("ACK cack=100 EPSN")
    assert lines[2].startswith("NACK TRIMMED_ACK (reserved from 1.0.3) psn=5")


def test_every_code_the_codec_names_the_dissector_names_alike(tmp_path):
    """SES return codes (RC_TOO_LONG 0x22 among them), NACK codes and control types: the
    Info column shows the codec's name for each (one table, not two that drift)."""
    ctrl = frame_of({v.name: v for v in VECTORS}["ctrl_negotiation"])
    ctrls = [ctrl[:42] + bytes([11 << 3 | c >> 1, (c & 1) << 7 | 0x28]) + ctrl[44:]
             for c in CtrlType]
    rets = [T.ack(61000, 1000, 3, 9, 3, 0, rsp=(RspOpcode.RESPONSE, rc, 7, 0xABCDE, 0))
            for rc in RetCode]
    nacks = [T.nack(61000, code, 5, 9, 3) for code in NackCode]
    lines = info(tmp_path, ctrls + rets + nacks)
    names = ([f"CTRL {c.name} " for c in CtrlType] +
             [f"SES RESPONSE {rc.name} msg=7" for rc in RetCode] +
             [f"NACK {code.name} " for code in NackCode])
    assert len(lines) == len(names)
    for line, name in zip(lines, names):
        assert name in line, (name, line)
