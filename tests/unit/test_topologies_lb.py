"""The book's other fabric designs (issue 13): per-link overrides, explicit leaf-spine
adjacency, shortest-path ECMP routes, multi-pod with super-spines, their presets; and
that the existing presets did not change (no root)."""

import hashlib
import ipaddress
import json

import pytest

import topologies
from emu.realise.netplan import NextHop, RouteEntry, plan_fabric
from emu.observe.reach import expected_hops
from emucore.timedil import parse_duration
from topologies import TopologyError
from topologies.model import ROLE_RAIL, ROLE_SPINE, ROLE_SUPER
from topologies.routing import distances, port_order

NEW_PRESETS = ("vlanrail4x3", "leafspine4x4", "leafspine4x4-rotated", "leafspine4x4-partial",
               "multipod2", "polar2x4")


# -- existing fabrics are unchanged --------------------------------------------------------

def _digest(f) -> str:
    d = {"fabric": f.to_dict(), "describe": f.describe(),
         "routes": {n: [[r.prefix, [list(h) for h in r.nexthops]] for r in f.routes(n)]
                    for n in f.nodes},
         "neighbours": {n: f.neighbours(n) for n in f.nodes},
         "l2": {n: f.l2_tables(n) for n in f.nodes}}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# computed from the code before issue 13 (to_dict, describe, routes, neighbours, L2 tables)
@pytest.mark.parametrize("name, spines, digest", [
    ("rail2x4", None, "29cfda552b28ddbc"),
    ("rail8x4", None, "e75bb6b369beebe6"),
    ("railonly2x4", None, "eb102ce685fc1a61"),
    ("dualrail4x3", None, "63d7e9e832809519"),
    ("rail4x3", 3, "c38beebf8f7692f1"),
    ("rail4x2", 1, "af614dad41ee0522"),
])
def test_existing_fabrics_unchanged(name, spines, digest):
    assert _digest(topologies.load(name, spines=spines)) == digest


def test_four_rails_per_switch_unchanged():
    f = topologies.from_dict({"gpus_per_host": 8, "hosts": 3, "rails_per_switch": 4, "spines": 3})
    assert _digest(f) == "d535aa08c250deb6"


RAIL2X4_LINKS = [  # (a, a mac, a ip, b, b mac, b ip, vlan of b, model bps, kind)
    *[(f"h{h}:nic{r}", f"02:00:00:00:0{h}:0{r}", f"10.0.{r}.1{h}/24", f"rail{r}:eth{h}",
       f"02:00:00:00:0{4 + r}:00", None, 100 + r, 200e9, "host-rail")
      for r in (1, 2) for h in range(1, 5)],
    ("rail1:eth5", "02:00:00:00:05:05", "172.16.1.0/31", "spine1:eth1", "02:00:00:00:07:01",
     "172.16.1.1/31", None, 400e9, "rail-spine"),
    ("rail2:eth5", "02:00:00:00:06:05", "172.16.1.2/31", "spine1:eth2", "02:00:00:00:07:02",
     "172.16.1.3/31", None, 400e9, "rail-spine"),
    ("rail1:eth6", "02:00:00:00:05:06", "172.16.2.0/31", "spine2:eth1", "02:00:00:00:08:01",
     "172.16.2.1/31", None, 400e9, "rail-spine"),
    ("rail2:eth6", "02:00:00:00:06:06", "172.16.2.2/31", "spine2:eth2", "02:00:00:00:08:02",
     "172.16.2.3/31", None, 400e9, "rail-spine"),
    *[(f"h{h}:fe0", f"02:00:00:00:0{h}:fe", f"192.168.10.10{h}/24", f"fe:eth{h}",
       f"02:00:00:00:09:0{h}", None, None, 100e9, "frontend") for h in range(1, 5)],
]


