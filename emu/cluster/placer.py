"""Placement of a fabric's nodes on several servers (issue 17: emu on Mininet's cluster
mode): which server runs each host and switch, so that the servers share the work and as
few links as possible cross between them (each crossing link becomes a VXLAN tunnel,
`emu.realise.tunnel`). Pure: no I/O.

Mininet's cluster mode ships placers (`mininet.examples.cluster`: `RoundRobinPlacer`,
`SwitchBinPlacer` - switches in equal bins, each host with its switch) that ignore the
cut; a rail-optimized fabric has no "host's switch" (every host has a NIC on every
rail), so emu partitions the graph itself: a greedy balanced start in breadth-first
order, then Kernighan-Lin passes (Kernighan & Lin, 1970: move the node or swap the pair
that lowers the cut most while the loads stay within bounds, keep the best). The
frontend bridge (management network) is not placed: it is one bridge per server joined
by a tunnel of its own.

Work per node, the balance's unit: one per switch agent; per host, two per GPU (its
NIC emulator and its worker) - the processes that take the CPU in a run.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from topologies.model import FRONTEND, HOST, Fabric, Link

__all__ = ["Placement", "place", "work_of", "cut_links"]

SLACK = 1.25  #: a server may carry up to this times its equal share of the work


@dataclass(frozen=True)
class Placement:
    """Where each node runs, and the links that cross servers."""

    server_of: dict[str, str]
    cut: tuple[Link, ...]
    load: dict[str, int]  # server -> work placed on it

    def nodes_on(self, server: str) -> list[str]:
        """The nodes placed on `server`, in the fabric's order."""
        return [n for n, s in self.server_of.items() if s == server]

    def describe(self) -> str:
        """A line per server and the cut links."""
        out = [f"{s}: {', '.join(self.nodes_on(s))} (work {w})" for s, w in self.load.items()]
        out.append(f"{len(self.cut)} links cross servers"
                   + (": " + ", ".join(f"{l.a.node}:{l.a.ifname}-{l.b.node}:{l.b.ifname}"
                                       for l in self.cut) if self.cut else ""))
        return "\n".join(out)


def work_of(fab: Fabric) -> dict[str, int]:
    """The work of each placed node (the frontend bridge is not placed)."""
    gpus: dict[str, int] = {}
    for g in fab.gpus.values():
        gpus[g.host] = gpus.get(g.host, 0) + 1
    return {n.name: (2 * gpus.get(n.name, 0) if n.kind == HOST else 1)
            for n in fab.nodes.values() if n.kind != FRONTEND}


def _edges(fab: Fabric, nodes: set[str]) -> list[tuple[str, str, Link]]:
    return [(l.a.node, l.b.node, l) for l in fab.links if l.a.node in nodes and l.b.node in nodes]


def cut_links(fab: Fabric, server_of: dict[str, str]) -> tuple[Link, ...]:
    """The links whose two ends are on different servers."""
    return tuple(l for a, b, l in _edges(fab, set(server_of)) if server_of[a] != server_of[b])


def place(fab: Fabric, servers: list[str], pins: dict[str, str] | None = None,
          slack: float = SLACK) -> Placement:
    """Place every node of `fab` (but the frontend bridge) on one of `servers`, the
    nodes of `pins` where they say; ValueError names a bad pin or an impossible bound."""
    if not servers or len(set(servers)) != len(servers):
        raise ValueError(f"servers: distinct names needed, got {servers!r}")
    work = work_of(fab)
    pins = dict(pins or {})
    for node, srv in pins.items():
        if node not in work:
            raise ValueError(f"placement.{node}: no such host or switch in {fab.name}")
        if srv not in servers:
            raise ValueError(f"placement.{node}: no server {srv!r} (servers: {', '.join(servers)})")
    total = sum(work.values())
    cap = max(max(work.values()), int(slack * total / len(servers) + 0.999))
    load = {s: 0 for s in servers}
    for node, srv in pins.items():
        load[srv] += work[node]
    if any(v > cap for v in load.values()):
        raise ValueError(f"placement: the pins put more than {cap} work on one server")
    adj: dict[str, list[str]] = {n: [] for n in work}
    for a, b, _l in _edges(fab, set(work)):
        adj[a].append(b)
        adj[b].append(a)
    best = None
    for start in _starts(list(work)):  # local search from several starts, keep the best
        so, ld = _greedy(adj, work, servers, pins, load, cap, start)
        so = _refine(adj, work, so, ld, cap, set(pins))
        key = (_cut(adj, so), max(ld.values()) - min(ld.values()))
        if best is None or key < best[0]:
            best = (key, so, ld)
    assert best is not None
    _key, server_of, load = best
    order = {n: i for i, n in enumerate(work)}
    server_of = dict(sorted(server_of.items(), key=lambda kv: order[kv[0]]))
    return Placement(server_of, cut_links(fab, server_of), load)


STARTS = 16  #: greedy starts tried (each node of a small fabric, spread over a large one)


def _starts(nodes: list[str]) -> list[str]:
    step = max(1, len(nodes) // STARTS)
    return nodes[::step][:STARTS]


def _greedy(adj, work, servers, pins, load0, cap, start):
    """Place in breadth-first order from `start`, each node with most of its placed
    neighbours on a server it fits on (the least loaded on a tie)."""
    server_of, load = dict(pins), dict(load0)
    for node in _bfs_order(adj, [start] + [n for n in work if n != start]):
        if node in server_of:
            continue
        fits = [s for s in servers if load[s] + work[node] <= cap] or servers
        srv = max(fits, key=lambda s: (sum(server_of.get(m) == s for m in adj[node]),
                                       -load[s]))
        server_of[node] = srv
        load[srv] += work[node]
    return server_of, load


def _bfs_order(adj: dict[str, list[str]], nodes: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for start in nodes:
        if start in seen:
            continue
        seen.add(start)
        q = deque([start])
        while q:
            n = q.popleft()
            out.append(n)
            for m in adj[n]:
                if m not in seen:
                    seen.add(m)
                    q.append(m)
    return out


def _cut(adj: dict[str, list[str]], server_of: dict[str, str]) -> int:
    return sum(server_of[a] != server_of[b] for a in adj for b in adj[a]) // 2


def _gain(adj, server_of, node: str, to: str) -> int:
    """How much the cut shrinks if `node` moves to server `to`."""
    here = server_of[node]
    return sum((server_of[m] == to) - (server_of[m] == here) for m in adj[node])


def _refine(adj, work, server_of, load, cap, pinned) -> dict[str, str]:
    """Kernighan-Lin passes: the best move or swap within the bound, until none helps."""
    servers = list(load)
    free = [n for n in server_of if n not in pinned]
    while True:
        best, step = 0, None
        for n in free:
            for s in servers:
                if s != server_of[n] and load[s] + work[n] <= cap:
                    g = _gain(adj, server_of, n, s)
                    if g > best:
                        best, step = g, ((n, s),)
        for a, b in itertools.combinations(free, 2):
            sa, sb = server_of[a], server_of[b]
            if sa == sb or load[sa] - work[a] + work[b] > cap or load[sb] - work[b] + work[a] > cap:
                continue
            g = (_gain(adj, server_of, a, sb) + _gain(adj, server_of, b, sa)
                 - 2 * adj[a].count(b))  # an edge between the two stays cut
            if g > best:
                best, step = g, ((a, sb), (b, sa))
        if step is None:
            return server_of
        for n, s in step:
            load[server_of[n]] -= work[n]
            load[s] += work[n]
            server_of[n] = s
