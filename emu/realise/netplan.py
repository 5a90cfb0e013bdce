"""What the kernel of every namespace gets, as data: the network plan (pure, no root).

`plan_fabric(fabric)` turns a `topologies.model.Fabric` into one `NamespacePlan` per
node: sysctls, interfaces (MTU, offloads, addresses), the bridges that hold
a rail switch's SVI addresses, policy rules, routes (ECMP as several next hops) and
static neighbours. `emu.realise.netlink` installs a plan with pyroute2; tests compare plans
with exact values, table-driven, without root (the pyroute2 way of testing request
normalisers, docs/CONVENTIONS.md).

What the plan encodes (book ch.13, docs/ARCHITECTURE.md):
* no node's kernel forwards (`ip_forward` 0): switching and routing are the agents';
  IPv6 is off everywhere;
* fabric ports run at the fabric MTU with offloads off (the agents see every frame as
  it is on the wire); frontend ports at 1500; a switch's ports keep scatter-gather
  (and the transmit checksum offload the kernel requires for it): the agent's frames
  come from a packet socket with their checksums complete, and without it the kernel
  copies every frame larger than a page into one linear buffer before the veth takes
  it (__pskb_pull_tail, ~6 % of an agent's CPU at 4,170-byte RoCE frames, perf);
* a rail switch holds each SVI address (the rail's gateway, 10.0.r.1) on a bridge
  with the switch's router MAC (the kernel has no dummy driver) whose one port is a veth
  pair, the SVI's CPU port (`Bridge.cpu`): what the kernel sends into the VLAN (its reply
  to a host's ping of the gateway) comes out at the agent's end, and the agent switches
  it to the host (switch_agent.cpuport); a bridge without a port has no
  carrier, and the kernel drops what it sends there; switch routes
  are `Fabric.routes`, shortest paths with every equal-cost next hop in local port order
  (`topologies.routing`): a rail switch reaches the other rails over every spine (ECMP),
  a spine each rail subnet over that rail's link (or its super-spines, between pods);
* a multi-rail host has one routing table per NIC (100 + rail) selected by source
  address, ahead of the local table, so a packet leaves through the NIC whose address
  it carries, even towards a sibling NIC of the same host;
* every neighbour is static (permanent), so no ARP crosses the fabric;
* a switch's fabric ports drop, before its IP stack, the IPv4 packets not addressed to
  the switch, and a host's NIC ports the RoCEv2 and UET datagrams (`IngressFilter`,
  `emu.realise.earlydrop`): the agents and NICs read them from their taps, and the
  kernel would only throw them away at the sender's expense.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import dataclass

from emu.realise.earlydrop import Insn, drop_all_program, host_program, switch_program
from topologies.model import FRONTEND, HOST, SWITCH, Fabric, Link

HOST_TABLE_BASE = 100  #: per-NIC routing table = 100 + rail
MAIN_TABLE = 254
LOCAL_TABLE = 255
SCOPE_UNIVERSE = 0
SCOPE_LINK = 253
FRONTEND_MTU = 1500
IFNAME_MAX = 15  #: IFNAMSIZ - 1

COMMON_SYSCTLS = (("net.ipv4.ip_forward", 0), ("net.ipv6.conf.all.disable_ipv6", 1),
                  ("net.ipv6.conf.default.disable_ipv6", 1))
SWITCH_SYSCTLS = tuple((f"net.ipv4.conf.{k}.{name}", 0) for k in ("all", "default")
                       for name in ("rp_filter", "send_redirects"))
#: hosts answer ARP only on the NIC that owns the address and accept packets from
#: their own addresses (a GPU may reach a sibling NIC of its host through the fabric)
HOST_SYSCTLS = tuple((f"net.ipv4.conf.{k}.{name}", v) for k in ("all", "default")
                     for name, v in (("arp_ignore", 1), ("arp_announce", 2), ("rp_filter", 0),
                                     ("accept_local", 1)))


@dataclass(frozen=True)
class Interface:
    """An existing interface to bring up: MTU (None = leave), offloads, addresses."""

    ifname: str
    mtu: int | None = None
    offloads_off: bool = False
    addresses: tuple[str, ...] = ()  # "a.b.c.d/len"
    keep_sg: bool = False  # with offloads_off: leave scatter-gather and tx checksumming on


@dataclass(frozen=True)
class IngressFilter:
    """A classic BPF program on a port's ingress, run before the IP stack
    (`emu.realise.earlydrop`)."""

    ifname: str
    program: tuple[Insn, ...]


@dataclass(frozen=True)
class Bridge:
    """A bridge created to hold an SVI address (rail switches); `cpu`: its CPU port, a
    veth pair (the end enslaved to the bridge, the agent's end), `svi_cpu`."""

    ifname: str
    mac: str
    mtu: int
    address: str  # "a.b.c.d/len"
    cpu: tuple[str, str] | None = None


def svi_cpu(svi: str) -> tuple[str, str]:
    """The CPU port of SVI `svi`: (the veth end in the bridge, the agent's end)."""
    if len(svi) > IFNAME_MAX - 1:
        raise ValueError(f"svi: {svi!r} leaves no room for its CPU port's one-letter suffix "
                         f"in an interface name of at most {IFNAME_MAX} characters")
    return f"{svi}k", f"{svi}c"


@dataclass(frozen=True)
class NextHop:
    """One next hop of a route: gateway (None = on link) and device."""

    gateway: str | None
    dev: str


@dataclass(frozen=True)
class RouteEntry:
    """A route; more than one next hop makes it an ECMP multipath route."""

    dst: str
    nexthops: tuple[NextHop, ...]
    table: int = MAIN_TABLE
    prefsrc: str | None = None
    scope: int = SCOPE_UNIVERSE


@dataclass(frozen=True)
class Rule:
    """A policy routing rule to add, or (delete=True) to remove."""

    priority: int
    table: int
    src: str | None = None  # a /32 source address
    iifname: str | None = None
    delete: bool = False


@dataclass(frozen=True)
class Neighbour:
    """A permanent neighbour entry."""

    dev: str
    ip: str
    mac: str


@dataclass(frozen=True)
class NamespacePlan:
    """Everything the kernel of one node's namespace is configured with, in apply order."""

    node: str
    sysctls: tuple[tuple[str, int], ...]
    interfaces: tuple[Interface, ...]
    bridges: tuple[Bridge, ...] = ()
    rules: tuple[Rule, ...] = ()
    routes: tuple[RouteEntry, ...] = ()
    neighbours: tuple[Neighbour, ...] = ()
    ingress_filters: tuple[IngressFilter, ...] = ()


def plan_node(fabric: Fabric, node: str, down: Collection[Link] = (),
              bridged: bool = False) -> NamespacePlan:
    """The plan of one node's namespace; with links `down`, a switch's routes are those
    of the fabric without them (emu.faults.plan: reconvergence). `bridged`: the switches
    are Linux bridges (`emu bench forward`'s peer), whose kernel forwards, so a switch
    gets no early drop."""
    n = fabric.nodes[node]
    interfaces = [Interface("lo")]
    for p in fabric.node_ports(node):
        frontend = fabric.link_of(node, p.ifname).kind == "frontend"
        interfaces.append(Interface(p.ifname, FRONTEND_MTU if frontend else fabric.mtu,
                                    offloads_off=n.kind != FRONTEND and not frontend,
                                    keep_sg=n.kind == SWITCH and not frontend,
                                    addresses=(p.ip,) if p.ip else ()))
    sysctls = COMMON_SYSCTLS
    bridges: tuple[Bridge, ...] = ()
    rules: tuple[Rule, ...] = ()
    routes: tuple[RouteEntry, ...] = ()
    if n.kind == SWITCH:
        sysctls += SWITCH_SYSCTLS
        bridges = tuple(Bridge(v.ifname, n.router_mac, fabric.mtu, v.ip,
                               None if bridged else svi_cpu(v.ifname)) for v in n.svis)
        routes = tuple(RouteEntry(r.prefix, tuple(NextHop(gw, dev) for gw, dev in r.nexthops))
                       for r in fabric.routes(node, down))
    elif n.kind == HOST:
        sysctls += HOST_SYSCTLS
        rules, routes = _per_nic_routing(fabric, node)
    neighbours = tuple(Neighbour(dev, ip, mac) for dev, ip, mac in fabric.neighbours(node))
    return NamespacePlan(node, sysctls, tuple(interfaces), bridges, rules, routes, neighbours,
                         () if bridged and n.kind == SWITCH
                         else _ingress_filters(n.kind, interfaces, bridges))


def _ingress_filters(kind: str, interfaces: list[Interface],
                     bridges: tuple[Bridge, ...]) -> tuple[IngressFilter, ...]:
    """The early drop of a switch's or host's fabric ports (those whose offloads are
    off: not lo, not a frontend port)."""
    ports = [i.ifname for i in interfaces if i.offloads_off]
    if kind == SWITCH:
        program = switch_program([a for i in interfaces for a in i.addresses]
                                 + [b.address for b in bridges])
    elif kind == HOST:
        program = host_program()
    else:
        return ()
    return tuple(IngressFilter(p, program) for p in ports) + tuple(
        IngressFilter(b.cpu[1], drop_all_program()) for b in bridges if b.cpu)


def _per_nic_routing(fabric: Fabric, node: str) -> tuple[tuple[Rule, ...], tuple[RouteEntry, ...]]:
    """Per-NIC tables of a host (ch.13 multi-rail hosts): packets sourced from a NIC's
    address use that NIC's table, looked up *before* the local table (moved from
    priority 0 to 2000), so even traffic between two NICs of one host crosses the
    fabric (rail -> spine -> rail)."""
    rules = [Rule(0, LOCAL_TABLE, delete=True), Rule(2000, LOCAL_TABLE)]
    routes = []
    for g in fabric.gpus.values():
        if g.host != node:
            continue
        table = HOST_TABLE_BASE + g.rail
        subnet = str(ipaddress.ip_interface(fabric.ports[(node, g.nic)].ip).network)
        routes += [RouteEntry(subnet, (NextHop(None, g.nic),), table, prefsrc=g.ip,
                              scope=SCOPE_LINK),
                   RouteEntry("0.0.0.0/0", (NextHop(g.gateway, g.nic),), table)]
        rules.append(Rule(1000 + g.rail, table, src=g.ip, iifname="lo"))
    return tuple(rules), tuple(routes)


def plan_fabric(fabric: Fabric) -> dict[str, NamespacePlan]:
    """node -> plan, for every node of the fabric."""
    return {name: plan_node(fabric, name) for name in fabric.nodes}
