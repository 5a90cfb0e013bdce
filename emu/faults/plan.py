"""A fault schedule against a fabric (issue 14): every target resolved to links, switches
and GPUs before any namespace exists, and the fabric's state as faults happen (pure).

`resolve(fabric, faults)` checks each event of a `emu.faults.schedule` schedule: a link is
named by either end (``rail1:eth5``) or by its two nodes (``rail1-spine1``, when only
one link joins them); ``switch`` names a switch, ``nic``/``storm``/``pause`` a GPU. An
unknown target is a ValueError naming the event and the token.

`FaultState` follows the schedule: which links are down (their own faults, or a switch
of theirs down) and which are degraded. Reconvergence is modelled in two steps, as in
an eBGP fabric with carrier detection (book ch.10, ch.13):

1. local: both ends lose carrier at once; each agent drops the next hops over the dead
   port as soon as its kernel reports it (`switch_agent.kernel`, `fib` events);
2. fabric-wide: the routes of every switch are recomputed on the graph without the
   failed links (`routes`) and pushed to every switch (emu.faults.inject), which withdraws
   what a far switch can no longer reach through a given neighbour (a spine that lost
   its link to a rail switch). The model time from the fault to each switch's last
   FIB change is the reconvergence time the run reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.realise.netplan import RouteEntry, plan_node
from emu.faults.schedule import Fault
from topologies.model import SWITCH, Fabric, Link
from topologies.routing import distances


@dataclass(frozen=True)
class Step:
    """One fault resolved against the fabric."""

    fault: Fault
    links: tuple[Link, ...] = ()  # the links it acts on (link, nic; a switch's links)
    switch: str | None = None  # switch down / up
    gpu: str | None = None  # nic, storm, pause

    @property
    def ends(self) -> tuple[tuple[str, str], ...]:
        """(node, ifname) of both ends of every link."""
        return tuple((p.node, p.ifname) for lk in self.links for p in (lk.a, lk.b))


def _where(f: Fault, where: str) -> str:
    return f"{where} {f.text!r}"


def find_link(fabric: Fabric, target: str, f: Fault, where: str = "--fault") -> Link:
    """The link named ``node:ifname`` (either end) or ``a-b`` (its two nodes)."""
    if ":" in target:
        node, ifname = target.split(":", 1)
        if node not in fabric.nodes:
            raise ValueError(f"{_where(f, where)}: no node {node!r}")
        try:
            return fabric.link_of(node, ifname)
        except KeyError:
            ports = ", ".join(p.ifname for p in fabric.node_ports(node))
            raise ValueError(f"{_where(f, where)}: {node} has no port {ifname!r} ({ports})") from None
    parts = target.split("-")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"{_where(f, where)}: {target!r}: a link is node:port or nodeA-nodeB")
    for n in parts:
        if n not in fabric.nodes:
            raise ValueError(f"{_where(f, where)}: no node {n!r}")
    found = [lk for lk in fabric.links if {lk.a.node, lk.b.node} == set(parts)]
    if not found:
        raise ValueError(f"{_where(f, where)}: no link between {parts[0]} and {parts[1]}")
    if len(found) > 1:
        ends = ", ".join(f"{lk.a.node}:{lk.a.ifname}" for lk in found)
        raise ValueError(f"{_where(f, where)}: {len(found)} links join {parts[0]} and {parts[1]};"
                         f" name one by its port ({ends})")
    return found[0]


def resolve(fabric: Fabric, faults: tuple[Fault, ...], where: str = "--fault") -> tuple[Step, ...]:
    """Every fault against `fabric`; ValueError names the first bad one (`where`: how the
    schedule is named, e.g. a lab's "faults")."""
    out = []
    for f in faults:
        if f.kind == "link":
            lk = find_link(fabric, f.target, f, where)
            if lk.kind == "frontend":
                raise ValueError(f"{_where(f, where)}: {f.target} is a frontend link (not the fabric)")
            if f.action == "degrade" and not any(
                    fabric.nodes[p.node].kind == SWITCH for p in (lk.a, lk.b)):
                raise ValueError(f"{_where(f, where)}: no switch end to degrade")
            out.append(Step(f, (lk,)))
        elif f.kind == "switch":
            n = fabric.nodes.get(f.target)
            if n is None or n.kind != SWITCH:
                names = ", ".join(s.name for s in fabric.switches())
                raise ValueError(f"{_where(f, where)}: no switch {f.target!r} ({names})")
            links = tuple(lk for _, _, lk in fabric.node_links(f.target) if lk.kind != "frontend")
            out.append(Step(f, links, switch=f.target))
        else:  # nic, storm, pause: a GPU
            g = fabric.gpus.get(f.target)
            if g is None:
                raise ValueError(f"{_where(f, where)}: no GPU {f.target!r} (e.g. "
                                 f"{', '.join(list(fabric.gpus)[:3])})")
            links = (fabric.link_of(g.host, g.nic),) if f.kind == "nic" else ()
            out.append(Step(f, links, gpu=g.name))
    return tuple(out)


class FaultState:
    """The fabric's failed and degraded links as the schedule unfolds."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.down_links: set[Link] = set()  # by link and nic faults
        self.down_switches: set[str] = set()
        self.degraded: dict[Link, Fault] = {}

    def failed(self) -> frozenset[Link]:
        """Every link without carrier: its own fault, or an end switch down."""
        out = set(self.down_links)
        for sw in self.down_switches:
            out |= {lk for _, _, lk in self.fabric.node_links(sw)}
        return frozenset(out)

    def apply(self, step: Step) -> tuple[set[Link], set[Link]]:
        """Take one step; returns (links that lost carrier, links that got it back)."""
        before = self.failed()
        f = step.fault
        if f.kind in ("link", "nic") and f.action in ("down", "up"):
            if f.action == "down":
                self.down_links.add(step.links[0])
            else:
                self.down_links.discard(step.links[0])
        elif f.kind == "switch" and f.action == "down":
            self.down_switches.add(step.switch)
        elif f.kind == "switch":
            self.down_switches.discard(step.switch)
        elif f.kind == "link" and f.action == "degrade":
            self.degraded[step.links[0]] = f
        elif f.kind == "link" and f.action == "restore":
            self.degraded.pop(step.links[0], None)
        after = self.failed()
        return set(after - before), set(before - after)

    def routes(self) -> dict[str, tuple[RouteEntry, ...]]:
        """switch -> its routes on the fabric without the failed links."""
        down = self.failed()
        return {s.name: plan_node(self.fabric, s.name, down).routes
                for s in self.fabric.switches()}

    def reach(self) -> dict[tuple[str, str], bool]:
        """(src GPU, dst GPU) -> whether a path exists now (the reach matrix of L10.2):
        both GPU links up and the destination rail's switch reachable from the source's."""
        down = self.failed()
        graph = self.fabric.switch_graph(down)
        out = {}
        for a in self.fabric.gpus.values():
            la = self.fabric.link_of(a.host, a.nic)
            sa = la.b.node if la.a.node == a.host else la.a.node
            for b in self.fabric.gpus.values():
                if a is b:
                    continue
                lb = self.fabric.link_of(b.host, b.nic)
                sb = lb.b.node if lb.a.node == b.host else lb.a.node
                ok = la not in down and lb not in down and sa not in self.down_switches \
                    and sb not in self.down_switches and _connected(graph, sa, sb)
                out[(a.name, b.name)] = ok
        return out


def _connected(graph: dict[str, list[str]], a: str, b: str) -> bool:
    return b in distances(graph, a)



def compare_reach(expected: dict[tuple[str, str], bool],
                  got: dict[tuple[str, str], bool]) -> dict:
    """Pings with the faults in effect against `FaultState.reach`: how many ordered pairs
    replied, how many the fabric without the failed links predicts, and every pair that
    differs ("h1g1->h2g1: replied, predicted unreachable")."""
    differ = [f"{a}->{b}: {'replied' if got[(a, b)] else 'no reply'}, predicted "
              f"{'reachable' if expected.get((a, b)) else 'unreachable'}"
              for a, b in sorted(got) if got[(a, b)] != bool(expected.get((a, b)))]
    return {"pairs": len(got), "reachable": sum(map(bool, got.values())),
            "predicted": sum(bool(expected.get(k)) for k in got), "unexpected": len(differ),
            "differ": differ}
