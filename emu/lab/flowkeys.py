"""Flow keys that a switch's real ECMP hash puts where a lab wants them (pure).

Book ch.10 Figure 10-5 (L2393-2404: two single-QP elephants that "the hash happens to"
put on one spine link) and ch.13 "Hash Polarization" (L3398-3416); the lab catalogue's
L10.4 variant (a), "flow keys chosen so both hash to spine1". A RoCEv2 flow's key at a
switch is its 5-tuple - the two GPUs' addresses, UDP, a source port, 4791 - and the
source port is the flow's entropy (IBTA RoCEv2, Annex A17). Linux gives an RC QP the
source port `rdma_get_udp_sport(lqpn, rqpn)` (emucore.wire.roce.udp_sport), and emu's NICs
do the same, so a lab places a flow by naming its source port and gets that port by
pinning the two QPNs (`qpns_for`).

`peer_of` is the switch agent's own decision (switch_agent.forward: `flow_key`, the FIB's
member order, `ecmp_index` with the switch's seed and hash fields), made on the routes
the control plane installs (`Fabric.routes`), so what it says is what the agent does.
"""

from __future__ import annotations

import socket
import struct

from emucore.lbconfig import LoadBalance
from emucore.wire.roce_codes import ROCE_UDP_PORT, udp_sport
from switch_agent.forward import Fib, FibRoute, ecmp_index, flow_key
from topologies.model import Fabric

__all__ = ["SPORTS", "key_of", "first_switch", "peer_of", "sports_onto", "qpns_for"]

#: the source ports a RoCEv2 QP can have (rdma_get_udp_sport: 14 bits | 0xC000)
SPORTS = range(0xC000, 0x10000)
#: QPNs `qpns_for` pins, clear of 0 and 1 (SMI/GSI) and small enough to read
QPN_BASE = 0x100


def key_of(src_ip: str, dst_ip: str, sport: int, dport: int = ROCE_UDP_PORT) -> bytes:
    """The agent's flow key (switch_agent.forward.flow_key) of a UDP frame src -> dst."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 17, 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    return flow_key(bytes(14) + ip + struct.pack("!HHHH", sport, dport, 8, 0))


def first_switch(fab: Fabric, gpu: str) -> str:
    """The switch a GPU's NIC is cabled to (its rail switch)."""
    g = fab.gpus[gpu]
    return fab.peer(g.host, g.nic).node


def _members(fab: Fabric, switch: str, dst_ip: str, lb: LoadBalance) -> tuple[str, ...]:
    """The neighbours `switch` routes dst_ip towards, in its ECMP member order."""
    fib = Fib([FibRoute(r.prefix, r.nexthops) for r in fab.routes(switch)], {}, {},
              fab.nodes[switch].ecmp_seed, hash_fields=lb.hash, order=lb.order)
    hops = fib.lookup(socket.inet_aton(dst_ip)) or ()
    return tuple(fab.peer(switch, dev).node for _gw, dev in hops)


def _pick(fab: Fabric, switch: str, members: tuple[str, ...], key: bytes,
          lb: LoadBalance) -> str | None:
    if not members:
        return None
    n = len(members)
    return members[ecmp_index(key, fab.nodes[switch].ecmp_seed & 0xFFFFFFFF, n, lb.hash)
                   if n > 1 else 0]


def peer_of(fab: Fabric, switch: str, src_ip: str, dst_ip: str, sport: int,
            lb: LoadBalance | None = None) -> str | None:
    """The neighbour that `switch` sends the flow src_ip:sport -> dst_ip:4791 to under
    flow ECMP with `lb`'s hash fields and member order (default: the 5-tuple, route
    order); None when the switch has no route for dst_ip (it is delivered locally)."""
    lb = lb or LoadBalance()
    return _pick(fab, switch, _members(fab, switch, dst_ip, lb),
                 key_of(src_ip, dst_ip, sport), lb)


def sports_onto(fab: Fabric, src_gpu: str, dst_gpu: str, via: str, count: int = 1,
                lb: LoadBalance | None = None, start: int = SPORTS.start) -> list[int]:
    """The first `count` source ports from `start` whose flow src_gpu -> dst_gpu the
    source GPU's rail switch hashes towards `via` (`peer_of`); ValueError when fewer exist."""
    lb = lb or LoadBalance()
    sw = first_switch(fab, src_gpu)
    s, d = fab.gpus[src_gpu].ip, fab.gpus[dst_gpu].ip
    members = _members(fab, sw, d, lb)
    out: list[int] = []
    for p in range(start, SPORTS.stop) if via in members else ():
        if len(out) >= count:
            break
        if _pick(fab, sw, members, key_of(s, d, p), lb) == via:
            out.append(p)
    if len(out) < count:
        raise ValueError(f"{sw} hashes only {len(out)} source ports of {src_gpu} -> {dst_gpu} "
                         f"from {start:#x} towards {via!r}, not {count}")
    return out


def qpns_for(sport: int, taken: set[int] | frozenset[int] = frozenset()) -> tuple[int, int]:
    """A (sender, receiver) QPN pair whose RoCEv2 source port is `sport`
    (udp_sport(sender, receiver) == sport), neither in `taken`: the receiver's the
    lowest free odd QPN above QPN_BASE (an odd factor keeps every port reachable: with
    0x101, senders below 0x2A000 give all 2^14), the sender's the first that gives it."""
    if sport not in SPORTS:
        raise ValueError(f"sport: a RoCEv2 source port {SPORTS.start}..{SPORTS.stop - 1}, "
                         f"got {sport!r}")
    rq = next(q for q in range(QPN_BASE + 1, 1 << 24, 2) if q not in taken)
    for sq in range(QPN_BASE, 1 << 24):
        if sq != rq and sq not in taken and udp_sport(sq, rq) == sport:
            return sq, rq
    raise ValueError(f"sport: no QPN pair gives {sport:#x}")  # not reached (docstring)