def test_rail2x4_links_in_order():
    f = topologies.load("rail2x4")
    got = [(f"{lk.a.node}:{lk.a.ifname}", lk.a.mac, lk.a.ip, f"{lk.b.node}:{lk.b.ifname}",
            lk.b.mac, lk.b.ip, lk.b.vlan, lk.model_bps, lk.kind) for lk in f.links]
    assert got == RAIL2X4_LINKS
    assert {lk.delay_s for lk in f.links} == {1e-6, 0.0}


def test_rail2x4_routes():
    f = topologies.load("rail2x4")
    assert {n: [(r.prefix, r.nexthops) for r in f.routes(n)] for n in f.nodes} == {
        "h1": [], "h2": [], "h3": [], "h4": [], "fe": [],
        "rail1": [("10.0.2.0/24", (("172.16.1.1", "eth5"), ("172.16.2.1", "eth6")))],
        "rail2": [("10.0.1.0/24", (("172.16.1.3", "eth5"), ("172.16.2.3", "eth6")))],
        "spine1": [("10.0.1.0/24", (("172.16.1.0", "eth1"),)),
                   ("10.0.2.0/24", (("172.16.1.2", "eth2"),))],
        "spine2": [("10.0.1.0/24", (("172.16.2.0", "eth1"),)),
                   ("10.0.2.0/24", (("172.16.2.2", "eth2"),))],
    }


def test_full_mesh_in_default_order_is_the_default():
    base = topologies.load("rail2x4")
    adj = topologies.from_dict({**topologies.spec_of("rail2x4"),
                                "adjacency": {"rail1": ["spine1", "spine2"],
                                              "rail2": ["spine1", "spine2"]}})
    assert adj.to_dict() == base.to_dict()


# -- the new presets -------------------------------------------------------------------------

@pytest.mark.parametrize("name, counts", [
    # hosts, gpus, switches, rails, rail_switches, spines, super_spines, pods, links,
    # fabric_links, addresses (NICs + /31 ends + frontend + SVIs)
    ("vlanrail4x3", (3, 12, 1, 4, 1, 0, 0, 1, 12 + 3, 12, 12 + 0 + 3 + 4)),
    ("leafspine4x4", (4, 16, 8, 4, 4, 4, 0, 1, 16 + 16 + 4, 32, 16 + 32 + 4 + 4)),
    ("leafspine4x4-rotated", (4, 16, 8, 4, 4, 4, 0, 1, 16 + 16 + 4, 32, 16 + 32 + 4 + 4)),
    ("leafspine4x4-partial", (4, 16, 8, 4, 4, 4, 0, 1, 16 + 12 + 4, 28, 16 + 24 + 4 + 4)),
    # 8 host links + 2 pods x 4 rail-spine + 4 spines x 2 super-spines + 4 frontend
    ("multipod2", (4, 8, 10, 4, 4, 4, 2, 2, 8 + 8 + 8 + 4, 24, 8 + 32 + 4 + 4)),
    ("polar2x4", (4, 8, 4, 2, 2, 2, 0, 1, 16, 12, 22)),
])
def test_preset_counts(name, counts):
    c = topologies.load(name).counts()
    keys = ("hosts", "gpus", "switches", "rails", "rail_switches", "spines", "super_spines",
            "pods", "links", "fabric_links", "addresses")
    assert tuple(c[k] for k in keys) == counts


@pytest.mark.parametrize("name, figure", [
    ("vlanrail4x3", "Figure 13-4"), ("leafspine4x4", "Figure 13-8"),
    ("multipod2", "Figure 13-9"), ("polar2x4", "Figure 10-5"),
])
def test_presets_listed_with_their_figure(name, figure):
    assert figure in topologies.presets()[name]


def test_new_presets_plan_without_error():
    for name in NEW_PRESETS:
        f = topologies.load(name)
        plans = plan_fabric(f)
        assert set(plans) == set(f.nodes)
        for sw in f.switches():
            assert len(plans[sw.name].routes) == len(f.rail_subnets()) - len(sw.svis)


