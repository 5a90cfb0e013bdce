"""emu's netlink, in one place (thin I/O; pyroute2 is imported here only, within emu/):
install a `emu.realise.netplan.NamespacePlan` in its namespace (sysctls, then links,
addresses, bridges, rules, routes, neighbours, and ethtool's offloads); a fault's
changes to a node (a port up or down, its routes and neighbours put back, a switch's
routes replaced: emu.realise.nodeops); the veth pairs and the frontend bridge Mininet's
nodes are built with (emu.realise.nodes); the VXLAN ends of links between servers
(issue 17, the rules in emu.realise.tunnel); and the veth of an emulated server
(emu.cluster.emuserver).

pyroute2 is imported when a function is called, not when this module is: `python -m emu
--help` and the commands that never touch a namespace stay fast.
"""

from __future__ import annotations

import subprocess

from emu.realise import nsutil
from emu.realise.earlydrop import tc_commands
from emu.realise.netplan import (MAIN_TABLE, SCOPE_UNIVERSE, IngressFilter, NamespacePlan,
                                 Neighbour, NextHop, RouteEntry, Rule)
from emu.realise.tunnel import VXLAN_PORT, check_mtu

NUD_PERMANENT = 0x80
# the kernel's feature names (ethtool -k's legacy names such as "scatter-gather" or
# "tcp-segmentation-offload" are not features and would be ignored)
OFFLOADS_OFF = ("tx-checksum-ip-generic", "tx-checksum-ipv4", "tx-checksum-ipv6",
                "tx-scatter-gather", "tx-scatter-gather-fraglist", "tx-tcp-segmentation",
                "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation",
                "tx-tcp6-segmentation", "tx-generic-segmentation", "tx-udp-segmentation",
                "rx-gro", "rx-gro-hw", "rx-lro", "rx-gro-list", "rx-udp-gro-forwarding",
                "rx-checksum")
SG = ("tx-checksum-ip-generic", "tx-scatter-gather")


def apply(plan: NamespacePlan, netns: str) -> None:
    """Configure namespace `netns` (it exists, its interfaces too) as `plan` says."""
    from pyroute2 import IPRoute

    with nsutil.in_netns(netns), IPRoute() as ipr:
        for key, value in plan.sysctls:
            nsutil.sysctl(key, value)
        for intf in plan.interfaces:
            idx = ipr.link_lookup(ifname=intf.ifname)[0]
            ipr.link("set", index=idx, state="up",
                     **({"mtu": intf.mtu} if intf.mtu is not None else {}))
            if intf.offloads_off:
                offloads_off(intf.ifname, keep=SG if intf.keep_sg else ())
            for addr in intf.addresses:
                ip, plen = addr.split("/")
                ipr.addr("add", index=idx, address=ip, prefixlen=int(plen))
        for br in plan.bridges:
            # no multicast snooping: its IGMP join of 224.0.0.106 would go to the hosts
            ipr.link("add", ifname=br.ifname, kind="bridge", address=br.mac,
                     br_mcast_snooping=0)
            idx = ipr.link_lookup(ifname=br.ifname)[0]
            ipr.link("set", index=idx, mtu=br.mtu, state="up")
            ip, plen = br.address.split("/")
            ipr.addr("add", index=idx, address=ip, prefixlen=int(plen))
            if br.cpu is not None:  # the SVI's CPU port: the kernel's frames to the agent
                inner, agent_end = br.cpu
                ipr.link("add", ifname=inner, kind="veth", peer={"ifname": agent_end})
                for name in br.cpu:
                    offloads_off(name)  # the kernel's frames leave with their checksums
                ipr.link("set", index=ipr.link_lookup(ifname=inner)[0], master=idx,
                         mtu=br.mtu, state="up")
                ipr.link("set", index=ipr.link_lookup(ifname=agent_end)[0], mtu=br.mtu,
                         state="up")
        for rule in plan.rules:
            ipr.rule("del" if rule.delete else "add", **rule_request(rule))
        for route in plan.routes:
            ipr.route("add", **route_request(route, _ifindex(ipr)))
        for nb in plan.neighbours:
            ipr.neigh("add", dst=nb.ip, lladdr=nb.mac,
                      ifindex=ipr.link_lookup(ifname=nb.dev)[0], state=NUD_PERMANENT)
        install_ingress_filters(plan.ingress_filters)


def install_ingress_filters(filters: tuple[IngressFilter, ...]) -> None:
    """Put each filter's classic BPF program on its port's ingress (the current
    namespace) with one `tc -batch` (pyroute2 0.9.7 encodes cls_bpf's TCA_BPF_OPS as
    one uint32, not the instruction array the kernel takes)."""
    if not filters:
        return
    lines = [c for f in filters for c in tc_commands(f.ifname, f.program)]
    try:
        done = subprocess.run(["tc", "-batch", "-"], input="\n".join(lines) + "\n", text=True,
                              capture_output=True, check=False)
    except FileNotFoundError:
        raise RuntimeError("tc: not found (iproute2; ./setup.sh installs it), needed for the "
                           "early-drop filters of the fabric ports") from None
    if done.returncode != 0:
        raise RuntimeError(f"tc: the early-drop filter of ports {[f.ifname for f in filters]}"
                           f" failed (needs cls_bpf and the clsact qdisc): "
                           f"{done.stderr.strip() or done.stdout.strip()}")


