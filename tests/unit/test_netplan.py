"""The network plan of every namespace, exact values, without root (emu.realise.netplan), and
the pyroute2 requests made from it (emu.realise.netlink's pure normalisers)."""

import pytest

import topologies
from emu.realise.netlink import link_kind, route_request, rule_request
from emu.realise.earlydrop import drop_all_program, host_program, switch_program
from emu.realise.netplan import (Bridge, IngressFilter, Interface, Neighbour, NextHop, RouteEntry,
                                 Rule, plan_fabric, plan_node, svi_cpu)

RAIL2X4 = topologies.load("rail2x4")
PLAN = plan_fabric(RAIL2X4)
BASE_SYSCTLS = (("net.ipv4.ip_forward", 0), ("net.ipv6.conf.all.disable_ipv6", 1),
                ("net.ipv6.conf.default.disable_ipv6", 1))


def test_every_node_has_a_plan():
    assert set(PLAN) == set(RAIL2X4.nodes)
    assert all(p.node == name for name, p in PLAN.items())


def test_h1_interfaces_and_addresses():
    assert PLAN["h1"].interfaces == (
        Interface("lo"),
        Interface("nic1", 9216, True, ("10.0.1.11/24",)),
        Interface("nic2", 9216, True, ("10.0.2.11/24",)),
        Interface("fe0", 1500, False, ("192.168.10.101/24",)),
    )
    assert PLAN["h1"].bridges == ()


def test_h1_sysctls():
    host = {f"net.ipv4.conf.{k}.{n}": v for k in ("all", "default")
            for n, v in (("arp_ignore", 1), ("arp_announce", 2), ("rp_filter", 0),
                         ("accept_local", 1))}
    assert PLAN["h1"].sysctls[:3] == BASE_SYSCTLS
    assert dict(PLAN["h1"].sysctls[3:]) == host


def test_h1_policy_rules_one_table_per_nic_before_local():
    assert PLAN["h1"].rules == (
        Rule(0, 255, delete=True),
        Rule(2000, 255),
        Rule(1001, 101, src="10.0.1.11", iifname="lo"),
        Rule(1002, 102, src="10.0.2.11", iifname="lo"),
    )


def test_h1_routes_per_nic_table():
    assert PLAN["h1"].routes == (
        RouteEntry("10.0.1.0/24", (NextHop(None, "nic1"),), 101, "10.0.1.11", 253),
        RouteEntry("0.0.0.0/0", (NextHop("10.0.1.1", "nic1"),), 101),
        RouteEntry("10.0.2.0/24", (NextHop(None, "nic2"),), 102, "10.0.2.11", 253),
        RouteEntry("0.0.0.0/0", (NextHop("10.0.2.1", "nic2"),), 102),
    )


def test_h1_neighbours_gateway_and_rail_peers():
    assert PLAN["h1"].neighbours == (
        Neighbour("nic1", "10.0.1.1", "02:00:00:00:05:00"),
        Neighbour("nic1", "10.0.1.12", "02:00:00:00:02:01"),
        Neighbour("nic1", "10.0.1.13", "02:00:00:00:03:01"),
        Neighbour("nic1", "10.0.1.14", "02:00:00:00:04:01"),
        Neighbour("nic2", "10.0.2.1", "02:00:00:00:06:00"),
        Neighbour("nic2", "10.0.2.12", "02:00:00:00:02:02"),
        Neighbour("nic2", "10.0.2.13", "02:00:00:00:03:02"),
        Neighbour("nic2", "10.0.2.14", "02:00:00:00:04:02"),
    )


def test_rail1_svi_bridge_ports_and_sysctls():
    p = PLAN["rail1"]
    assert p.bridges == (Bridge("vlan101", "02:00:00:00:05:00", 9216, "10.0.1.1/24",
                                ("vlan101k", "vlan101c")),)
    assert p.interfaces == (
        Interface("lo"),
        *(Interface(f"eth{i}", 9216, True, keep_sg=True) for i in range(1, 5)),
        Interface("eth5", 9216, True, ("172.16.1.0/31",), keep_sg=True),
        Interface("eth6", 9216, True, ("172.16.2.0/31",), keep_sg=True),
    )
    assert p.sysctls == BASE_SYSCTLS + (
        ("net.ipv4.conf.all.rp_filter", 0), ("net.ipv4.conf.all.send_redirects", 0),
        ("net.ipv4.conf.default.rp_filter", 0), ("net.ipv4.conf.default.send_redirects", 0))
    assert p.rules == ()


def test_rail1_ecmp_route_over_both_spines():
    assert PLAN["rail1"].routes == (
        RouteEntry("10.0.2.0/24", (NextHop("172.16.1.1", "eth5"), NextHop("172.16.2.1", "eth6"))),
    )


def test_rail1_neighbours_hosts_on_the_svi_spines_on_their_links():
    assert PLAN["rail1"].neighbours == (
        Neighbour("vlan101", "10.0.1.11", "02:00:00:00:01:01"),
        Neighbour("vlan101", "10.0.1.12", "02:00:00:00:02:01"),
        Neighbour("vlan101", "10.0.1.13", "02:00:00:00:03:01"),
        Neighbour("vlan101", "10.0.1.14", "02:00:00:00:04:01"),
        Neighbour("eth5", "172.16.1.1", "02:00:00:00:07:01"),
        Neighbour("eth6", "172.16.2.1", "02:00:00:00:08:01"),
    )


