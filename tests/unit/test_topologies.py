"""Topology generator, presets and YAML validation (no root)."""

import ipaddress

import pytest

import topologies
from topologies import TopologyError
from topologies.rail import RailSpec, build_rail


def test_rail2x4_is_figure_12_4():
    f = topologies.load("rail2x4")
    c = f.counts()
    assert (c["hosts"], c["gpus"], c["rails"], c["spines"]) == (4, 8, 2, 2)
    # 8 host-rail + 4 rail-spine + 4 frontend
    assert (c["links"], c["fabric_links"]) == (16, 12)
    # 8 NIC + 8 p2p + 4 frontend + 2 SVI addresses
    assert c["addresses"] == 22
    assert [g.name for g in f.gpu_list()] == ["h1g1", "h2g1", "h3g1", "h4g1",
                                              "h1g2", "h2g2", "h3g2", "h4g2"]
    g = f.gpus["h4g2"]
    assert (g.host, g.rail, g.nic, g.ip, g.gateway) == ("h4", 2, "nic2", "10.0.2.14", "10.0.2.1")
    assert [v.ip for v in f.nodes["rail1"].svis] == ["10.0.1.1/24"]


def test_rail8x4_counts():
    c = topologies.load("rail8x4").counts()
    assert (c["hosts"], c["gpus"], c["rails"], c["spines"]) == (4, 32, 8, 2)
    assert c["fabric_links"] == 32 + 16
    assert c["addresses"] == 32 + 32 + 4 + 8


def test_generator_any_size_and_spines():
    f = topologies.load("rail4x3", spines=3)
    c = f.counts()
    assert (c["gpus"], c["rails"], c["spines"], c["fabric_links"]) == (12, 4, 3, 12 + 12)


def test_every_gpu_on_its_rail_and_subnet():
    f = topologies.load("rail8x4")
    for g in f.gpus.values():
        net = ipaddress.ip_network(f"10.0.{g.rail}.0/24")
        assert ipaddress.ip_address(g.ip) in net
        peer = f.peer(g.host, g.nic)
        assert peer.node == f"rail{g.rail}"


def test_p2p_links_are_slash31_pairs():
    f = topologies.load("rail2x4")
    for lk in f.links:
        if lk.kind == "rail-spine":
            a = ipaddress.ip_interface(lk.a.ip)
            b = ipaddress.ip_interface(lk.b.ip)
            assert a.network == b.network and a.network.prefixlen == 31 and a != b


def test_routes_ecmp_across_spines():
    f = topologies.load("rail2x4")
    r1 = f.routes("rail1")
    assert [r.prefix for r in r1] == ["10.0.2.0/24"]
    assert len(r1[0].nexthops) == 2
    assert {dev for _, dev in r1[0].nexthops} == {"eth5", "eth6"}
    sp = {r.prefix: r.nexthops for r in f.routes("spine2")}
    assert sp == {"10.0.1.0/24": (("172.16.2.0", "eth1"),), "10.0.2.0/24": (("172.16.2.2", "eth2"),)}


def test_rail_only_has_no_cross_rail_routes():
    f = topologies.load("railonly2x4")
    assert f.counts()["spines"] == 0
    assert f.routes("rail1") == []


def test_uplinks_non_blocking_in_rail2x4():
    f = topologies.load("rail2x4")
    down = sum(lk.model_bps for lk in f.links if lk.kind == "host-rail" and lk.b.node == "rail1")
    up = sum(lk.model_bps for lk in f.links if lk.kind == "rail-spine" and lk.a.node == "rail1")
    assert down == up == 800e9


def test_macs_unique():
    f = topologies.load("rail8x4")
    macs = [p.mac for p in f.ports.values() if p.vlan is None]
    assert len(macs) == len(set(macs))


