"""A link between two servers as emu builds it (issue 17, emu.realise.tunnel): two "servers" are
network namespaces joined by a veth underlay (MTU 9300); each end of the link is a VXLAN
device created in its server's namespace and moved into a node's namespace - no bridge
anywhere. A PFC frame, an LLDPDU with DCBX TLVs and a 9230-byte frame (the fabric's 9216
MTU) sent by one node arrive at the other byte for byte, and tshark decodes them there
as PFC and LLDP; a frame one byte past the MTU does not pass."""

import socket
import subprocess
import shutil
import time

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from emu.realise import nsutil
from emu.realise.netlink import vxlan_link
from emu.realise.tunnel import VXLAN_OVERHEAD
from emucore.qos.qosconfig import QosConfig
from emucore.wire.ether import mac_bytes
from emucore.qos.dcbx import build_lldp_frame
from emucore.wire.pause import pause_frame
from traffic.tools.rawgen import build_frame

pytestmark = pytest.mark.netns

MTU = 9216
UNDERLAY_MTU = MTU + VXLAN_OVERHEAD + 34   # 9300, the servers file's default
MAC_A, MAC_B = "02:00:00:00:aa:01", "02:00:00:00:bb:01"


@pytest.fixture
def link():
    from pyroute2 import IPRoute

    tag = nsutil.new_tag()
    names = {k: nsutil.ns_name(tag, k) for k in ("srva", "srvb", "nodea", "nodeb")}
    try:
        for n in names.values():
            subprocess.run(["ip", "netns", "add", n], check=True)
        # the underlay: a veth between the two servers
        with nsutil.in_netns(names["srva"]), IPRoute() as ipr:
            ipr.link("add", ifname="u0", kind="veth", peer={"ifname": "u0",
                                                            "net_ns_fd": names["srvb"]})
        for srv, ip, remote, node, mac in (("srva", "10.99.0.1", "10.99.0.2", "nodea", MAC_A),
                                           ("srvb", "10.99.0.2", "10.99.0.1", "nodeb", MAC_B)):
            with nsutil.in_netns(names[srv]), IPRoute() as ipr:
                u = ipr.link_lookup(ifname="u0")[0]
                ipr.link("set", index=u, mtu=UNDERLAY_MTU, state="up")
                ipr.addr("add", index=u, address=ip, prefixlen=30)
                idx = vxlan_link(ipr, "eth9", 4242, ip, remote, "u0", MTU, mac)
                ipr.link("set", index=idx, net_ns_fd=names[node])
            with nsutil.in_netns(names[node]), IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname="eth9")[0], state="up")
        yield names
    finally:
        for n in names.values():
            nsutil.remove(n)


def raw(ns: str) -> socket.socket:
    with nsutil.in_netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        s.bind(("eth9", 0))
    return s


def test_pfc_lldp_and_jumbo_frames_cross_unchanged(link, tmp_path):
    a, b = raw(link["nodea"]), raw(link["nodeb"])
    b.settimeout(0.2)
    src = mac_bytes(MAC_A)
    frames = [pause_frame(src, 3, 0xFFFF),
              build_lldp_frame(MAC_A, MAC_A, "eth9", "rail1", QosConfig()),
              bytes(build_frame(src, mac_bytes(MAC_B), "10.0.1.11", "10.0.2.14", MTU + 14,
                                sport=50000, dport=4791, dscp=24, ecn=2))]
    too_big = bytes(build_frame(src, mac_bytes(MAC_B), "10.0.1.11", "10.0.2.14", MTU + 15))
    time.sleep(0.2)
    for f in frames:
        a.send(f)
    try:
        a.send(too_big)
    except OSError:
        pass  # refused at the sender: also "does not pass"
    got = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if len(got) == len(frames):  # then a last half second for anything else (too_big)
            deadline = min(deadline, time.monotonic() + 0.5)
        try:
            g = b.recv(65535)
        except socket.timeout:
            continue
        if g[12:14] != b"\x86\xdd":  # IPv6 router solicitations etc. are not ours
            got.append(g)
    assert [bytes(g) for g in got] == frames      # byte for byte, in order, nothing else
    a.close()
    b.close()
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    pcap = tmp_path / "far-end.pcap"
    wrpcap(str(pcap), [Ether(g) for g in got])
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "eth.dst",
                          "-e", "macc.opcode", "-e", "macc.cbfc.pause_time.c3", "-e",
                          "lldp.port.id", "-e", "ip.len", "-e", "ip.dsfield.dscp"],
                         capture_output=True, text=True, timeout=60)
    rows = [r.split("\t") for r in out.stdout.splitlines()]
    assert rows[0][:3] == ["01:80:c2:00:00:01", "0x0101", "65535"], rows[0]
    assert rows[1][0] == "01:80:c2:00:00:0e" and rows[1][3] == "eth9", rows[1]
    assert rows[2][4:] == [str(MTU), "24"], rows[2]
