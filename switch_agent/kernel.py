"""Read the control plane (addresses, routes, neighbours) from the switch namespace's
kernel with pyroute2, and watch it for changes (thin I/O; docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import socket

from pyroute2 import IPRoute

from switch_agent.forward import FibRoute

RTN_UNICAST = 1
MAIN_TABLE = 254
#: a next hop whose device is down (RTNH_F_DEAD) or, for a gateway, has no carrier
#: (RTNH_F_LINKDOWN: the far end went down): the kernel keeps it in the route, the agent
#: must not use it (issue 14, local reconvergence: a link failure is seen at both ends at
#: once). A connected route keeps LINKDOWN: the SVI bridges have no ports, so no carrier.
RTNH_F_DEAD = 0x01
RTNH_F_LINKDOWN = 0x10


def _down(flags: int, gateway: str | None) -> bool:
    return bool(flags & RTNH_F_DEAD or gateway and flags & RTNH_F_LINKDOWN)


def read_control_plane(ipr: IPRoute) -> tuple[list[FibRoute], dict[tuple[str, str], str],
                                                dict[str, str]]:
    """(routes, neighbours {(dev, ip): mac}, local IPv4 addresses {ip: ifname})."""
    names = {ln["index"]: ln.get_attr("IFLA_IFNAME") for ln in ipr.get_links()}
    local = {a.get_attr("IFA_ADDRESS"): names.get(a["index"], "")
             for a in ipr.get_addr(family=socket.AF_INET)}
    routes: list[FibRoute] = []
    for r in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE):
        if r["type"] != RTN_UNICAST:
            continue
        dst = r.get_attr("RTA_DST") or "0.0.0.0"
        prefix = f"{dst}/{r['dst_len']}"
        mp = r.get_attr("RTA_MULTIPATH")
        if mp:
            hops = tuple((nh.get_attr("RTA_GATEWAY"), names[nh["oif"]]) for nh in mp
                         if not _down(nh["flags"], nh.get_attr("RTA_GATEWAY")))
        else:
            oif = r.get_attr("RTA_OIF")
            if oif is None or _down(r["flags"], r.get_attr("RTA_GATEWAY")):
                continue
            hops = ((r.get_attr("RTA_GATEWAY"), names[oif]),)
        if hops:
            routes.append(FibRoute(prefix, hops))
    neigh: dict[tuple[str, str], str] = {}
    for n in ipr.get_neighbours(family=socket.AF_INET):
        mac = n.get_attr("NDA_LLADDR")
        ip = n.get_attr("NDA_DST")
        if mac and ip and n["ifindex"] in names:
            neigh[(names[n["ifindex"]], ip)] = mac
    return routes, neigh, local


IFF_UP = 0x1
IFF_LOWER_UP = 0x10000


def port_states(ipr: IPRoute) -> dict[str, bool]:
    """ifname -> carrier: administratively up and the far end up (IFF_LOWER_UP)."""
    want = IFF_UP | IFF_LOWER_UP
    return {ln.get_attr("IFLA_IFNAME"): ln["flags"] & want == want for ln in ipr.get_links()}