@pytest.mark.parametrize("data, field", [
    ({"hosts": 0}, "hosts"),
    ({"hosts": "four"}, "hosts"),
    ({"gpus_per_host": 65}, "gpus_per_host"),
    ({"spines": -1}, "spines"),
    ({"host_link": "fast"}, "host_link"),
    ({"uplink": "-400G"}, "uplink"),
    ({"delay": "soon"}, "delay"),
    ({"tdf": 0}, "tdf"),
    ({"mtu": 100000}, "mtu"),
    ({"rail_subnet": "10.0.0.0/24"}, "rail_subnet"),
    ({"rail_subnet": "10.0.{rail}.0/29"}, "rail_subnet"),
    ({"ecmp_seed": "random"}, "ecmp_seed"),
    ({"gpus_per_host": 3, "rails_per_switch": 2}, "rails_per_switch"),
    ({"rails_per_switch": 0}, "rails_per_switch"),
    ({"colour": "blue"}, "colour"),
    ({"kind": "torus"}, "kind"),
])
def test_bad_input_names_field(data, field):
    with pytest.raises(TopologyError) as e:
        topologies.from_dict({"hosts": 4, **data} if "hosts" not in data else data)
    assert field in str(e.value)


def test_unknown_topology_name():
    with pytest.raises(TopologyError, match="unknown topology 'fattree'"):
        topologies.load("fattree")


def test_yaml_file(tmp_path):
    p = tmp_path / "lab.yaml"
    p.write_text("kind: rail\nname: lab\ngpus_per_host: 4\nhosts: 2\nspines: 1\n"
                 "host_link: 100G\nuplink: 400G\ntdf: 500\n")
    f = topologies.load(str(p))
    assert f.name == "lab" and f.tdf == 500 and f.counts()["gpus"] == 8
    assert {lk.model_bps for lk in f.links if lk.kind == "host-rail"} == {100e9}


def test_yaml_bad_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("hosts: [1, 2\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        topologies.load(str(p))
    with pytest.raises(TopologyError, match="does not exist"):
        topologies.load(str(tmp_path / "missing.yaml"))


def test_ecmp_seed_modes():
    per = build_rail(RailSpec())
    same = build_rail(RailSpec(ecmp_seed="same"))
    assert per.nodes["rail1"].ecmp_seed != per.nodes["rail2"].ecmp_seed
    assert same.nodes["rail1"].ecmp_seed == same.nodes["rail2"].ecmp_seed == 0


def test_describe_mentions_tdf_and_speeds():
    text = topologies.load("rail2x4").describe()
    assert "TDF 5000" in text and "200 Gbps / 40 Mbps" in text and "[ECMP]" in text


def test_presets_listed():
    p = topologies.presets()
    assert {"rail2x4", "rail8x4", "railonly2x4"} <= set(p)
    assert all(p.values())


def test_two_rails_per_switch_fig_13_11():
    f = topologies.from_dict({"gpus_per_host": 4, "hosts": 3, "rails_per_switch": 2})
    c = f.counts()
    assert (c["rails"], c["rail_switches"], c["gpus"]) == (4, 2, 12)
    sw = f.nodes["rsw1"]
    assert [(v.ifname, v.ip) for v in sw.svis] == [("vlan101", "10.0.1.1/24"), ("vlan102", "10.0.2.1/24")]
    # rails 1-2 on rsw1 ports 1-3 and 4-6, uplinks after
    assert f.peer("h3", "nic2") == f.ports[("rsw1", "eth6")]
    assert f.ports[("rsw1", "eth6")].vlan == 102
    assert {p.ifname for p in f.node_ports("rsw1") if p.ip} == {"eth7", "eth8"}
    assert [r.prefix for r in f.routes("rsw1")] == ["10.0.3.0/24", "10.0.4.0/24"]
    assert {r.prefix for r in f.routes("spine1")} == {f"10.0.{i}.0/24" for i in range(1, 5)}
    tables = f.l2_tables("rsw1")
    assert set(tables) == {"vlan101", "vlan102"} and len(tables["vlan102"]) == 3
    assert f.switch_of_rail(2) == "rsw1" and f.switch_of_rail(3) == "rsw2"
