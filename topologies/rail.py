"""Generator of rail-optimized fabrics: ``rail{R}x{H}`` (book ch.12 Fig 12-4, ch.13).

H hosts with R GPUs each; GPU g of every host has its NIC on rail g ("GPUs with the
same local rank share a rail"); one rail switch per rail, or one switch per
`rails_per_switch` rails, each rail its own VLAN and subnet on it (ch.13 Figs 13-4,
13-10, 13-11); S spines, by default fully meshed to every rail switch, or cabled as an
explicit `adjacency` (partially connected leaf-spine, rotated cabling; `topologies.clos`);
S = 0 gives the book's *rail-only* design, where cross-rail data must first cross NVLink.
``rail2x4`` with 2 spines is Figure 12-4. `links` overrides single links' rate and delay
(`topologies.links`).

Multi-pod (ch.13 Fig 13-8 pods, Fig 13-9 super-spines, three tiers, five stages):
`pods` P > 1 copies the pod (H hosts, its rail switches, S spines) P times and cables
every spine to each of `super_spines` super-spines at `spine_uplink`. Hosts are numbered
globally h1..h(P x H); switches are ``p{p}rail{k}`` (``p{p}rsw{k}``), ``p{p}spine{s}``,
``sspine{n}`` (labels "Pod-1 Rail-1", "Super-Spine-1"). Each pod's rail r is its own
subnet and VLAN: global rail g = (p-1) x R + r, subnet `rail_subnet` with rail=g, VLAN
100+g; a GPU keeps its local number (`Gpu.index` = r, NIC nic{r}, name h{h}g{r}) and
`Gpu.rail` = g. Node numbers (the NN of the MACs 02:00:00:00:NN:PP): hosts, then pod by
pod its rail switches and spines, then the super-spines, then the frontend. Addressing is
described in `topologies.model` and `topologies.clos`; limits in `topologies.spec`. All
values are model values; the TDF says how the lab runs them.
"""

from __future__ import annotations

import ipaddress
import re
import zlib

from emucore.timedil import parse_duration, parse_rate
from topologies.clos import Cable, leaf_spine_cables, resolve_adjacency, spine_super_cables
from topologies.links import apply_links, parse_links
from topologies.model import (FRONTEND, HOST, ROLE_RAIL, ROLE_SPINE, ROLE_SUPER, SWITCH,
                              Fabric, Gpu, Node, Port, Svi)
from topologies.spec import RailSpec

__all__ = ["RAIL_NAME", "RailSpec", "build_rail", "parse_rail_name"]

RAIL_NAME = re.compile(r"^rail(\d+)x(\d+)$")


def _mac(node_idx: int, port_idx: int) -> str:
    return f"02:00:00:00:{node_idx:02x}:{port_idx:02x}"


def _switch_seed(spec: RailSpec, name: str) -> int:
    if spec.ecmp_seed == "same":
        return 0
    if isinstance(spec.ecmp_seed, int):
        return spec.ecmp_seed & 0xFFFFFFFF
    return zlib.crc32(name.encode())


def _name_and_description(spec: RailSpec) -> tuple[str, str]:
    R, H, S, M, P = spec.gpus_per_host, spec.hosts, spec.spines, spec.rails_per_switch, spec.pods
    K = R // M
    name = spec.name or (f"rail{R}x{H}" + (f"-s{S}" if S != 2 else "")
                         + (f"-m{M}" if M != 1 else "")
                         + (f"-p{P}-ss{spec.super_spines}" if P > 1 else ""))
    desc = spec.description or (
        (f"{P} pods x " if P > 1 else "")
        + f"{H} hosts x {R} GPUs, {K} rail switch{'es' if K != 1 else ''}"
        + (f" ({M} rails each)" if M > 1 else "") + ", "
        + (f"{S} spines" if S else "no spine (rail-only)")
        + (f" per pod, {spec.super_spines} super-spines (book Figure 13-9)" if P > 1 else "")
        + (" (book Figure 12-4)" if (R, H, S, P) == (2, 4, 2, 1) else "")
        + (" (book Figure 13-4)" if K == 1 and M > 1 and S == 0 else ""))
    return name, desc


