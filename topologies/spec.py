"""The parameters of a generated fabric (`RailSpec`, the YAML fields) and their checks.

Every check raises ValueError naming the field and the bad value, before anything is
built. The limits come from the addressing: node and port numbers are one byte each of
the MAC 02:00:00:00:NN:PP (at most 255 nodes, 255 ports on a switch); host h's NIC is
.(10+h) of its rail's subnet (at most 200 hosts in all pods) and its frontend address
.(100+h); spine G's links use the /24 at offset G x 256 of p2p_subnet (`topologies.clos`:
at most 64 rail switches per pod and 64 super-spines).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from emucore.lbconfig import LB_KEYS, parse_lb
from emucore.timedil import DEFAULT_TDF, parse_duration, parse_rate
from topologies.clos import MAX_PER_HALF
from topologies.links import parse_links

MAX_RAILS = 64
MAX_HOSTS = 200  # host ids 10+h must fit the /24 per rail (all pods together)
MAX_SPINES = 32  # per pod
MAX_PODS = 16
MAX_SUPER_SPINES = MAX_PER_HALF
MAC_BYTE = 255  # node and port numbers in 02:00:00:00:NN:PP


@dataclass(frozen=True)
class RailSpec:
    """Parameters of a rail{R}x{H} fabric, validated; errors name the field and value.
    `hosts` and `spines` are per pod; `links` and `adjacency` as in `topologies.links`
    and `topologies.clos`."""

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
    pods: int = 1
    super_spines: int = 0
    spine_uplink: str | float | None = None  # spine <-> super-spine; None = uplink
    links: Mapping = field(default_factory=dict)
    adjacency: Mapping = field(default_factory=dict)
    #: load balancing per switch or role, as `emu run --lb` (emucore.lbconfig.parse_lb): a spec
    #: or a list, e.g. ["rail=flowlet,flowlet_gap=10us", "spine=ecmp,hash=dst-ip"]
    lb: str | list = field(default_factory=list)

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
        need_int("pods", 1, MAX_PODS)
        need_int("super_spines", 0, MAX_SUPER_SPINES)
        if self.gpus_per_host % self.rails_per_switch:
            raise ValueError(f"rails_per_switch: must divide gpus_per_host "
                             f"({self.gpus_per_host}), got {self.rails_per_switch!r}")
        self._check_tiers()
        for fname in ("host_link", "uplink", "frontend_link") + (
                ("spine_uplink",) if self.spine_uplink is not None else ()):
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
        self._check_subnets()
        if not (self.ecmp_seed in ("per-switch", "same") or
                (isinstance(self.ecmp_seed, int) and not isinstance(self.ecmp_seed, bool))):
            raise ValueError(f"ecmp_seed: 'per-switch', 'same' or an integer, got "
                             f"{self.ecmp_seed!r}")
        parse_links(self.links)
        self._check_adjacency_form()
        self._check_lb()

    def lb_specs(self) -> tuple[str, ...]:
        """`lb` as a tuple of specs."""
        return (self.lb,) if isinstance(self.lb, str) else tuple(self.lb)

    def _check_lb(self) -> None:
        """Each spec's settings parse; who it names is checked with the fabric (emu.realise.lbplan)."""
        if not isinstance(self.lb, (str, list, tuple)) or not all(
                isinstance(x, str) for x in self.lb_specs()):
            raise ValueError(f"lb: a spec or a list of specs like 'rail=spray', got {self.lb!r}")
        for i, spec in enumerate(self.lb_specs()):
            who, sep, rest = spec.partition("=")
            text = rest if sep and "," not in who and who.strip() not in LB_KEYS else spec
            parse_lb(text, source=f"lb[{i}]")

    def _check_tiers(self) -> None:
        P, S, SS = self.pods, self.spines, self.super_spines
        if P > 1 and SS < 1:
            raise ValueError(f"super_spines: {P} pods need at least 1 super-spine, got {SS}")
        if P > 1 and S < 1:
            raise ValueError(f"spines: {P} pods need at least 1 spine per pod, got {S}")
        if P == 1 and SS:
            raise ValueError(f"super_spines: a single pod has no super-spine tier (set pods "
                             f"> 1), got {SS}")
        if P * self.hosts > MAX_HOSTS:
            raise ValueError(f"hosts: pods x hosts must be <= {MAX_HOSTS}, got "
                             f"{P} x {self.hosts}")
        K = self.gpus_per_host // self.rails_per_switch
        nodes = P * self.hosts + P * (K + S) + SS + 1
        if nodes > MAC_BYTE:
            raise ValueError(f"hosts: {nodes} nodes (hosts, switches, frontend) exceed the "
                             f"{MAC_BYTE} of the MAC scheme 02:00:00:00:NN:PP")
        ports = self.rails_per_switch * self.hosts + S
        if ports > MAC_BYTE:
            raise ValueError(f"hosts: a rail switch would have {ports} ports "
                             f"(rails_per_switch x hosts + spines), more than {MAC_BYTE}")

    def _check_subnets(self) -> None:
        if not isinstance(self.rail_subnet, str) or "{rail}" not in self.rail_subnet:
            raise ValueError(f"rail_subnet: must contain '{{rail}}', got {self.rail_subnet!r}")
        last = self.pods * self.gpus_per_host
        try:
            net = ipaddress.ip_network(self.rail_subnet.format(rail=1))
            ipaddress.ip_network(self.rail_subnet.format(rail=last))
        except ValueError:
            raise ValueError(f"rail_subnet: not a subnet template for rails 1..{last}, got "
                             f"{self.rail_subnet!r}") from None
        hosts = self.pods * self.hosts
        if net.num_addresses < hosts + 12:
            raise ValueError(f"rail_subnet: {net} is too small for {hosts} hosts")
        for fname in ("p2p_subnet", "frontend_subnet"):
            try:
                ipaddress.ip_network(getattr(self, fname))
            except ValueError:
                raise ValueError(f"{fname}: not a subnet, got "
                                 f"{getattr(self, fname)!r}") from None
        if ipaddress.ip_network(self.frontend_subnet).num_addresses < hosts + 102:
            raise ValueError(f"frontend_subnet: too small for {hosts} hosts")
        spines = self.pods * self.spines
        if spines and ipaddress.ip_network(self.p2p_subnet).num_addresses < (spines + 1) * 256:
            raise ValueError(f"p2p_subnet: {self.p2p_subnet} is too small for {spines} spines "
                             f"(spine G's links use the /24 at offset G x 256)")

    def _check_adjacency_form(self) -> None:
        if not isinstance(self.adjacency, Mapping):
            raise ValueError(f"adjacency: a mapping rail switch -> [spines], got "
                             f"{self.adjacency!r}")
        for leaf, spines in self.adjacency.items():
            if not isinstance(spines, (list, tuple)) or not all(isinstance(x, str)
                                                                for x in spines):
                raise ValueError(f"adjacency.{leaf}: a list of spine names, got {spines!r}")