def _ifindex(ipr):
    """The index of a device of `ipr`'s namespace by name (IndexError: none)."""
    return lambda dev: ipr.link_lookup(ifname=dev)[0]


def rule_request(rule: Rule) -> dict:
    """pyroute2 `rule()` keywords of a rule."""
    req: dict = {"priority": rule.priority, "table": rule.table}
    if rule.src is not None:
        req.update(src=rule.src, src_len=32)
    if rule.iifname is not None:
        req["iifname"] = rule.iifname
    return req


def route_request(route: RouteEntry, ifindex) -> dict:
    """pyroute2 `route()` keywords of a route; `ifindex(dev)` resolves device names."""

    def hop(h: NextHop) -> dict:
        return {**({"gateway": h.gateway} if h.gateway is not None else {}),
                "oif": ifindex(h.dev)}

    req: dict = {"dst": route.dst}
    if len(route.nexthops) == 1:
        req.update(hop(route.nexthops[0]))
    else:
        req["multipath"] = [hop(h) for h in route.nexthops]
    if route.table != MAIN_TABLE:
        req["table"] = route.table
    if route.prefsrc is not None:
        req["prefsrc"] = route.prefsrc
    if route.scope != SCOPE_UNIVERSE:
        req["scope"] = route.scope
    return req


def offloads_off(ifname: str, keep: tuple[str, ...] = ()) -> None:
    """Turn checksum/segmentation/receive offloads off (the current namespace), except
    the features named in `keep`."""
    from pyroute2.ethtool import Ethtool

    with Ethtool() as et:
        feats = et.get_features(ifname)
        for name in OFFLOADS_OFF:
            if name in keep:
                continue
            f = feats.features.get(name)
            if f is not None and f.enable:
                f.enable = False
        et.set_features(ifname, feats)


# -- a fault's changes to a node (emu.realise.nodeops) --------------------------------

def set_link_state(netns: str, ifname: str, up: bool) -> None:
    """Port `ifname` of namespace `netns` administratively up or down."""
    from pyroute2 import IPRoute

    with nsutil.in_netns(netns), IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=ifname)[0]
        ipr.link("set", index=idx, state="up" if up else "down")


def restore_port(netns: str, ifname: str, routes: list[RouteEntry],
                 neighbours: list[Neighbour]) -> None:
    """Put back (`replace`) the routes and permanent neighbours over port `ifname` of
    namespace `netns` that the kernel flushed when it went down."""
    from pyroute2 import IPRoute

    with nsutil.in_netns(netns), IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=ifname)[0]
        for r in routes:
            ipr.route("replace", **route_request(r, _ifindex(ipr)))
        for nb in neighbours:
            ipr.neigh("replace", dst=nb.ip, lladdr=nb.mac, ifindex=idx, state=NUD_PERMANENT)


def replace_routes(netns: str, routes: list[RouteEntry], withdraw: list[str]) -> None:
    """Routes of namespace `netns` replaced by `routes`; the prefixes of `withdraw`
    deleted from the main table (those already gone are skipped)."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    with nsutil.in_netns(netns), IPRoute() as ipr:
        for r in routes:
            ipr.route("replace", **route_request(r, _ifindex(ipr)))
        for dst in withdraw:
            try:
                ipr.route("del", dst=dst, table=MAIN_TABLE)
            except NetlinkError:
                pass  # already flushed with its port


# -- the nodes' links (emu.realise.nodes) ---------------------------------------------

def add_veth(**kwargs) -> None:
    """Create a veth pair as `ipr.link("add", kind="veth", ...)` keywords say (its ends
    placed in their namespaces by IFLA_NET_NS_PID, MACs set at creation)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        ipr.link("add", **kwargs)


def link_kind(link) -> str | None:
    """The IFLA_INFO_KIND of a pyroute2 link message (veth, bridge, ...), None for lo."""
    info = link.get_attr("IFLA_LINKINFO")
    return info.get_attr("IFLA_INFO_KIND") if info else None


def bridge_all(netns: str, bridge: str = "br0") -> None:
    """Bridge `bridge`, created in namespace `netns`, with every interface there but lo
    and other bridges (a rail switch's SVI bridge, which the kernel refuses as a port:
    ELOOP) as its port; all up."""
    from pyroute2 import IPRoute

    with nsutil.in_netns(netns), IPRoute() as ipr:
        ports = [(l["index"], l.get_attr("IFLA_IFNAME")) for l in ipr.get_links()
                 if link_kind(l) != "bridge"]
        ipr.link("add", ifname=bridge, kind="bridge")
        br = ipr.link_lookup(ifname=bridge)[0]
        for idx, name in ports:
            if name != "lo":
                ipr.link("set", index=idx, master=br, state="up")
        ipr.link("set", index=br, state="up")