def test_vlanrail4x3_one_switch_one_vlan_per_rail():
    f = topologies.load("vlanrail4x3")
    (sw,) = f.switches()
    assert (sw.name, sw.label) == ("rsw1", "Rails-1-4")
    assert [(v.ifname, v.ip, v.vlan) for v in sw.svis] == [
        (f"vlan10{r}", f"10.0.{r}.1/24", 100 + r) for r in range(1, 5)]
    tables = f.l2_tables("rsw1")
    assert {k: len(v) for k, v in tables.items()} == {f"vlan10{r}": 3 for r in range(1, 5)}
    # Host-1..3 of rail 3 on ports 7..9 (ports 1..3 face rail 1)
    assert [f.peer("rsw1", f"eth{p}").node for p in (7, 8, 9)] == ["h1", "h2", "h3"]
    assert f.routes("rsw1") == []
    assert expected_hops(f, "h1g1", "h2g1") == 0 and expected_hops(f, "h1g1", "h2g4") == 1


def test_generated_single_switch_names_figure_13_4():
    f = topologies.from_dict({"gpus_per_host": 4, "hosts": 3, "rails_per_switch": 4,
                              "spines": 0})
    assert f.name == "rail4x3-s0-m4"
    assert f.description == ("3 hosts x 4 GPUs, 1 rail switch (4 rails each), "
                             "no spine (rail-only) (book Figure 13-4)")


def test_polar2x4_is_rail2x4_with_200g_uplinks():
    polar, base = topologies.load("polar2x4"), topologies.load("rail2x4")
    assert [lk.model_bps for lk in polar.links] == [
        200e9 if lk.kind == "rail-spine" else lk.model_bps for lk in base.links]
    assert [(lk.a, lk.b) for lk in polar.links] == [(lk.a, lk.b) for lk in base.links]


# -- adjacency, port numbering and ECMP member order -----------------------------------------

def _members(f, leaf: str, rail: int) -> list[str]:
    """The spines of a leaf's route to a rail subnet, in next-hop (ECMP member) order."""
    (route,) = [r for r in f.routes(leaf) if r.prefix == f"10.0.{rail}.0/24"]
    return [f.peer(leaf, dev).node for _, dev in route.nexthops]


def test_full_mesh_members_collide():
    f = topologies.load("leafspine4x4")
    assert [_members(f, f"rail{i}", 4) for i in (1, 2, 3)] == [
        ["spine1", "spine2", "spine3", "spine4"]] * 3


def test_rotated_cabling_members_differ_for_every_k():
    f = topologies.load("leafspine4x4-rotated")
    members = [_members(f, f"rail{i}", 4) for i in (1, 2, 3)]
    assert members == [["spine2", "spine3", "spine4", "spine1"],
                       ["spine3", "spine4", "spine1", "spine2"],
                       ["spine4", "spine1", "spine2", "spine3"]]
    # leaf i's uplink port k (eth5 = k 0) -> spine ((i + k) mod 4) + 1
    for i in range(1, 5):
        for k in range(4):
            assert f.peer(f"rail{i}", f"eth{5 + k}").node == f"spine{(i + k) % 4 + 1}"
    # a full mesh still: spine port eth{k} faces rail k, addresses as in the default order
    assert f.peer("spine1", "eth3").node == "rail3"
    assert f.ports[("rail3", "eth6")].ip == "172.16.1.4/31"  # rail3 port k=1 -> spine1


def test_partial_members_differ_for_every_k():
    f = topologies.load("leafspine4x4-partial")
    members = [_members(f, f"rail{i}", 4) for i in (1, 2, 3)]
    assert members == [["spine1", "spine2"], ["spine2", "spine4"], ["spine4", "spine1"]]
    for k in range(2):
        assert len({m[k] for m in members}) == 3


