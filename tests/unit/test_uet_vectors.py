"""emu's three UET implementations held against hand-written bytes (issue 32): the Scapy
layers (emucore/wire/uet.py) build and read every vector of tests/unit/uet_vectors.py,
the codec (emucore/wire/uet_codec.py) builds the ones emu sends (requests, ACK_CC, NACK)
and parses them all, and the Lua dissector (wireshark/uet.lua via tshark) decodes them
all to the vector's values."""

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from emucore.wire import uet
from emucore.wire.uet import F_SYN, NextHdr, PdsType
from emucore.wire.uet_codec import SesReq, parse
from tests.unit.test_uet_wire import IPS, MACS, T
from tests.unit.uet_vectors import VECTORS

LUA = Path(__file__).resolve().parents[2] / "wireshark" / "uet.lua"
IDS = [v.name for v in VECTORS]
PDS_CLASS = {PdsType.RUD_REQ: uet.PDSRequest, PdsType.ROD_REQ: uet.PDSRequest,
             PdsType.ACK: uet.PDSAck, PdsType.ACK_CC: uet.PDSAck, PdsType.NACK: uet.PDSNack,
             PdsType.CTRL: uet.PDSControl}


def scapy_layers(v):
    pkt = PDS_CLASS[v.pds["type"]](**v.pds)
    return pkt / getattr(uet, v.ses_layer)(**v.ses) if v.ses_layer else pkt


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_vector_spells_the_sizes_of_its_sources(v):
    assert len(v.data) == v.size


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_scapy_builds_and_reads_the_vector(v):
    assert bytes(scapy_layers(v)) == v.data
    pds = uet.UETPds(v.data)
    assert {k: getattr(pds, k) for k in v.pds} == v.pds
    if v.ses_layer:
        ses = pds[getattr(uet, v.ses_layer)]
        assert {k: getattr(ses, k) for k in v.ses} == v.ses
        assert not ses.payload


def ses_req(v) -> SesReq | None:
    s = v.ses
    if v.ses_layer not in ("SESStandard", "SESMedium", "SESSmall"):
        return None
    hdr = {"SESStandard": NextHdr.REQ_STD, "SESMedium": NextHdr.REQ_MEDIUM,
           "SESSmall": NextHdr.REQ_SMALL}[v.ses_layer]
    return SesReq(s["opcode"], s["ses_flags"], s.get("message_id", 0), s["job_id"],
                  s["pid_on_fep"], s["resource_index"], s.get("buffer_offset", 0),
                  s.get("mem_key", 0), s["request_length"], s.get("header_data", 0),
                  s.get("payload_length", 0), s.get("message_offset", 0),
                  s.get("initiator", 0), s["index_generation"], hdr)


def rsp(v):
    s = v.ses
    if v.ses_layer != "SESResponse":
        return None
    return (s["rsp_opcode"], s["return_code"], s["message_id"], s["job_id"], s["mod_length"])


def codec_frame(v) -> bytes | None:
    """The frame emu's codec builds for the vector's values; None: emu sends no such."""
    p = v.pds
    if p["type"] in (PdsType.RUD_REQ, PdsType.ROD_REQ):
        syn = bool(p["flags"] & F_SYN)
        return T.request(50000, p["psn"], p["spdcid"], None if syn else p["dpdcid"],
                         p["flags"] & ~F_SYN, ses_req(v), rod=p["type"] == PdsType.ROD_REQ,
                         psn_offset=p.get("psn_offset", 0),
                         clear_psn_offset=p["clear_psn_offset"])
    if p["type"] == PdsType.ACK_CC:
        return T.ack(61000, p["cack_psn"], p["ack_psn_offset"], p["spdcid"], p["dpdcid"],
                     p["flags"], p["sack_offset"], p["sack_bitmap"], p["service_time"],
                     p["rcvd_bytes"], p["ooo_count"], rsp(v), mpr=p["mpr"])
    if p["type"] == PdsType.NACK:
        return T.nack(61000, p["nack_code"], p["nack_psn"], p["spdcid"], p["dpdcid"],
                      p["nack_payload"], p["flags"])
    return None


#: Scapy field name -> what the codec's parse calls it (None: the codec does not read it;
#: every such field is 0 in the vectors)
CODEC_NAME = {"type": "pds_type", "nack_psn": "psn", "ctrl_payload": "nack_payload",
              "use_rsv": None, "pdc_rsv": None, "cc_type": None, "cc_flags": None,
              "restore_cwnd": None, "rcv_cwnd_pend": None, "vendor_code": None,
              "probe_opaque": None}