# -- links between servers (issue 17, emu.realise.tunnel) -----------------------------

def vxlan_link(ipr, ifname: str, vni: int, local: str, remote: str, underlay: str, mtu: int,
               mac: str | None = None, port: int = VXLAN_PORT) -> int:
    """Create VXLAN device `ifname` (VNI `vni`, one remote VTEP, no learning) on
    `underlay` in the namespace of the pyroute2 IPRoute `ipr`; returns its index. The
    caller moves it into the node's namespace (`ipr.link("set", index=i, net_ns_fd=...)`)."""
    if not 1 <= vni < 1 << 24:
        raise ValueError(f"vni: 1..2^24-1, got {vni!r}")
    dev = ipr.link_lookup(ifname=underlay)
    if not dev:
        raise ValueError(f"underlay: no interface {underlay!r}")
    ipr.link("add", ifname=ifname, kind="vxlan", vxlan_id=vni, vxlan_local=local,
             vxlan_group=remote, vxlan_link=dev[0], vxlan_port=port, vxlan_learning=0)
    idx = ipr.link_lookup(ifname=ifname)[0]
    ipr.link("set", index=idx, mtu=mtu, **({"address": mac} if mac else {}))
    return idx


def underlay_to(ipr, remote: str) -> tuple[str, str]:
    """(interface, source address) this namespace reaches `remote` by (its route), as
    a VXLAN end needs; ValueError when there is no route."""
    try:
        route = ipr.route("get", dst=remote)[0]
    except Exception as exc:  # pyroute2's NetlinkError: no route
        raise ValueError(f"no route to the server at {remote}: {exc}") from None
    oif, src = route.get_attr("RTA_OIF"), route.get_attr("RTA_PREFSRC")
    if oif is None or src is None:
        raise ValueError(f"no route with a source address to the server at {remote}")
    return ipr.get_links(oif)[0].get_attr("IFLA_IFNAME"), src


def source_address_to(remote: str) -> str:
    """The address this (the root) namespace reaches `remote` from (`underlay_to`)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return underlay_to(ipr, remote)[1]


def open_end(ipr, end, netns: str, tmpname: str, mtu: int) -> None:
    """Make one end of a crossing link (an emu.cluster.plan.TunnelEnd): a VXLAN device on
    the underlay towards `end.remote`, created under `tmpname` in this (the server's)
    namespace, moved into the node's namespace `netns` (a name under /var/run/netns)
    and renamed there to the port's name, with the port's MAC. The underlay's MTU must
    carry `mtu`-byte frames encapsulated (ValueError naming the interface)."""
    from pyroute2 import IPRoute

    dev, src = underlay_to(ipr, end.remote)
    have = ipr.get_links(ipr.link_lookup(ifname=dev)[0])[0].get_attr("IFLA_MTU")
    try:
        check_mtu(have, mtu)
    except ValueError as exc:
        raise ValueError(f"{dev} (towards {end.remote}): {exc}") from None
    idx = vxlan_link(ipr, tmpname, end.vni, src, end.remote, dev, mtu, end.mac)
    ipr.link("set", index=idx, net_ns_fd=netns)
    with nsutil.in_netns(netns), IPRoute() as nipr:
        nipr.link("set", index=nipr.link_lookup(ifname=tmpname)[0], ifname=end.ifname)


def open_ends(ends: list[tuple]) -> None:
    """`open_end` for each (end, netns, tmpname, mtu), all from this namespace."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for end, netns, tmpname, mtu in ends:
            open_end(ipr, end, netns, tmpname, mtu)


# -- an emulated server's veth (emu.cluster.emuserver) --------------------------------

def server_veth(ifname: str, netns: str, peer: str, local: str, remote: str, prefixlen: int,
                mtu: int) -> None:
    """Veth `ifname` here (address `local`) and its end `peer` in namespace `netns`
    (address `remote`), both up with MTU `mtu`; lo up there too."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        ipr.link("add", ifname=ifname, kind="veth", peer={"ifname": peer, "net_ns_fd": netns})
        i = ipr.link_lookup(ifname=ifname)[0]
        ipr.addr("add", index=i, address=local, prefixlen=prefixlen)
        ipr.link("set", index=i, state="up", mtu=mtu)
    with nsutil.in_netns(netns), IPRoute() as ipr:
        i = ipr.link_lookup(ifname=peer)[0]
        ipr.addr("add", index=i, address=remote, prefixlen=prefixlen)
        ipr.link("set", index=i, state="up", mtu=mtu)
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")


def delete_links(ifname: str) -> None:
    """Every interface of this namespace named `ifname` deleted (none: nothing)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for i in ipr.link_lookup(ifname=ifname):
            ipr.link("del", index=i)
