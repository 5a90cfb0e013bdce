"""The switch tiers of a Clos fabric: who is cabled to whom, on which port, with which /31
(book ch.13: leaf-spine Fig 13-8, multi-pod with super-spines Fig 13-9, the partially
connected leaf-spine of "Hash Polarization"). Pure: names and numbers in, cables out;
`topologies.rail` turns cables into ports and links.

Cabling:
* rail (leaf) switch <-> spine: `adjacency` maps each rail switch to the ordered list of
  spines it is cabled to (default: every spine of its pod, in order). The list order is
  the uplink port order: the first spine gets the rail switch's first uplink port
  eth{U+1}, the next eth{U+2} ... (U = the switch's host ports, rails_per_switch x hosts).
* a spine numbers its ports densely: its rail switches first, in rail-switch order
  (eth1, eth2, ...), then its super-spines in order. With the default full mesh this is
  spine port eth{k} for rail switch k, as before adjacency existed.
* super-spine n is cabled to every spine of every pod; its port eth{G} faces spine G,
  G = (pod - 1) x spines + s the spine's global number.

Addressing (/31 per link, lower tier even, upper tier odd, inside p2p_subnet, default
172.16.0.0/16): spine G owns the /24 at offset G x 256, 172.16.G.0/24:
* Rail-k / Spine-G = 172.16.G.(2(k-1))/31 in its lower half (k <= 64 rail switches per pod);
* Spine-G / Super-Spine-n = 172.16.G.(128 + 2(n-1))/31 in its upper half (n <= 64).
So the two kinds of link never collide, and a single-pod fabric keeps 172.16.s.(2(k-1))/31.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SUPER_OFFSET = 128  #: first host byte of a spine's /24 used by its super-spine links
MAX_PER_HALF = 64  #: /31s in one half of a spine's /24: rail switches per pod, super-spines


@dataclass(frozen=True)
class Cable:
    """One switch-to-switch link: lower-tier end, upper-tier end, port numbers, and the
    /31's even (lower-side) address."""

    lower: str
    lower_port: int
    upper: str
    upper_port: int
    address: ipaddress.IPv4Address


def resolve_adjacency(adjacency: Mapping, leaves: Sequence[Sequence[str]],
                      spines: Sequence[Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """rail switch -> its spines in uplink port order. `leaves` and `spines` list each pod's
    switch names; an empty `adjacency` is the full mesh of each pod. Errors name the field
    (``adjacency.rail1: ...``)."""
    if not adjacency:
        return {leaf: tuple(sp) for lv, sp in zip(leaves, spines) for leaf in lv}
    pod_of = {name: p for p, lv in enumerate(leaves) for name in lv}
    spine_pod = {name: p for p, sp in enumerate(spines) for name in sp}
    for key in adjacency:
        if key not in pod_of:
            raise ValueError(f"adjacency: unknown rail switch {key!r} "
                             f"(rail switches: {', '.join(pod_of)})")
    out: dict[str, tuple[str, ...]] = {}
    for leaf, p in pod_of.items():
        listed = adjacency.get(leaf) or ()
        if not listed and spines[p]:
            raise ValueError(f"adjacency.{leaf}: no spine listed (every rail switch needs at "
                             f"least one of {', '.join(spines[p])})")
        for sp in listed:
            if sp not in spine_pod:
                raise ValueError(f"adjacency.{leaf}: unknown spine {sp!r}")
            if spine_pod[sp] != p:
                raise ValueError(f"adjacency.{leaf}: spine {sp} is in another pod")
        dup = sorted({sp for sp in listed if list(listed).count(sp) > 1})
        if dup:
            raise ValueError(f"adjacency.{leaf}: {', '.join(dup)} listed twice")
        out[leaf] = tuple(listed)
    used = {sp for sps in out.values() for sp in sps}
    idle = [sp for sp in spine_pod if sp not in used]
    if idle:
        raise ValueError(f"adjacency: spine {', '.join(idle)} has no rail switch")
    return out


def _p2p(p2p: ipaddress.IPv4Network, spine_global: int, offset: int) -> ipaddress.IPv4Address:
    return p2p.network_address + (spine_global << 8) + offset


def leaf_spine_cables(adj: Mapping[str, Sequence[str]], leaves: Sequence[str],
                      spines: Sequence[str], first_spine: int, host_ports: int,
                      p2p: ipaddress.IPv4Network) -> list[Cable]:
    """One pod's rail switch <-> spine cables, spine-major (spine 1's, then spine 2's ...).
    `leaves` / `spines` in order (local numbers k, s = position + 1); spine s is global
    number first_spine + s - 1."""
    out = []
    for s, spine in enumerate(spines, start=1):
        mine = [leaf for leaf in leaves if spine in adj[leaf]]
        for j, leaf in enumerate(mine, start=1):
            k = leaves.index(leaf) + 1
            out.append(Cable(leaf, host_ports + adj[leaf].index(spine) + 1, spine, j,
                             _p2p(p2p, first_spine + s - 1, 2 * (k - 1))))
    return out


def spine_super_cables(spines: Sequence[str], supers: Sequence[str],
                       leaf_ports: Mapping[str, int],
                       p2p: ipaddress.IPv4Network) -> list[Cable]:
    """Every spine (all pods, in global order) <-> every super-spine, super-spine-major;
    a spine's super-spine ports follow its `leaf_ports` rail-switch ports."""
    out = []
    for n, sup in enumerate(supers, start=1):
        for g, spine in enumerate(spines, start=1):
            out.append(Cable(spine, leaf_ports[spine] + n, sup, g,
                             _p2p(p2p, g, SUPER_OFFSET + 2 * (n - 1))))
    return out
