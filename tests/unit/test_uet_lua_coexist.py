"""wireshark/uet.lua beside Wireshark's built-in UET dissector (issue 32). Newer Wireshark
ships `packet-uet.c`, registering the protocol "uet" / "Ultra Ethernet Transport"; the
Lua API refuses a second protocol of the same name or description, so emu's plugin
registers "emu_uet" / "Ultra Ethernet Transport (emu)". Debian 12's tshark 4.0 has no
built-in one: a Lua stub loaded first stands in for it (same name, description, field
names, UDP 4793), as the built-in's registration and handoff run before any Lua script.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from emucore.wire.uet import F_AR, NackCode
from tests.unit.test_uet_wire import SOM, T

LUA = Path(__file__).resolve().parents[2] / "wireshark" / "uet.lua"
pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="needs tshark (Debian package tshark; setup.sh installs it)")

BUILTIN = """-- stands in for Wireshark's packet-uet.c: proto_register_protocol(
-- "Ultra Ethernet Transport", "UET", "uet"), fields uet.pds.*, UDP 4793
local p = Proto("uet", "Ultra Ethernet Transport")
p.fields.type = ProtoField.uint16("uet.pds.type", "Type", base.DEC, nil, 0xF800)
p.fields.psn = ProtoField.uint32("uet.pds.psn", "PSN")
function p.dissector(buf, pinfo, tree)
  tree:add(p, buf()):add(p.fields.type, buf(0, 2))
  pinfo.cols.protocol = "UET-builtin"
  return buf:len()
end
DissectorTable.get("udp.port"):add(4793, p)
"""


def tshark(tmp_path, scripts, *args):
    pcap = tmp_path / "uet.pcap"
    wrpcap(str(pcap), [Ether(T.request(50000, 100, 3, None, F_AR, SOM, b"\x01" * 8)),
                       Ether(T.nack(61000, NackCode.TRIMMED, 102, 9, 3, payload=103))])
    cmd = ["tshark"] + [x for s in scripts for x in ("-X", f"lua_script:{s}")]
    r = subprocess.run(cmd + ["-r", str(pcap), *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def builtin(tmp_path):
    path = tmp_path / "builtin_uet.lua"
    path.write_text(BUILTIN)
    return path


def test_the_stub_collides_with_a_plugin_named_uet(tmp_path, builtin):
    """The stand-in is faithful: a plugin registering the built-in's name fails to load."""
    old = tmp_path / "old.lua"
    old.write_text('Proto("uet", "Ultra Ethernet Transport")\n')
    r = tshark(tmp_path, [builtin, old], "-T", "fields", "-e", "frame.number")
    assert "Lua: Error during loading" in r.stderr and "same description" in r.stderr


def test_emu_plugin_loads_beside_the_builtin_and_takes_port_4793(tmp_path, builtin):
    r = tshark(tmp_path, [builtin, LUA], "-Y", "emu_uet", "-T", "fields",
               "-e", "emu_uet.pds.psn", "-e", "emu_uet.pds.nack_code", "-e", "uet.pds.type",
               "-e", "_ws.col.Protocol")
    assert "Lua" not in r.stderr, r.stderr
    assert r.stdout.splitlines() == ["100\t\t\tUET", "102\t0x01\t\tUET"]


def test_the_builtin_stays_reachable_with_decode_as(tmp_path, builtin):
    r = tshark(tmp_path, [builtin, LUA], "-d", "udp.port==4793,uet", "-T", "fields",
               "-e", "emu_uet.pds.psn", "-e", "uet.pds.type", "-e", "_ws.col.Protocol")
    assert "Lua" not in r.stderr, r.stderr
    assert r.stdout.splitlines() == ["\t2\tUET-builtin", "\t10\tUET-builtin"]


def test_both_protocols_are_registered(builtin):
    r = subprocess.run(["tshark", "-G", "protocols", "-X", f"lua_script:{builtin}", "-X",
                        f"lua_script:{LUA}"], capture_output=True, text=True, timeout=120)
    names = {tuple(line.split("\t")) for line in r.stdout.splitlines()}
    assert r.returncode == 0 and "Lua" not in r.stderr, r.stderr
    assert ("Ultra Ethernet Transport", "UET", "uet") in names
    assert ("Ultra Ethernet Transport (emu)", "EMU_UET", "emu_uet") in names


def test_plain_tshark_decodes_with_emu_plugin_alone(tmp_path):
    """Debian 12's tshark 4.0 (no built-in): the plugin alone decodes the capture."""
    r = tshark(tmp_path, [LUA], "-Y", "emu_uet.pds.type == 2", "-T", "fields",
               "-e", "emu_uet.pds.psn", "-e", "emu_uet.ses.message_id", "-e", "_ws.col.Info")
    assert "Lua" not in r.stderr, r.stderr
    (line,) = r.stdout.splitlines()
    psn, mid, info = line.split("\t")
    assert (psn, mid) == ("100", "7") and info.startswith("RUD_REQ psn=100 SYN,AR")
