"""Static routes from the switch graph: shortest paths in hops, ECMP over every equal-cost
next hop (book ch.10 "ECMP", ch.13 Clos fabrics: Leaf-Spine-Leaf, Rail-Spine-Super-Spine-
Spine-Rail). Pure graph functions; `topologies.model.Fabric.routes` applies them.

The rule: a switch routes a rail subnet it does not carry towards the switch that carries
it, over every routed link whose far end is one hop closer (breadth-first distance in
hops). A full leaf-spine mesh gives a rail switch every uplink and a spine the rail's own
link; a partially connected leaf-spine gives the spines a leaf shares with the destination
leaf, or a longer path (through another leaf) when it shares none; a multi-pod fabric
gives Rail -> Spine -> Super-Spine -> Spine -> Rail.

Next-hop order is the local port order (`port_order`: eth1, eth2, ..., by number), not
the order links were created in. The kernel keeps a multipath route's next hops in the
order they were installed and the switch agent's ECMP member k is, in its default member
order, the k-th of them, so the cabling (which spine is on which uplink port) decides
which spine a given hash value picks (LABS.md L13.11, "altering the cabling pattern").
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping

_NUMBER = re.compile(r"(\d+)$")


def distances(graph: Mapping[str, Iterable[str]], start: str) -> dict[str, int]:
    """Hops from `start` to every node reachable in `graph` (node -> neighbours), BFS."""
    dist = {start: 0}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        for nxt in graph.get(node, ()):
            if nxt not in dist:
                dist[nxt] = dist[node] + 1
                todo.append(nxt)
    return dist


def port_order(ifname: str) -> tuple[int, str]:
    """Sort key of a port: its number (eth10 after eth9), then its name."""
    m = _NUMBER.search(ifname)
    return (int(m.group(1)) if m else -1, ifname)


def closer_hops(links: Iterable[tuple[str, str, str | None]], dist: Mapping[str, int],
                here: int) -> tuple[tuple[str | None, str], ...]:
    """The (gateway, ifname) next hops, in local port order, of the links (ifname, peer
    node, peer address) whose peer is one hop closer than `here` to the destination."""
    hops = [(ifname, gw) for ifname, peer, gw in links if dist.get(peer) == here - 1]
    return tuple((gw, ifname) for ifname, gw in sorted(hops, key=lambda h: port_order(h[0])))