def test_partial_routes_exact():
    f = topologies.load("leafspine4x4-partial")
    assert {(s.name, r.prefix): r.nexthops for s in f.switches() for r in f.routes(s.name)
            if s.role == ROLE_RAIL} == {
        ("rail1", "10.0.2.0/24"): (("172.16.2.1", "eth6"), ("172.16.3.1", "eth7")),
        ("rail1", "10.0.3.0/24"): (("172.16.1.1", "eth5"), ("172.16.3.1", "eth7")),
        ("rail1", "10.0.4.0/24"): (("172.16.1.1", "eth5"), ("172.16.2.1", "eth6")),
        ("rail2", "10.0.1.0/24"): (("172.16.2.3", "eth5"), ("172.16.3.3", "eth6")),
        ("rail2", "10.0.3.0/24"): (("172.16.3.3", "eth6"), ("172.16.4.3", "eth7")),
        ("rail2", "10.0.4.0/24"): (("172.16.2.3", "eth5"), ("172.16.4.3", "eth7")),
        ("rail3", "10.0.1.0/24"): (("172.16.3.5", "eth5"), ("172.16.1.5", "eth7")),
        ("rail3", "10.0.2.0/24"): (("172.16.3.5", "eth5"), ("172.16.4.5", "eth6")),
        ("rail3", "10.0.4.0/24"): (("172.16.4.5", "eth6"), ("172.16.1.5", "eth7")),
        ("rail4", "10.0.1.0/24"): (("172.16.1.7", "eth6"), ("172.16.2.7", "eth7")),
        ("rail4", "10.0.2.0/24"): (("172.16.4.7", "eth5"), ("172.16.2.7", "eth7")),
        ("rail4", "10.0.3.0/24"): (("172.16.4.7", "eth5"), ("172.16.1.7", "eth6")),
    }
    # spine1 serves rails 1, 3, 4 on dense ports 1..3; rail2 is reached through them
    assert {r.prefix: r.nexthops for r in f.routes("spine1")} == {
        "10.0.1.0/24": (("172.16.1.0", "eth1"),),
        "10.0.2.0/24": (("172.16.1.0", "eth1"), ("172.16.1.4", "eth2"), ("172.16.1.6", "eth3")),
        "10.0.3.0/24": (("172.16.1.4", "eth2"),),
        "10.0.4.0/24": (("172.16.1.6", "eth3"),),
    }
    assert [(p.ifname, p.ip) for p in f.node_ports("spine1")] == [
        ("eth1", "172.16.1.1/31"), ("eth2", "172.16.1.5/31"), ("eth3", "172.16.1.7/31")]


NO_SHARED_SPINE = {"gpus_per_host": 4, "hosts": 2, "spines": 4, "adjacency": {
    "rail1": ["spine1", "spine2"], "rail2": ["spine2", "spine3"], "rail3": ["spine3", "spine4"],
    "rail4": ["spine1", "spine2", "spine3", "spine4"]}}


def test_leaves_without_a_shared_spine_take_a_longer_path():
    f = topologies.from_dict(NO_SHARED_SPINE)
    # rail1 -> rail3: rail1 - spine1|2 - rail2|rail4 - spine3|4 - rail3, 4 links, 5 routers
    assert _members(f, "rail1", 3) == ["spine1", "spine2"]
    assert [f.peer("spine1", dev).node for _, dev in
            next(r for r in f.routes("spine1") if r.prefix == "10.0.3.0/24").nexthops] == ["rail4"]
    assert [f.peer("spine2", dev).node for _, dev in
            next(r for r in f.routes("spine2") if r.prefix == "10.0.3.0/24").nexthops] == [
        "rail2", "rail4"]
    assert expected_hops(f, "h1g1", "h1g3") == 5
    assert expected_hops(f, "h1g1", "h1g2") == 3
    assert f.switch_distance("rail1", "rail3") == 4


# -- multi-pod with super-spines (Fig 13-9) --------------------------------------------------

MULTIPOD = topologies.load("multipod2")


