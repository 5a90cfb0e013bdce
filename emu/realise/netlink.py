"""Install a `emu.realise.netplan.NamespacePlan` in its namespace: sysctls, then pyroute2
netlink (links, addresses, bridges, rules, routes, neighbours) and ethtool (thin I/O).

pyroute2 is imported when a plan is applied, not when this module is: `python -m emu
--help` and the commands that never touch a namespace stay fast.
"""

from __future__ import annotations

from emu.realise import nsutil
from emu.realise.netplan import MAIN_TABLE, SCOPE_UNIVERSE, NamespacePlan, NextHop, RouteEntry, Rule

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
            ipr.link("add", ifname=br.ifname, kind="bridge", address=br.mac)
            idx = ipr.link_lookup(ifname=br.ifname)[0]
            ipr.link("set", index=idx, mtu=br.mtu, state="up")
            ip, plen = br.address.split("/")
            ipr.addr("add", index=idx, address=ip, prefixlen=int(plen))
        for rule in plan.rules:
            ipr.rule("del" if rule.delete else "add", **rule_request(rule))
        for route in plan.routes:
            ipr.route("add", **route_request(route, lambda dev: ipr.link_lookup(ifname=dev)[0]))
        for nb in plan.neighbours:
            ipr.neigh("add", dst=nb.ip, lladdr=nb.mac,
                      ifindex=ipr.link_lookup(ifname=nb.dev)[0], state=NUD_PERMANENT)


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
