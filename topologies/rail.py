"""Generator of rail-optimized fabrics: ``rail{R}x{H}`` (book ch.12 Fig 12-4, ch.13).

H hosts with R GPUs each; GPU g of every host has its NIC on rail g ("GPUs with the
same local rank share a rail"); one rail switch per rail, or one switch per
`rails_per_switch` rails, each rail its own VLAN and subnet on it (ch.13 Figs 13-10,
13-11); S spines fully meshed to every rail switch (S = 0 gives the book's *rail-only*
design, where cross-rail data must first cross NVLink). ``rail2x4`` with 2 spines is
Figure 12-4. Addressing is described in
`topologies.model`. All values are model values; the TDF says how the lab runs them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from fabric.timedil import DEFAULT_TDF, parse_duration, parse_rate
from topologies.model import (FRONTEND, HOST, ROLE_RAIL, ROLE_SPINE, SWITCH, Fabric, Gpu,
                              Node, Port, Svi)

RAIL_NAME = re.compile(r"^rail(\d+)x(\d+)$")

MAX_RAILS = 64
MAX_HOSTS = 200  # host ids 10+h must fit the /24 per rail
MAX_SPINES = 32


@dataclass(frozen=True)
class RailSpec:
    """Parameters of a rail{R}x{H} fabric, validated; errors name the field and value."""

    name: str = ""
    description: str = ""
    gpus_per_host: int = 2
    hosts: int = 4
    spines: int = 2
    host_link: str | float = "200G"
    uplink: str | float = "400G"
    frontend_link: str | float = "100G"
    delay: str | float = "1us"
    tdf: float = DEFAULT_TDF
    mtu: int = 9216
    rails_per_switch: int = 1
    rail_subnet: str = "10.0.{rail}.0/24"
    p2p_subnet: str = "172.16.0.0/16"
    frontend_subnet: str = "192.168.10.0/24"
    ecmp_seed: str | int = "per-switch"

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        def need_int(fname: str, lo: int, hi: int) -> None:
            v = getattr(self, fname)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{fname}: must be an integer in {lo}..{hi}, got {v!r}")

        need_int("gpus_per_host", 1, MAX_RAILS)
        need_int("hosts", 1, MAX_HOSTS)
        need_int("spines", 0, MAX_SPINES)
        need_int("mtu", 1280, 9216)
        need_int("rails_per_switch", 1, MAX_RAILS)
        if self.gpus_per_host % self.rails_per_switch:
            raise ValueError(f"rails_per_switch: must divide gpus_per_host "
                             f"({self.gpus_per_host}), got {self.rails_per_switch!r}")
        for fname in ("host_link", "uplink", "frontend_link"):
            try:
                v = parse_rate(getattr(self, fname))
            except (TypeError, ValueError):
                raise ValueError(f"{fname}: not a rate like '200G', got "
                                 f"{getattr(self, fname)!r}") from None
            if v <= 0:
                raise ValueError(f"{fname}: must be > 0, got {getattr(self, fname)!r}")
        try:
            d = parse_duration(self.delay)
        except (TypeError, ValueError):
            raise ValueError(f"delay: not a duration like '1us', got {self.delay!r}") from None
        if d < 0:
            raise ValueError(f"delay: must be >= 0, got {self.delay!r}")
        if not isinstance(self.tdf, (int, float)) or isinstance(self.tdf, bool) or self.tdf <= 0:
            raise ValueError(f"tdf: must be a number > 0, got {self.tdf!r}")
        if "{rail}" not in self.rail_subnet:
            raise ValueError(f"rail_subnet: must contain '{{rail}}', got {self.rail_subnet!r}")
        try:
            net = ipaddress.ip_network(self.rail_subnet.format(rail=1))
        except ValueError:
            raise ValueError(f"rail_subnet: not a subnet template, got "
                             f"{self.rail_subnet!r}") from None
        if net.num_addresses < self.hosts + 12:
            raise ValueError(f"rail_subnet: {net} is too small for {self.hosts} hosts")
        for fname in ("p2p_subnet", "frontend_subnet"):
            try:
                ipaddress.ip_network(getattr(self, fname))
            except ValueError:
                raise ValueError(f"{fname}: not a subnet, got "
                                 f"{getattr(self, fname)!r}") from None
        if ipaddress.ip_network(self.frontend_subnet).num_addresses < self.hosts + 102:
            raise ValueError(f"frontend_subnet: too small for {self.hosts} hosts")
        if not (self.ecmp_seed in ("per-switch", "same") or
                (isinstance(self.ecmp_seed, int) and not isinstance(self.ecmp_seed, bool))):
            raise ValueError(f"ecmp_seed: 'per-switch', 'same' or an integer, got "
                             f"{self.ecmp_seed!r}")


def _mac(node_idx: int, port_idx: int) -> str:
    return f"02:00:00:00:{node_idx:02x}:{port_idx:02x}"


def _switch_seed(spec: RailSpec, name: str) -> int:
    import zlib

    if spec.ecmp_seed == "same":
        return 0
    if isinstance(spec.ecmp_seed, int):
        return spec.ecmp_seed & 0xFFFFFFFF
    return zlib.crc32(name.encode())


def build_rail(spec: RailSpec) -> Fabric:
    """Build the Fabric for a validated RailSpec."""
    spec.validate()
    R, H, S = spec.gpus_per_host, spec.hosts, spec.spines
    name = spec.name or f"rail{R}x{H}" + (f"-s{S}" if S != 2 else "") + (
        f"-m{spec.rails_per_switch}" if spec.rails_per_switch != 1 else "")
    desc = spec.description or (
        f"{H} hosts x {R} GPUs, {R // spec.rails_per_switch} rail switches"
        + (f" ({spec.rails_per_switch} rails each)" if spec.rails_per_switch > 1 else "") + ", "
        + (f"{S} spines" if S else "no spine (rail-only)")
        + (" (book Figure 12-4)" if (R, H, S) == (2, 4, 2) else ""))
    fab = Fabric(name=name, description=desc, tdf=float(spec.tdf), mtu=spec.mtu)
    host_bps = parse_rate(spec.host_link)
    up_bps = parse_rate(spec.uplink)
    fe_bps = parse_rate(spec.frontend_link)
    delay = parse_duration(spec.delay)
    p2p = ipaddress.ip_network(spec.p2p_subnet)
    fe_net = ipaddress.ip_network(spec.frontend_subnet)

    idx = 0

    def next_idx() -> int:
        nonlocal idx
        idx += 1
        return idx

    host_idx = {}
    for h in range(1, H + 1):
        n = fab.add_node(Node(f"h{h}", HOST, f"Host-{h}"))
        host_idx[n.name] = next_idx()
    M = spec.rails_per_switch
    K = R // M  # rail switches
    rail_idx = {}
    rail_sw = {}  # rail -> switch name
    for k in range(1, K + 1):
        i = next_idx()
        rails = list(range((k - 1) * M + 1, k * M + 1))
        name_ = f"rail{k}" if M == 1 else f"rsw{k}"
        label = f"Rail-{k}" if M == 1 else f"Rails-{rails[0]}-{rails[-1]}"
        svis = []
        for r in rails:
            net = ipaddress.ip_network(spec.rail_subnet.format(rail=r))
            svis.append(Svi(f"vlan{100 + r}", f"{net.network_address + 1}/{net.prefixlen}",
                            100 + r, r))
            rail_sw[r] = name_
        fab.add_node(Node(name_, SWITCH, label, ROLE_RAIL, router_mac=_mac(i, 0),
                          svis=tuple(svis), ecmp_seed=_switch_seed(spec, name_)))
        rail_idx[k] = i
    spine_idx = {}
    for s in range(1, S + 1):
        i = next_idx()
        sname = f"spine{s}"
        fab.add_node(Node(sname, SWITCH, f"Spine-{s}", ROLE_SPINE, router_mac=_mac(i, 0),
                          ecmp_seed=_switch_seed(spec, sname)))
        spine_idx[s] = i
    fe_i = next_idx()
    fab.add_node(Node("fe", FRONTEND, "Frontend"))

    # host <-> rail links: on a switch, ports 1..H face rail r's hosts, then the next rail
    for r in range(1, R + 1):
        net = ipaddress.ip_network(spec.rail_subnet.format(rail=r))
        gw_ip = str(net.network_address + 1)
        sw = rail_sw[r]
        router_mac = fab.nodes[sw].router_mac
        assert router_mac
        first_port = ((r - 1) % M) * H
        for h in range(1, H + 1):
            hi = host_idx[f"h{h}"]
            ip = f"{net.network_address + 10 + h}/{net.prefixlen}"
            hp = Port(f"h{h}", f"nic{r}", _mac(hi, r), ip)
            sp = Port(sw, f"eth{first_port + h}", router_mac, None, vlan=100 + r)
            fab.add_link(hp, sp, host_bps, delay, "host-rail")
            fab.gpus[f"h{h}g{r}"] = Gpu(f"h{h}g{r}", f"h{h}", r, r, f"nic{r}",
                                       ip.split("/")[0], gw_ip, router_mac, hp.mac)
    # rail switch <-> spine links, /31 each
    for s in range(1, S + 1):
        for k in range(1, K + 1):
            sw = f"rail{k}" if M == 1 else f"rsw{k}"
            base = p2p.network_address + (s << 8) + 2 * (k - 1)
            rp = Port(sw, f"eth{M * H + s}", _mac(rail_idx[k], M * H + s), f"{base}/31")
            sp = Port(f"spine{s}", f"eth{k}", _mac(spine_idx[s], k), f"{base + 1}/31")
            fab.add_link(rp, sp, up_bps, delay, "rail-spine")
    # frontend
    for h in range(1, H + 1):
        hp = Port(f"h{h}", "fe0", _mac(host_idx[f"h{h}"], 0xfe),
                  f"{fe_net.network_address + 100 + h}/{fe_net.prefixlen}")
        fp = Port("fe", f"eth{h}", _mac(fe_i, h))
        fab.add_link(hp, fp, fe_bps, 0.0, "frontend")
    return fab


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