def test_multipod_names_roles_and_gpus():
    f = MULTIPOD
    assert [(n.name, n.label, n.role) for n in f.switches()] == [
        ("p1rail1", "Pod-1 Rail-1", ROLE_RAIL), ("p1rail2", "Pod-1 Rail-2", ROLE_RAIL),
        ("p1spine1", "Pod-1 Spine-1", ROLE_SPINE), ("p1spine2", "Pod-1 Spine-2", ROLE_SPINE),
        ("p2rail1", "Pod-2 Rail-1", ROLE_RAIL), ("p2rail2", "Pod-2 Rail-2", ROLE_RAIL),
        ("p2spine1", "Pod-2 Spine-1", ROLE_SPINE), ("p2spine2", "Pod-2 Spine-2", ROLE_SPINE),
        ("sspine1", "Super-Spine-1", ROLE_SUPER), ("sspine2", "Super-Spine-2", ROLE_SUPER)]
    assert ROLE_SUPER == "superspine"
    g = f.gpus["h3g2"]
    assert (g.host, g.index, g.rail, g.nic, g.ip, g.gateway, g.mac) == (
        "h3", 2, 4, "nic2", "10.0.4.13", "10.0.4.1", "02:00:00:00:03:02")
    assert g.gateway_mac == f.nodes["p2rail2"].router_mac == "02:00:00:00:0a:00"
    assert [(v.ifname, v.ip, v.vlan, v.rail) for v in f.nodes["p2rail1"].svis] == [
        ("vlan103", "10.0.3.1/24", 103, 3)]
    assert f.rail_subnets() == {r: f"10.0.{r}.0/24" for r in range(1, 5)}
    assert f.to_dict()["pods"] == 2 and "pods" not in topologies.load("rail2x4").to_dict()


def test_multipod_p2p_addresses():
    f = MULTIPOD
    spine_super = [(f"{lk.a.node}:{lk.a.ifname}", lk.a.ip, f"{lk.b.node}:{lk.b.ifname}", lk.b.ip)
                   for lk in f.links if lk.kind == "spine-superspine"]
    assert spine_super == [
        (f"p{p}spine{s}:eth{2 + n}", f"172.16.{2 * (p - 1) + s}.{128 + 2 * (n - 1)}/31",
         f"sspine{n}:eth{2 * (p - 1) + s}", f"172.16.{2 * (p - 1) + s}.{129 + 2 * (n - 1)}/31")
        for n in (1, 2) for p in (1, 2) for s in (1, 2)]
    assert f.ports[("p2rail2", "eth4")].ip == "172.16.4.2/31"  # Spine-G=4 / Rail-k=2
    ips = [p.ip for p in f.ports.values() if p.ip]
    assert len(ips) == len(set(ips))
    macs = [p.mac for p in f.ports.values() if p.vlan is None]
    assert len(macs) == len(set(macs))


def test_multipod_routes_exact():
    f = MULTIPOD
    routes = {n: {r.prefix: r.nexthops for r in f.routes(n)} for n in f.nodes}
    assert routes["p1rail1"] == {
        p: (("172.16.1.1", "eth3"), ("172.16.2.1", "eth4"))
        for p in ("10.0.2.0/24", "10.0.3.0/24", "10.0.4.0/24")}
    assert routes["p1spine1"] == {
        "10.0.1.0/24": (("172.16.1.0", "eth1"),), "10.0.2.0/24": (("172.16.1.2", "eth2"),),
        "10.0.3.0/24": (("172.16.1.129", "eth3"), ("172.16.1.131", "eth4")),
        "10.0.4.0/24": (("172.16.1.129", "eth3"), ("172.16.1.131", "eth4"))}
    assert routes["sspine1"] == {
        "10.0.1.0/24": (("172.16.1.128", "eth1"), ("172.16.2.128", "eth2")),
        "10.0.2.0/24": (("172.16.1.128", "eth1"), ("172.16.2.128", "eth2")),
        "10.0.3.0/24": (("172.16.3.128", "eth3"), ("172.16.4.128", "eth4")),
        "10.0.4.0/24": (("172.16.3.128", "eth3"), ("172.16.4.128", "eth4"))}
    assert routes["p2spine2"]["10.0.1.0/24"] == (("172.16.4.129", "eth3"),
                                                 ("172.16.4.131", "eth4"))
    assert plan_fabric(f)["p1spine1"].routes[2] == RouteEntry(
        "10.0.3.0/24", (NextHop("172.16.1.129", "eth3"), NextHop("172.16.1.131", "eth4")))


