"""What each server builds when one fabric is spread over several (issue 17): its nodes,
the ends of the links that cross to another server (VXLAN tunnels, emu.realise.tunnel) and the
delay its agents still add on each tunnelled port. Pure: the placement, the servers'
underlay addresses and the measured tunnel latencies come in, data goes out.

* Nodes: `emu.cluster.placer` places hosts and switches; the frontend bridge (management
  network, not the object of study) runs on the server `emu run` runs on, and each host elsewhere
  reaches it over a tunnel of its own, so the PyTorch rendezvous works as on one machine.
* Tunnels: one VXLAN network identifier per crossing link, from the run's tag (tag x 256
  + i, i = 1..255), so two runs on the same servers never share one; each end names
  its node, the interface name and MAC the fabric gives that port, and the other
  server's underlay address (the one remote VTEP).
* Delay: a crossing fabric link's agents add `emu.realise.tunnel.compensated_delay` - the
  model delay x TDF less the tunnel's one-way latency - so the link takes its model
  delay in all; a link too short for the tunnel is an error naming it and the TDF that
  fits. A port whose link stays on one server keeps the model delay x TDF. (A host's
  NIC adds no link delay of its own, so on a crossing host link the host -> switch
  direction carries the tunnel's latency on top: latency / TDF model, 5 ns for 50 us
  at TDF 10000.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from emu.realise import tunnel
from emu.cluster.placer import Placement
from topologies.model import FRONTEND, SWITCH, Fabric, Link

__all__ = ["TunnelEnd", "ServerPart", "plan", "vni", "placed", "server_pairs", "pair"]

MAX_TUNNELS = 255


@dataclass(frozen=True)
class TunnelEnd:
    """One end of a crossing link, on the server that holds `node`."""

    node: str
    ifname: str
    mac: str
    vni: int
    remote: str  #: the other server's underlay address
    link: str  #: a:ethX-b:ethY (emu.realise.tunnel.link_name)
    frontend: bool = False

    def to_dict(self) -> dict:
        """JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class ServerPart:
    """What one server builds: its nodes, tunnel ends and per-port agent delays."""

    server: str
    nodes: tuple[str, ...]
    tunnels: tuple[TunnelEnd, ...]
    #: "switch:ifname" -> lab seconds the agent adds on a tunnelled port
    delays: dict[str, float]

    def to_dict(self) -> dict:
        """JSON-ready (the spec a remote part reads, emu.cluster.part)."""
        return {"server": self.server, "nodes": list(self.nodes),
                "tunnels": [t.to_dict() for t in self.tunnels], "delays": dict(self.delays)}

    @classmethod
    def from_dict(cls, d: dict) -> "ServerPart":
        """The inverse of to_dict."""
        return cls(d["server"], tuple(d["nodes"]), tuple(TunnelEnd(**t) for t in d["tunnels"]),
                   {k: float(v) for k, v in d["delays"].items()})


def vni(tag: str, i: int) -> int:
    """The VXLAN network identifier of a run's i-th crossing link (1-based)."""
    if not 1 <= i <= MAX_TUNNELS:
        raise ValueError(f"tunnels: at most {MAX_TUNNELS} links may cross servers, "
                         f"got link number {i}")
    return (int(tag, 16) % (1 << 16)) * 256 + i


def pair(a: str, b: str) -> tuple[str, str]:
    """The key of two servers in a latency table (order-free)."""
    return (a, b) if a <= b else (b, a)


def placed(fab: Fabric, placement: Placement, frontend: str) -> dict[str, str]:
    """Node -> server for every node: the placement, the frontend bridge on `frontend`."""
    server_of = dict(placement.server_of)
    for n in fab.nodes.values():
        if n.kind == FRONTEND:
            server_of[n.name] = frontend
    missing = [n for n in fab.nodes if n not in server_of]
    if missing:
        raise ValueError(f"placement: nodes not placed: {', '.join(missing)}")
    return server_of


def server_pairs(fab: Fabric, placement: Placement, frontend: str) -> list[tuple[str, str]]:
    """The pairs of servers that at least one link joins (their latency is measured)."""
    so = placed(fab, placement, frontend)
    return sorted({pair(so[lk.a.node], so[lk.b.node]) for lk in crossing(fab, so)})


def crossing(fab: Fabric, server_of: dict[str, str]) -> list[Link]:
    """Every link whose ends are on two servers: the cut fabric links, then the frontend
    links of hosts that are not on the frontend bridge's server."""
    return [lk for lk in fab.links if server_of[lk.a.node] != server_of[lk.b.node]]


def plan(fab: Fabric, placement: Placement, servers: list[str], address: dict[str, str],
         latency: dict[tuple[str, str], float], tag: str,
         frontend: str | None = None) -> dict[str, ServerPart]:
    """Server -> its part. `servers` in file order; the frontend bridge goes on server
    `frontend` (default the first); `address`: server -> underlay IPv4 address;
    `latency`: `pair(a, b)` -> lab seconds one way between servers a and b (measured),
    for every pair of `server_pairs`."""
    server_of = placed(fab, placement, frontend or servers[0])
    ends: dict[str, list[TunnelEnd]] = {s: [] for s in servers}
    delays: dict[str, dict[str, float]] = {s: {} for s in servers}
    for i, lk in enumerate(crossing(fab, server_of), start=1):
        sa, sb = server_of[lk.a.node], server_of[lk.b.node]
        front = lk.kind == "frontend"
        v = vni(tag, i)
        name = tunnel.link_name(lk)
        if not front:
            lab = tunnel.compensated_delay(lk, latency[pair(sa, sb)], fab.tdf)
        for port, here, there in ((lk.a, sa, sb), (lk.b, sb, sa)):
            ends[here].append(TunnelEnd(port.node, port.ifname, port.mac, v, address[there],
                                        name, front))
            if not front and fab.nodes[port.node].kind == SWITCH:  # the agents delay
                delays[here][f"{port.node}:{port.ifname}"] = lab
    return {s: ServerPart(s, tuple(n for n in fab.nodes if server_of[n] == s),
                          tuple(ends[s]), delays[s]) for s in servers}
