"""Declarative fabric description: nodes, ports, links, addresses (no root, no I/O).

A `Fabric` is the *description* of a backend network (Mininet's Topo/realisation split,
docs/CONVENTIONS.md): the rail-optimized designs of the book (ch.12 Figure 12-4, ch.13 "Backend
Network Topologies") reduced to data. `emu.realise.net` realises it in namespaces; `emu show`
prints it; tests check it without root.

Conventions (ch.13 "single-rail-per-switch", Fig 13-12; several rails per switch as in
Figs 13-10/13-11 with `rails_per_switch`):
* one subnet per rail: Rail-r = 10.0.r.0/24; host h's NIC on rail r = 10.0.r.(10+h);
  the rail switch is every NIC's default gateway, 10.0.r.1, on its SVI ``vlan10r``
  (VLAN 100+r, as in the book's VLAN 101, 102 ...). Host-facing ports are access
  ports of that VLAN: intra-rail traffic is switched at layer 2 (one hop), everything
  else is routed by the rail switch (a switch carrying several rails routes between
  them itself, one routed hop).
* switch <-> switch links are routed point-to-point /31s, the lower tier's side even:
  Spine-s / Rail-k = 172.16.s.(2(k-1))/31 (multi-pod numbering and the super-spine links
  in `topologies.clos`). Routes are shortest paths with ECMP over every equal-cost next
  hop (`topologies.routing`): rails reach other rails' subnets through every spine they
  share with the destination; spines reach rail subnets through that rail's link; in a
  multi-pod fabric (ch.13 Fig 13-9) spines reach other pods through every super-spine.
* every host has a frontend interface ``fe0`` = 192.168.10.(100+h)/24 on a plain
  frontend switch (a Linux bridge): the book's management/frontend network (ch.14).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import dataclass, field

from emucore.timedil import DEFAULT_TDF, TimeDilation, format_rate
from topologies.routing import closer_hops, distances

HOST = "host"
SWITCH = "switch"
FRONTEND = "frontend"

ROLE_RAIL = "rail"
ROLE_SPINE = "spine"
ROLE_SUPER = "superspine"  #: the third tier of a multi-pod fabric (ch.13 Fig 13-9)


@dataclass(frozen=True)
class Port:
    """One interface of a node: name inside the node's namespace, MAC, optional IPv4."""

    node: str
    ifname: str
    mac: str
    ip: str | None = None  # "a.b.c.d/len"
    vlan: int | None = None  # access VLAN (rail host-facing ports)

    @property
    def address(self) -> str | None:
        """The bare IPv4 address, without prefix length."""
        return self.ip.split("/")[0] if self.ip else None


@dataclass(frozen=True)
class Link:
    """A full-duplex link between two ports, with its model speed and delay."""

    a: Port
    b: Port
    model_bps: float
    delay_s: float = 0.0  # model one-way propagation delay
    kind: str = ""  # "host-rail", "rail-spine", "spine-superspine", "frontend"


@dataclass(frozen=True)
class Gpu:
    """A GPU and its NIC: ``h1g1`` is GPU-1 of Host-1, its NIC on Rail-1."""

    name: str
    host: str
    index: int  # 1-based local GPU number (local rank + 1)
    rail: int
    nic: str  # interface name in the host namespace
    ip: str  # bare address
    gateway: str
    gateway_mac: str
    mac: str


@dataclass(frozen=True)
class Svi:
    """A rail's VLAN interface on its rail switch: the rail subnet's gateway."""

    ifname: str  # vlan101
    ip: str  # "10.0.1.1/24"
    vlan: int
    rail: int


@dataclass(frozen=True)
class Node:
    """A host (GPU server), a switch running the agent, or the frontend bridge."""

    name: str
    kind: str
    label: str  # the book's name: Host-1, Rail-1, Spine-2 ...
    role: str = ""
    router_mac: str | None = None
    svis: tuple[Svi, ...] = ()  # rail switches: one per rail they carry
    ecmp_seed: int = 0

    def svi_of_vlan(self, vlan: int) -> Svi | None:
        """The SVI of a VLAN on this switch."""
        return next((v for v in self.svis if v.vlan == vlan), None)


@dataclass(frozen=True)
class Route:
    """A route in a node's FIB: prefix via one or more (gateway, ifname) next hops."""

    prefix: str
    nexthops: tuple[tuple[str | None, str], ...]  # (gateway or None, ifname)