def _paths(f, node: str, prefix: str) -> list[list[str]]:
    """Every path the routes allow from a switch to the switch carrying `prefix`."""
    route = next((r for r in f.routes(node) if r.prefix == prefix), None)
    if route is None:
        return [[node]]
    return [[node] + rest for _, dev in route.nexthops
            for rest in _paths(f, f.peer(node, dev).node, prefix)]


def test_multipod_traceroute_is_rail_spine_superspine_spine_rail():
    f = MULTIPOD
    paths = _paths(f, "p1rail1", "10.0.3.0/24")
    assert len(paths) == 2 * 2 * 2  # spines x super-spines x pod-2 spines
    assert {tuple(f.nodes[n].role for n in p) for p in paths} == {
        (ROLE_RAIL, ROLE_SPINE, ROLE_SUPER, ROLE_SPINE, ROLE_RAIL)}
    assert paths[0] == ["p1rail1", "p1spine1", "sspine1", "p2spine1", "p2rail1"]
    assert {tuple(p) for p in _paths(f, "p1rail1", "10.0.2.0/24")} == {
        ("p1rail1", "p1spine1", "p1rail2"), ("p1rail1", "p1spine2", "p1rail2")}


@pytest.mark.parametrize("src, dst, hops", [
    ("h1g1", "h2g1", 0),  # one rail: switched in VLAN 101, TTL 64
    ("h1g1", "h2g2", 3),  # Rail -> Spine -> Rail inside pod 1, TTL 61
    ("h1g1", "h3g1", 5),  # inter-pod: Rail -> Spine -> Super-Spine -> Spine -> Rail, TTL 59
    ("h4g2", "h1g1", 5),
    ("h3g1", "h4g2", 3),
])
def test_multipod_expected_hops(src, dst, hops):
    assert expected_hops(MULTIPOD, src, dst) == hops


def test_rail_only_and_two_rails_per_switch_hops():
    ronly = topologies.load("railonly2x4")
    assert expected_hops(ronly, "h1g1", "h2g1") == 0
    assert expected_hops(ronly, "h1g1", "h2g2") is None
    dual = topologies.load("dualrail4x3")
    assert [expected_hops(dual, "h1g1", d) for d in ("h2g1", "h2g2", "h2g3")] == [0, 1, 3]


def test_spine_uplink_rate_and_describe():
    f = topologies.from_dict({**topologies.spec_of("multipod2"), "spine_uplink": "800G"})
    assert {lk.kind: lk.model_bps for lk in f.links} == {
        "host-rail": 200e9, "rail-spine": 200e9, "spine-superspine": 800e9, "frontend": 100e9}
    text = MULTIPOD.describe()
    assert "4 spines, 2 super-spines, 2 pods, 28 links" in text
    assert "  sspine1  Super-Spine-1 switch" in text
    assert "super-spines" not in topologies.load("rail2x4").describe()


def test_generated_multipod_name():
    f = topologies.from_dict({"pods": 3, "gpus_per_host": 2, "hosts": 1, "spines": 1,
                              "super_spines": 1})
    assert f.name == "rail2x1-s1-p3-ss1"
    assert f.description == ("3 pods x 1 hosts x 2 GPUs, 2 rail switches, 1 spines per pod, "
                             "1 super-spines (book Figure 13-9)")
    assert [g.rail for g in f.gpu_list()] == [1, 2, 3, 4, 5, 6]
    assert f.gpus["h3g2"].ip == "10.0.6.13"


# -- per-link overrides ----------------------------------------------------------------------

