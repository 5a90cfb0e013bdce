"""UET in namespaces (root, issue 16): the NICs speak Ultra Ethernet over UDP 4793; the
switches' ordinary flow ECMP spreads one message over both spines because every packet
carries its own entropy value, and a congested egress trims instead of queueing; the
receiver NACKs the trimmed packets and the senders resend them - every byte arrives."""

import pytest

import topologies
from emu.net import FabricNet
from fabric.qos.config import QosConfig
from fabric.qos.trim import Trim
from traffic.workloads import rdma

pytestmark = pytest.mark.netns
MB = 1 << 20
TRIM = Trim(threshold_bytes=20_000)


@pytest.fixture(scope="module")
def fnet():
    with FabricNet(topologies.load("rail2x4", tdf=5000), qos=QosConfig(trim=TRIM)) as f:
        assert f.wait_pfc() == {}
        f.start_nics(gpus=["h1g1", "h2g1", "h3g1", "h4g1", "h4g2"], transport="uet",
                     uet={"trimming": True}, trimmed_dscps=(TRIM.trimmed_dscp, TRIM.lasthop_dscp))
        yield f


def uplink_bytes(fnet):
    ports = fnet.counters("rail1")["ports"]
    return ports["eth5"]["tx_bytes"], ports["eth6"]["tx_bytes"]


def test_one_uet_write_is_byte_exact_and_spread_over_both_spines(fnet):
    before = uplink_bytes(fnet)
    r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 4 * MB)
    after = uplink_bytes(fnet)
    assert r["status"] == "SUCCESS" and r["byte_exact"] and r["recv_imm"] is not None
    d5, d6 = after[0] - before[0], after[1] - before[1]
    assert d5 + d6 > 4 * MB and min(d5, d6) > 0.3 * (d5 + d6), (d5, d6)  # ~1:1 by EV
    assert r["timeouts"] == 0, r


def test_an_incast_is_trimmed_nacked_resent_and_byte_exact(fnet):
    port = next(p for p, c in fnet.counters("rail1")["ports"].items()
                if c["peer"].startswith("h4:"))  # rail1's port to h4 (its nic1: h4g1)
    before = fnet.counters("rail1")["ports"][port]["trimmed"]
    r = rdma.incast(fnet.fabric, fnet.nic_sockets, "h4g1", ["h1g1", "h2g1", "h3g1"], 2 * MB)
    assert set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values()), r
    trimmed = fnet.counters("rail1")["ports"][port]["trimmed"] - before
    assert trimmed > 0
    assert sum(r["retransmits"].values()) >= trimmed  # each cut packet NACKed and resent