def build_rail(spec: RailSpec) -> Fabric:
    """Build the Fabric for a validated RailSpec."""
    spec.validate()
    R, H, S, M, P = spec.gpus_per_host, spec.hosts, spec.spines, spec.rails_per_switch, spec.pods
    K = R // M  # rail switches per pod
    name, desc = _name_and_description(spec)
    fab = Fabric(name=name, description=desc, tdf=float(spec.tdf), mtu=spec.mtu, pods=P,
                 lb=spec.lb_specs())
    delay = parse_duration(spec.delay)
    p2p = ipaddress.ip_network(spec.p2p_subnet)
    fe_net = ipaddress.ip_network(spec.frontend_subnet)
    idx: dict[str, int] = {}  # node -> its number in the MACs

    def add(node: Node) -> None:
        fab.add_node(node)
        idx[node.name] = len(idx) + 1

    def switch(name_: str, label: str, role: str, svis: tuple[Svi, ...] = ()) -> None:
        add(Node(name_, SWITCH, label, role, router_mac=_mac(len(idx) + 1, 0), svis=svis,
                 ecmp_seed=_switch_seed(spec, name_)))

    pre = (lambda p: f"p{p}") if P > 1 else (lambda p: "")
    tag = (lambda p: f"Pod-{p} ") if P > 1 else (lambda p: "")
    for h in range(1, P * H + 1):
        add(Node(f"h{h}", HOST, f"Host-{h}"))
    leaves: list[list[str]] = []
    spines: list[list[str]] = []
    rail_sw: dict[int, str] = {}  # global rail -> switch
    for p in range(1, P + 1):
        leaves.append([])
        for k in range(1, K + 1):
            local = list(range((k - 1) * M + 1, k * M + 1))
            sw = pre(p) + (f"rail{k}" if M == 1 else f"rsw{k}")
            label = tag(p) + (f"Rail-{k}" if M == 1 else f"Rails-{local[0]}-{local[-1]}")
            svis = []
            for r in local:
                g = (p - 1) * R + r
                net = ipaddress.ip_network(spec.rail_subnet.format(rail=g))
                svis.append(Svi(f"vlan{100 + g}", f"{net.network_address + 1}/{net.prefixlen}",
                                100 + g, g))
                rail_sw[g] = sw
            switch(sw, label, ROLE_RAIL, tuple(svis))
            leaves[-1].append(sw)
        spines.append([pre(p) + f"spine{s}" for s in range(1, S + 1)])
        for s, sp in enumerate(spines[-1], start=1):
            switch(sp, tag(p) + f"Spine-{s}", ROLE_SPINE)
    supers = [f"sspine{n}" for n in range(1, spec.super_spines + 1)]
    for n, sup in enumerate(supers, start=1):
        switch(sup, f"Super-Spine-{n}", ROLE_SUPER)
    add(Node("fe", FRONTEND, "Frontend"))

    # host <-> rail links: on a switch, ports 1..H face its first rail's hosts, then the next
    host_bps = parse_rate(spec.host_link)
    for p in range(1, P + 1):
        for r in range(1, R + 1):
            g = (p - 1) * R + r
            net = ipaddress.ip_network(spec.rail_subnet.format(rail=g))
            gw_ip = str(net.network_address + 1)
            sw = rail_sw[g]
            router_mac = fab.nodes[sw].router_mac
            assert router_mac
            first_port = ((r - 1) % M) * H
            for local_h in range(1, H + 1):
                h = (p - 1) * H + local_h
                ip = f"{net.network_address + 10 + h}/{net.prefixlen}"
                hp = Port(f"h{h}", f"nic{r}", _mac(idx[f"h{h}"], r), ip)
                sp = Port(sw, f"eth{first_port + local_h}", router_mac, None, vlan=100 + g)
                fab.add_link(hp, sp, host_bps, delay, "host-rail")
                fab.gpus[f"h{h}g{r}"] = Gpu(f"h{h}g{r}", f"h{h}", r, g, f"nic{r}",
                                           ip.split("/")[0], gw_ip, router_mac, hp.mac)
    # rail switch <-> spine, spine <-> super-spine: /31 each (topologies.clos)
    adj = resolve_adjacency(spec.adjacency, leaves, spines)
    up_bps = parse_rate(spec.uplink)
    leaf_ports: dict[str, int] = {}
    for p in range(P):
        for c in leaf_spine_cables(adj, leaves[p], spines[p], p * S + 1, M * H, p2p):
            _cable(fab, idx, c, up_bps, delay, "rail-spine")
            leaf_ports[c.upper] = max(leaf_ports.get(c.upper, 0), c.upper_port)
    ss_bps = parse_rate(spec.uplink if spec.spine_uplink is None else spec.spine_uplink)
    all_spines = [sp for pod in spines for sp in pod]
    for c in spine_super_cables(all_spines, supers, leaf_ports, p2p):
        _cable(fab, idx, c, ss_bps, delay, "spine-superspine")
    # frontend
    fe_bps = parse_rate(spec.frontend_link)
    for h in range(1, P * H + 1):
        hp = Port(f"h{h}", "fe0", _mac(idx[f"h{h}"], 0xfe),
                  f"{fe_net.network_address + 100 + h}/{fe_net.prefixlen}")
        fp = Port("fe", f"eth{h}", _mac(idx["fe"], h))
        fab.add_link(hp, fp, fe_bps, 0.0, "frontend")
    apply_links(fab, parse_links(spec.links))
    return fab


def _cable(fab: Fabric, idx: dict[str, int], c: Cable, bps: float, delay: float,
           kind: str) -> None:
    lo = Port(c.lower, f"eth{c.lower_port}", _mac(idx[c.lower], c.lower_port), f"{c.address}/31")
    hi = Port(c.upper, f"eth{c.upper_port}", _mac(idx[c.upper], c.upper_port),
              f"{c.address + 1}/31")
    fab.add_link(lo, hi, bps, delay, kind)


def parse_rail_name(name: str, spines: int | None = None, **overrides) -> Fabric | None:
    """Build ``rail{R}x{H}`` from its name, or return None when the name doesn't match."""
    m = RAIL_NAME.match(name)
    if not m:
        return None
    kwargs = dict(gpus_per_host=int(m.group(1)), hosts=int(m.group(2)))
    if spines is not None:
        kwargs["spines"] = spines
    kwargs.update(overrides)
    return build_rail(RailSpec(**kwargs))