def test_link_overrides_change_only_their_links():
    spec = topologies.spec_of("rail2x4")
    base = topologies.from_dict(spec)
    f = topologies.from_dict({**spec, "links": {"spine2-rail1": {"delay": "5us"},
                                                "rail2-spine2": {"delay": "5us"},
                                                "rail1-spine1": {"rate": "200G"}}})
    changed = {(lk.a.node, lk.b.node): (lk.model_bps, lk.delay_s)
               for lk, old in zip(f.links, base.links) if lk != old}
    five, one = parse_duration("5us"), parse_duration("1us")
    assert changed == {("rail1", "spine2"): (400e9, five), ("rail2", "spine2"): (400e9, five),
                       ("rail1", "spine1"): (200e9, one)}
    assert [(lk.a, lk.b, lk.kind) for lk in f.links] == [
        (lk.a, lk.b, lk.kind) for lk in base.links]


def test_link_override_applies_to_every_link_of_the_pair():
    f = topologies.from_dict({"gpus_per_host": 4, "hosts": 2, "rails_per_switch": 2,
                              "links": {"h1-rsw2": {"rate": "100G"}}})
    assert [(lk.a.ifname, lk.model_bps) for lk in f.links if lk.a.node == "h1"
            and lk.b.node == "rsw2"] == [("nic3", 100e9), ("nic4", 100e9)]


# -- bad input -------------------------------------------------------------------------------

FOUR = {"gpus_per_host": 4, "hosts": 2, "spines": 4}


@pytest.mark.parametrize("data, message", [
    ({"links": {"rail1-spine9": {"rate": "200G"}}},
     "links.rail1-spine9: no link between rail1 and spine9 (no node spine9)"),
    ({"links": {"rail1-rail2": {"rate": "200G"}}},
     "links.rail1-rail2: no link between rail1 and rail2"),
    ({"links": {"rail1-spine1": {"rate": "fast"}}},
     "links.rail1-spine1.rate: not a rate like '200G', got 'fast'"),
    ({"links": {"rail1-spine1": {"rate": "-1G"}}}, "links.rail1-spine1.rate: must be > 0"),
    ({"links": {"rail1-spine1": {"delay": "soon"}}},
     "links.rail1-spine1.delay: not a duration like '5us', got 'soon'"),
    ({"links": {"rail1-spine1": {"speed": "1G"}}},
     "links.rail1-spine1: unknown key 'speed' (known: rate, delay)"),
    ({"links": {"rail1-spine1": "200G"}}, "links.rail1-spine1: a mapping with rate"),
    ({"links": {"rail1": {"rate": "1G"}}}, "links.rail1: not a node pair 'a-b'"),
    ({"links": {"rail1-spine1": {"rate": "1G"}, "spine1-rail1": {"rate": "2G"}}},
     "links.spine1-rail1: the same pair as links.rail1-spine1"),
    ({"links": ["rail1-spine1"]}, "links: a mapping"),
    ({"adjacency": {"rail9": ["spine1"]}}, "adjacency: unknown rail switch 'rail9'"),
    ({"adjacency": {"rail1": ["spine9"]}}, "adjacency.rail1: unknown spine 'spine9'"),
    ({"adjacency": {"rail1": ["spine1", "spine1"]}}, "adjacency.rail1: spine1 listed twice"),
    ({"adjacency": {"rail1": "spine1"}}, "adjacency.rail1: a list of spine names"),
    ({"adjacency": {"rail1": ["spine1", "spine2", "spine3", "spine4"]}},
     "adjacency.rail2: no spine listed"),
    ({"adjacency": {f"rail{k}": ["spine1", "spine2", "spine3"] for k in range(1, 5)}},
     "adjacency: spine spine4 has no rail switch"),
    ({"adjacency": ["rail1"]}, "adjacency: a mapping"),
    ({"pods": 2}, "super_spines: 2 pods need at least 1 super-spine, got 0"),
    ({"pods": 2, "super_spines": 1, "spines": 0}, "spines: 2 pods need at least 1 spine"),
    ({"super_spines": 2}, "super_spines: a single pod has no super-spine tier"),
    ({"pods": 0}, "pods: must be an integer in 1..16, got 0"),
    ({"pods": 2, "super_spines": 65}, "super_spines: must be an integer in 0..64, got 65"),
    ({"pods": 2, "super_spines": 1, "spine_uplink": "warp"},
     "spine_uplink: not a rate like '200G', got 'warp'"),
    ({"pods": 2, "super_spines": 1, "hosts": 101}, "hosts: pods x hosts must be <= 200"),
    # 200 hosts + 64 rail switches + 4 spines + frontend
    ({"gpus_per_host": 64, "hosts": 200}, "hosts: 269 nodes (hosts, switches, frontend) exceed "
                                          "the 255 of the MAC scheme"),
    ({"gpus_per_host": 64, "rails_per_switch": 64, "hosts": 4, "spines": 0},
     "hosts: a rail switch would have 256 ports"),
    ({"pods": 16, "gpus_per_host": 16, "rails_per_switch": 16, "hosts": 1, "spines": 1,
      "super_spines": 1},
     "rail_subnet: not a subnet template for rails 1..256"),
    ({"p2p_subnet": "172.16.0.0/24"}, "p2p_subnet: 172.16.0.0/24 is too small for 4 spines"),
])
def test_bad_input_names_field_and_value(data, message):
    with pytest.raises(TopologyError) as e:
        topologies.from_dict({**FOUR, **data})
    assert message in str(e.value)