def test_spine2_routes_each_rail_over_its_link():
    p = PLAN["spine2"]
    assert p.routes == (RouteEntry("10.0.1.0/24", (NextHop("172.16.2.0", "eth1"),)),
                        RouteEntry("10.0.2.0/24", (NextHop("172.16.2.2", "eth2"),)))
    assert p.neighbours == (Neighbour("eth1", "172.16.2.0", "02:00:00:00:05:06"),
                            Neighbour("eth2", "172.16.2.2", "02:00:00:00:06:06"))
    assert p.bridges == ()


def test_frontend_bridge_namespace_is_plain():
    p = PLAN["fe"]
    assert p.sysctls == BASE_SYSCTLS
    assert p.interfaces == (Interface("lo"),
                            *(Interface(f"eth{i}", 1500, False) for i in range(1, 5)))
    assert (p.bridges, p.rules, p.routes, p.neighbours) == ((), (), (), ())


def test_early_drop_on_fabric_ports_only():
    """A switch keeps the IPv4 packets to its own addresses (ports and SVI), a host
    drops RoCE and UET on its NICs; lo, frontend ports and the frontend bridge none."""
    rail1 = switch_program(["10.0.1.1", "172.16.1.0", "172.16.2.0"])
    assert PLAN["rail1"].ingress_filters == tuple(
        IngressFilter(f"eth{i}", rail1) for i in range(1, 7)) + (
        IngressFilter("vlan101c", drop_all_program()),)  # the SVI's CPU port, agent's end
    assert PLAN["spine2"].ingress_filters == (
        IngressFilter("eth1", switch_program(["172.16.2.1", "172.16.2.3"])),
        IngressFilter("eth2", switch_program(["172.16.2.1", "172.16.2.3"])))
    assert PLAN["h1"].ingress_filters == (IngressFilter("nic1", host_program()),
                                          IngressFilter("nic2", host_program()))
    assert PLAN["fe"].ingress_filters == ()
    bridged = plan_node(RAIL2X4, "rail1", bridged=True)  # a Linux bridge: none, no CPU port
    assert (bridged.ingress_filters, bridged.bridges[0].cpu) == ((), None)
    assert plan_node(RAIL2X4, "h1", bridged=True).ingress_filters == PLAN["h1"].ingress_filters


def test_svi_cpu_port_names():
    assert svi_cpu("vlan101") == ("vlan101k", "vlan101c")
    with pytest.raises(ValueError, match="svi: 'vlan1234567890ab' leaves no room"):
        svi_cpu("vlan1234567890ab")


def test_rail_only_has_no_routes_and_dual_rail_two_svis():
    ronly = topologies.load("railonly2x4")
    assert all(plan_node(ronly, s.name).routes == () for s in ronly.switches())
    dual = topologies.load("dualrail4x3")
    two = [plan_node(dual, s.name) for s in dual.switches() if len(s.svis) == 2]
    assert two and all(len(p.bridges) == 2 for p in two)


IFINDEX = {"eth5": 5, "eth6": 6, "nic1": 2}.__getitem__


@pytest.mark.parametrize("route, expected", [
    (RouteEntry("10.0.2.0/24", (NextHop("172.16.1.1", "eth5"), NextHop("172.16.2.1", "eth6"))),
     {"dst": "10.0.2.0/24", "multipath": [{"gateway": "172.16.1.1", "oif": 5},
                                          {"gateway": "172.16.2.1", "oif": 6}]}),
    (RouteEntry("10.0.1.0/24", (NextHop("172.16.2.0", "eth5"),)),
     {"dst": "10.0.1.0/24", "gateway": "172.16.2.0", "oif": 5}),
    (RouteEntry("10.0.1.0/24", (NextHop(None, "nic1"),), 101, "10.0.1.11", 253),
     {"dst": "10.0.1.0/24", "oif": 2, "table": 101, "prefsrc": "10.0.1.11", "scope": 253}),
    (RouteEntry("0.0.0.0/0", (NextHop("10.0.1.1", "nic1"),), 101),
     {"dst": "0.0.0.0/0", "gateway": "10.0.1.1", "oif": 2, "table": 101}),
])
def test_route_requests(route, expected):
    assert route_request(route, IFINDEX) == expected


@pytest.mark.parametrize("rule, expected", [
    (Rule(0, 255, delete=True), {"priority": 0, "table": 255}),
    (Rule(1001, 101, src="10.0.1.11", iifname="lo"),
     {"priority": 1001, "table": 101, "src": "10.0.1.11", "src_len": 32, "iifname": "lo"}),
])
def test_rule_requests(rule, expected):
    assert rule_request(rule) == expected


def decoded_link(attrs: list) -> object:
    """A link message as the kernel would send it (encoded, then decoded by pyroute2)."""
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    m = ifinfmsg()
    m["attrs"] = attrs
    m.encode()
    d = ifinfmsg(m.data)
    d.decode()
    return d


@pytest.mark.parametrize("attrs, kind", [
    ([("IFLA_IFNAME", "vlan101"), ("IFLA_LINKINFO", {"attrs": [("IFLA_INFO_KIND", "bridge")]})],
     "bridge"),  # a rail switch's SVI: bridge_all must not enslave it (ELOOP)
    ([("IFLA_IFNAME", "eth1"), ("IFLA_LINKINFO", {"attrs": [("IFLA_INFO_KIND", "veth")]})],
     "veth"),
    ([("IFLA_IFNAME", "lo")], None),
])
def test_link_kind(attrs, kind):
    assert link_kind(decoded_link(attrs)) == kind