def frame_of(v) -> bytes:
    return bytes(uet.scapy_frame(*MACS, *IPS, 50000, Raw(v.data)))


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_codec_builds_and_parses_the_vector(v):
    built = codec_frame(v)
    if built is not None:
        assert built[42:] == v.data
    f = parse(frame_of(v))
    assert f is not None and f.payload.nbytes == 0
    got = {k: getattr(f, CODEC_NAME.get(k, k)) for k in v.pds if CODEC_NAME.get(k, k)}
    assert got == {k: x for k, x in v.pds.items() if CODEC_NAME.get(k, k)}
    if v.pds["flags"] & F_SYN:
        assert f.dpdcid is None
    assert f.ses == ses_req(v) and f.rsp == rsp(v)


#: Scapy field name -> the Lua dissector's field (emu_uet.<name>)
LUA_NAME = {
    "type": "pds.type", "nh": "pds.nh", "flags": "pds.flags",
    "clear_psn_offset": "pds.clear_psn_offset", "psn": "pds.psn", "spdcid": "pds.spdcid",
    "dpdcid": "pds.dpdcid", "use_rsv": "pds.use_rsv", "psn_offset": "pds.psn_offset",
    "ack_psn_offset": "pds.ack_psn_offset", "cack_psn": "pds.cack_psn",
    "cc_type": "pds.cc_type", "mpr": "pds.mpr", "sack_offset": "pds.sack_offset",
    "sack_bitmap": "pds.sack_bitmap", "service_time": "pds.nscc.service_time",
    "restore_cwnd": "pds.nscc.restore_cwnd", "rcv_cwnd_pend": "pds.nscc.rcv_cwnd_pend",
    "rcvd_bytes": "pds.nscc.rcvd_bytes", "ooo_count": "pds.nscc.ooo_count",
    "epsn_payload": "pds.epsn_payload", "nack_code": "pds.nack_code",
    "vendor_code": "pds.nack_vendor_code", "nack_psn": "pds.psn",
    "nack_payload": "pds.nack_payload", "probe_opaque": "pds.probe_opaque",
    "ctrl_payload": "pds.ctrl_payload", "opcode": "ses.opcode", "ses_flags": "ses.flags",
    "message_id": "ses.message_id", "index_generation": "ses.index_generation",
    "job_id": "ses.job_id", "pid_on_fep": "ses.pid_on_fep",
    "resource_index": "ses.resource_index", "buffer_offset": "ses.buffer_offset",
    "initiator": "ses.initiator", "mem_key": "ses.mem_key", "header_data": "ses.header_data",
    "payload_length": "ses.payload_length", "message_offset": "ses.message_offset",
    "request_length": "ses.request_length", "list": "ses.rsp_list",
    "rsp_opcode": "ses.rsp_opcode", "return_code": "ses.return_code",
    "mod_length": "ses.mod_length"}
#: fields the dissector does not show separately (reserved bits, CC flags): 0 in the vectors
LUA_SKIP = {"pdc_rsv", "cc_flags"}


def lua_name(v, key: str) -> str:
    if key == "nh" and v.pds["type"] == PdsType.CTRL:
        return "emu_uet.pds.ctl_type"
    if key == "request_length" and v.ses_layer in ("SESMedium", "SESSmall"):
        return "emu_uet.ses.request_length_small"
    return "emu_uet." + LUA_NAME[key]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (setup.sh installs it)")
def test_lua_dissector_decodes_every_vector(tmp_path):
    pcap = tmp_path / "vectors.pcap"
    wrpcap(str(pcap), [Ether(frame_of(v)) for v in VECTORS])
    wanted = sorted({lua_name(v, k) for v in VECTORS for d in (v.pds, v.ses) for k in d
                     if k not in LUA_SKIP} | {"emu_uet.payload"})
    r = subprocess.run(["tshark", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-T", "fields",
                        "-E", "occurrence=f"] + [x for w in wanted for x in ("-e", w)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Lua" not in r.stderr, r.stderr
    rows = [dict(zip(wanted, line.split("\t"))) for line in r.stdout.splitlines()]
    assert len(rows) == len(VECTORS)
    for v, row in zip(VECTORS, rows):
        values = {**v.pds, **v.ses}
        got = {k: int(row[lua_name(v, k)], 0) for k in values if k not in LUA_SKIP}
        assert got == {k: x for k, x in values.items() if k not in LUA_SKIP}, v.name
        assert row["emu_uet.payload"] == "", v.name
