"""Load balancing in namespaces (root), book ch.12 Figs 12-6/12-7: Rail-1 sprays one QP
per packet over both spines; with WRITE ONLY nothing is NAKed or resent and the agent's
path accounting sees the flow on both uplinks."""

import pytest

import topologies
from emu.realise.net import FabricNet
from emucore.lbconfig import LoadBalance
from emucore.qos.qosconfig import QosConfig
from traffic.workloads import rdma

pytestmark = pytest.mark.netns
MB = 1 << 20


@pytest.fixture(scope="module")
def fnet():
    with FabricNet(topologies.load("rail2x4", tdf=5000), qos=QosConfig(),
                   lb={"rail1": LoadBalance(mode="spray")}) as f:
        assert f.wait_pfc() == {}
        f.start_nics(gpus=["h1g1", "h4g2"])
        yield f


def uplink_bytes(fnet):
    ports = fnet.counters("rail1")["ports"]
    return ports["eth5"]["tx_bytes"], ports["eth6"]["tx_bytes"]


def test_write_only_spray_spreads_one_qp_over_both_spines_without_retransmits(fnet):
    before = uplink_bytes(fnet)
    r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 4 * MB, write_only=True)
    after = uplink_bytes(fnet)
    assert r["status"] == "SUCCESS" and r["byte_exact"]
    assert r["retransmits"] == 0 and r["naks_rx"] == 0
    d5, d6 = after[0] - before[0], after[1] - before[1]
    assert d5 + d6 > 4 * MB and abs(d5 - d6) / (d5 + d6) < 0.02, (d5, d6)
    lb = fnet.counters("rail1")["lb"]
    assert lb["mode"] == "spray"
    roce = [p for p in lb["paths"] if p["flow"].startswith("10.0.1.11:")
            and p["flow"].endswith(">10.0.2.14:4791/udp")]
    assert sorted(p["port"] for p in roce) == ["eth5", "eth6"]
    assert all(p["bytes"] > 2 * MB * 0.95 for p in roce), roce