@dataclass
class Fabric:
    """A whole backend fabric plus frontend, in model units."""

    name: str
    description: str
    nodes: dict[str, Node] = field(default_factory=dict)
    ports: dict[tuple[str, str], Port] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    gpus: dict[str, Gpu] = field(default_factory=dict)
    tdf: float = DEFAULT_TDF
    mtu: int = 9216
    pods: int = 1  # ch.13 Fig 13-8/13-9: > 1 with a super-spine tier
    #: load-balancing specs of the topology file (`lb:`; emu.realise.lbplan applies them)
    lb: tuple[str, ...] = ()

    @property
    def td(self) -> TimeDilation:
        """The fabric's time dilation (model <-> lab conversions)."""
        return TimeDilation(self.tdf)

    # -- construction ------------------------------------------------------
    def add_node(self, node: Node) -> Node:
        """Add a node; names are unique."""
        if node.name in self.nodes:
            raise ValueError(f"nodes: duplicate node name {node.name!r}")
        self.nodes[node.name] = node
        return node

    def add_link(self, a: Port, b: Port, model_bps: float, delay_s: float, kind: str) -> Link:
        """Add a link between two new ports."""
        for p in (a, b):
            if p.node not in self.nodes:
                raise ValueError(f"links: unknown node {p.node!r}")
            if (p.node, p.ifname) in self.ports:
                raise ValueError(f"links: port {p.node}:{p.ifname} used twice")
            self.ports[(p.node, p.ifname)] = p
        link = Link(a, b, model_bps, delay_s, kind)
        self.links.append(link)
        return link

    # -- queries -----------------------------------------------------------
    def hosts(self) -> list[Node]:
        """GPU servers, in order."""
        return [n for n in self.nodes.values() if n.kind == HOST]

    def switches(self) -> list[Node]:
        """Switches that run the agent, in order."""
        return [n for n in self.nodes.values() if n.kind == SWITCH]

    def node_ports(self, node: str) -> list[Port]:
        """A node's ports in creation order."""
        return [p for (n, _), p in self.ports.items() if n == node]

    def node_links(self, node: str) -> list[tuple[Port, Port, Link]]:
        """(local port, peer port, link) for every link of a node."""
        out = []
        for link in self.links:
            if link.a.node == node:
                out.append((link.a, link.b, link))
            elif link.b.node == node:
                out.append((link.b, link.a, link))
        return out

    def peer(self, node: str, ifname: str) -> Port:
        """The port at the other end of node:ifname."""
        for local, remote, _ in self.node_links(node):
            if local.ifname == ifname:
                return remote
        raise KeyError(f"{node}:{ifname} has no link")

    def link_of(self, node: str, ifname: str) -> Link:
        """The link attached to node:ifname."""
        for local, _, link in self.node_links(node):
            if local.ifname == ifname:
                return link
        raise KeyError(f"{node}:{ifname} has no link")

    def gpu_list(self) -> list[Gpu]:
        """GPUs ordered by (host, index): the order of global ranks."""
        return list(self.gpus.values())

    # -- control plane -----------------------------------------------------
    def switch_graph(self, down: Collection[Link] = ()) -> dict[str, list[str]]:
        """switch -> the switches at the far end of its routed links (parallel links
        repeat), without the links in `down` (failed: issue 14 faults)."""
        out: dict[str, list[str]] = {n.name: [] for n in self.switches()}
        for lk in self.links:
            if lk.a.node in out and lk.b.node in out and lk not in down:
                out[lk.a.node].append(lk.b.node)
                out[lk.b.node].append(lk.a.node)
        return out

    def switch_distance(self, a: str, b: str) -> int | None:
        """Hops between two switches on the shortest path; None when unconnected."""
        return distances(self.switch_graph(), a).get(b)

    def routes(self, node: str, down: Collection[Link] = ()) -> list[Route]:
        """The static routes the control plane installs on a switch (besides connected):
        every rail subnet the switch does not carry, over every next hop on a shortest
        path, in local port order (`topologies.routing`); with links `down`, the routes
        of the fabric without them (reconvergence; a subnet it no longer reaches has
        no route)."""
        n = self.nodes[node]
        out: list[Route] = []
        if n.kind != SWITCH:
            return out
        graph = self.switch_graph(down)
        links = [(local.ifname, remote.node, remote.address)
                 for local, remote, lk in self.node_links(node)
                 if remote.node in graph and lk not in down]
        for rail, subnet in self.rail_subnets().items():
            dist = distances(graph, self.switch_of_rail(rail))
            here = dist.get(node)
            if here:
                out.append(Route(subnet, closer_hops(links, dist, here)))
        return out

    def neighbours(self, node: str) -> list[tuple[str, str, str]]:
        """Static (ifname, ip, mac) neighbour entries the control plane installs on a node."""
        n = self.nodes[node]
        out: list[tuple[str, str, str]] = []
        if n.kind == SWITCH:
            for local, remote, _ in self.node_links(node):
                if remote.address is None:
                    continue
                svi = n.svi_of_vlan(local.vlan) if local.vlan is not None else None
                dev = svi.ifname if svi else local.ifname
                out.append((dev, remote.address, remote.mac))
        elif n.kind == HOST:
            for gpu in self.gpus.values():
                if gpu.host != node:
                    continue
                out.append((gpu.nic, gpu.gateway, gpu.gateway_mac))
                for peer in self.gpus.values():
                    if peer.rail == gpu.rail and peer.host != node:
                        out.append((gpu.nic, peer.ip, peer.mac))
        return out

    def l2_tables(self, node: str) -> dict[str, dict[str, str]]:
        """Static MAC -> port table of each of a rail switch's VLANs, keyed by SVI."""
        n = self.nodes[node]
        out: dict[str, dict[str, str]] = {v.ifname: {} for v in n.svis}
        for local, remote, _ in self.node_links(node):
            svi = n.svi_of_vlan(local.vlan) if local.vlan is not None else None
            if svi:
                out[svi.ifname][remote.mac] = local.ifname
        return out

    def switch_of_rail(self, rail: int) -> str:
        """The switch that carries a rail."""
        return next(n.name for n in self.nodes.values() for v in n.svis if v.rail == rail)

    def rail_subnets(self) -> dict[int, str]:
        """rail number -> subnet."""
        out = {}
        for n in self.nodes.values():
            for v in n.svis:
                out[v.rail] = str(ipaddress.ip_interface(v.ip).network)
        return dict(sorted(out.items()))

    # -- presentation ------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Node, link and address counts (used by tests and the summary)."""
        return {
            "hosts": len(self.hosts()),
            "gpus": len(self.gpus),
            "switches": len(self.switches()),
            "rails": sum(len(n.svis) for n in self.switches()),
            "rail_switches": len([n for n in self.switches() if n.role == ROLE_RAIL]),
            "spines": len([n for n in self.switches() if n.role == ROLE_SPINE]),
            "super_spines": len([n for n in self.switches() if n.role == ROLE_SUPER]),
            "pods": self.pods,
            "links": len(self.links),
            "fabric_links": len([lk for lk in self.links if lk.kind != "frontend"]),
            "addresses": len([p for p in self.ports.values() if p.ip])
            + sum(len(n.svis) for n in self.nodes.values()),
        }

    def to_dict(self) -> dict:
        """JSON-able description (topology.json of a run); "pods" only when more than one."""
        return {
            "name": self.name,
            "description": self.description,
            "tdf": self.tdf,
            "mtu": self.mtu,
            **({"pods": self.pods} if self.pods > 1 else {}),
            **({"lb": list(self.lb)} if self.lb else {}),
            "nodes": [{**vars(n), "svis": [vars(v) for v in n.svis]} for n in self.nodes.values()],
            "links": [
                {"a": vars(lk.a), "b": vars(lk.b), "kind": lk.kind,
                 "model_bps": lk.model_bps, "lab_bps": self.td.lab_rate(lk.model_bps),
                 "model_delay_s": lk.delay_s}
                for lk in self.links
            ],
            "gpus": [vars(g) for g in self.gpus.values()],
        }

    def describe(self) -> str:
        """The wiring and addressing plan as plain text (`emu show TOPO`)."""
        c = self.counts()
        lines = [
            f"{self.name}: {self.description}",
            f"  {c['hosts']} hosts x {c['gpus'] // max(c['hosts'], 1)} GPUs, "
            f"{c['rails']} rails on {c['rail_switches']} rail switches, {c['spines']} spines, "
            + (f"{c['super_spines']} super-spines, {c['pods']} pods, "
               if c["super_spines"] or c["pods"] > 1 else "")
            + f"{c['links']} links; "
            f"TDF {self.tdf:g} (lab rate = model rate / {self.tdf:g}), MTU {self.mtu}",
            "",
            "Nodes:",
        ]
        width = max([10] + [len(n.label) for n in self.nodes.values()])
        for n in self.nodes.values():
            extra = "".join(f"  SVI {v.ifname} {v.ip} (VLAN {v.vlan})" for v in n.svis)
            lines.append(f"  {n.name:<8} {n.label:<{width}} {n.kind:<8}{extra}")
        lines += ["", "GPU NICs:"]
        for g in self.gpus.values():
            lines.append(f"  {g.name:<6} {g.host}:{g.nic:<5} {g.ip:<14} Rail-{g.rail}  "
                         f"gw {g.gateway}  mac {g.mac}")
        lines += ["", "Links (model speed / lab speed):"]
        ends = [tuple(f"{p.node}:{p.ifname}" + (f" {p.ip}" if p.ip else "") for p in (lk.a, lk.b))
                for lk in self.links]
        w = max([28] + [len(e) for pair in ends for e in pair])
        for lk, (a, b) in zip(self.links, ends):
            lines.append(f"  {a:<{w}} <-> {b:<{w}} {format_rate(lk.model_bps):>9} / "
                         f"{format_rate(self.td.lab_rate(lk.model_bps)):<9} {lk.kind}")
        sw_routes = [(s.name, r) for s in self.switches() for r in self.routes(s.name)]
        if sw_routes:
            lines += ["", "Routes (besides connected):"]
            for name, r in sw_routes:
                hops = ", ".join(f"via {gw} dev {dev}" for gw, dev in r.nexthops)
                ecmp = "  [ECMP]" if len(r.nexthops) > 1 else ""
                lines.append(f"  {name:<8} {r.prefix:<15} {hops}{ecmp}")
        return "\n".join(lines)