def test_spines_override_checked_against_adjacency():
    with pytest.raises(TopologyError, match="adjacency.rail1: unknown spine 'spine3'"):
        topologies.load("leafspine4x4-partial", spines=2)


def test_adjacency_spine_of_another_pod():
    data = {**topologies.spec_of("multipod2"),
            "adjacency": {"p1rail1": ["p2spine1"], "p1rail2": ["p1spine1", "p1spine2"],
                          "p2rail1": ["p2spine1", "p2spine2"], "p2rail2": ["p2spine2"]}}
    with pytest.raises(TopologyError, match="adjacency.p1rail1: spine p2spine1 is in another pod"):
        topologies.from_dict(data)


# -- the routing rule itself -----------------------------------------------------------------

def test_bfs_distances_and_port_order():
    graph = {"a": ["b", "c"], "b": ["a", "d"], "c": ["a", "d"], "d": ["b", "c", "e"], "e": ["d"],
             "x": []}
    assert distances(graph, "a") == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}
    assert sorted(["eth10", "eth9", "eth1"], key=port_order) == ["eth1", "eth9", "eth10"]


def test_next_hops_follow_port_number_not_link_order():
    # rail1's first uplink (eth3) goes to spine2; links are created spine-major, so the
    # link to spine1 (eth4) comes first in the link list, yet eth3 is member 0
    f = topologies.from_dict({"gpus_per_host": 2, "hosts": 2, "spines": 2, "adjacency": {
        "rail1": ["spine2", "spine1"], "rail2": ["spine1", "spine2"]}})
    assert [lk.a.ifname for lk in f.links if lk.a.node == "rail1" and lk.kind == "rail-spine"] \
        == ["eth4", "eth3"]
    assert f.routes("rail1")[0].nexthops == (("172.16.2.1", "eth3"), ("172.16.1.1", "eth4"))


def test_p2p_slash31_pairs_everywhere():
    f = topologies.from_dict({"pods": 3, "gpus_per_host": 4, "hosts": 2, "spines": 3,
                              "super_spines": 4})
    for lk in f.links:
        if lk.kind in ("rail-spine", "spine-superspine"):
            a, b = ipaddress.ip_interface(lk.a.ip), ipaddress.ip_interface(lk.b.ip)
            assert a.network == b.network and a.network.prefixlen == 31
            assert int(a.ip) % 2 == 0 and int(b.ip) == int(a.ip) + 1
    ips = [p.ip for p in f.ports.values() if p.ip]
    assert len(ips) == len(set(ips)) == 24 + 2 * (3 * 4 * 3) + 2 * (9 * 4) + 6
