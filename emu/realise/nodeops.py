"""What a fault does inside a node's namespace (issue 14's faults, issue 17's servers):
a port down or up, a port's routes and permanent neighbours put back, a switch's routes
replaced, a frame sent from a GPU NIC's port. The kernel side of emu.faults.inject, kept apart
so that a node on another server gets the same calls through its part (emu.cluster.part's `ops`
request, emu.cluster.proxies.RemoteOps) - `NodeOps(fabric, tag)` acts on the namespaces of run
`tag` on this machine.

Book ch.10 / ch.13: a port that loses carrier has its routes and neighbours flushed by
the kernel; on the way back they are put back (`replace`), and the fabric-wide routes
are pushed to every switch (emu.faults.plan). ch.11: a malfunctioning NIC's PFC frames.
"""

from __future__ import annotations

import socket
import threading

from emu.realise import netlink, nsutil
from emu.realise.netplan import RouteEntry, plan_node
from topologies.model import Fabric

#: the calls a part accepts from its controller (emu.cluster.part)
CALLS = ("set_link", "restore_port", "set_routes", "send_frame")


class NodeOps:
    """Netlink and raw-socket actions in the namespaces of run `tag` here."""

    def __init__(self, fabric: Fabric, tag: str) -> None:
        self.fabric = fabric
        self.tag = tag
        self._sockets: dict[str, socket.socket] = {}  # GPU -> send-only raw socket
        self._lock = threading.Lock()  # (a storm's thread and a pause may share one)

    def ns(self, node: str) -> str:
        return nsutil.ns_name(self.tag, node)

    def set_link(self, node: str, ifname: str, up: bool) -> None:
        """The port administratively up or down (down: its carrier goes at both ends)."""
        netlink.set_link_state(self.ns(node), ifname, up)

    def restore_port(self, node: str, ifname: str) -> None:
        """After a port came back up: the routes (hosts) and permanent neighbours over it
        that the kernel flushed when it went down."""
        plan = plan_node(self.fabric, node)
        routes = [] if self.fabric.nodes[node].kind == "switch" else [
            r for r in plan.routes if any(h.dev == ifname for h in r.nexthops)]
        netlink.restore_port(self.ns(node), ifname, routes,
                             [nb for nb in plan.neighbours if nb.dev == ifname])

    def set_routes(self, switch: str, routes: list[RouteEntry], withdraw: list[str]) -> None:
        """A switch's routes replaced by `routes`; the prefixes of `withdraw` deleted
        (those already flushed with their port are skipped)."""
        netlink.replace_routes(self.ns(switch), routes, withdraw)

    def send_frame(self, gpu: str, frame: bytes) -> None:
        """One frame out of the GPU NIC's port, as that NIC would send it (a send-only
        raw socket in the host's namespace, opened on first use and kept)."""
        with self._lock:
            s = self._sockets.get(gpu)
            if s is None:
                g = self.fabric.gpus[gpu]
                with nsutil.in_netns(self.ns(g.host)):
                    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # 0: no rx
                    s.bind((g.nic, 0))
                self._sockets[gpu] = s
        s.send(frame)

    def close(self) -> None:
        with self._lock:
            for s in self._sockets.values():
                s.close()
            self._sockets.clear()
