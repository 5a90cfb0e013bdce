"""Which load balancing each switch of a run uses (book ch.12; `emucore.lbconfig`).

Sources, later ones on top of earlier ones, field by field:
1. flow ECMP on the 5-tuple (`emucore.lbconfig.LoadBalance()`);
2. the QoS configuration's (`--qos` YAML `load_balance:` or an NX-OS paste with
   ``hardware profile dlb``, Example 12-1), on every switch;
3. the topology's `lb:` (`Fabric.lb`), then `--lb SPEC` / a lab's `lb:` entries: ``SPEC`` for every switch, ``WHO=SPEC`` for one
   switch (``rail1=spray``) or one role (``rail=flowlet``, ``spine=...``); SPEC is
   ``MODE[,key=value...]`` (`emucore.lbconfig.parse_lb`);
4. pins (`Pin`): a lab flow's ``via: spine1`` pins that flow on its first switch.
Checked against the fabric before anything is built: unknown switches, roles and
interfaces are errors naming the entry. Every switch of the run accepts every DLB MAC
in use (the book: "the same DLB MAC address must be configured on all participating
switches").
"""

from __future__ import annotations

from dataclasses import replace

from emucore.lbconfig import LB_KEYS, LoadBalance, Pin, parse_lb
from emucore.qos.qosconfig import QosConfig
from topologies.model import Fabric


def resolve(fabric: Fabric, qos: QosConfig | None, specs: list[str] | tuple[str, ...] = (),
            source: str = "--lb") -> dict[str, LoadBalance]:
    """Switch name -> its LoadBalance for this run."""
    base = qos.load_balance if qos is not None and qos.load_balance is not None else LoadBalance()
    switches = [s.name for s in fabric.switches()]
    roles = {s.role for s in fabric.switches()}
    out = {name: base for name in switches}
    every = [(f"topology lb[{i}]", s) for i, s in enumerate(fabric.lb)]
    every += [(f"{source}[{i}]" if len(specs) > 1 else source, s) for i, s in enumerate(specs)]
    for where, spec in every:
        who, sep, rest = spec.partition("=")
        if sep and "," not in who and who.strip() not in LB_KEYS:
            targets, text = _targets(who.strip(), switches, fabric, roles, where), rest
        else:
            targets, text = switches, spec
        for name in targets:
            out[name] = parse_lb(text, out[name], where)
    for name, lb in out.items():  # an NX-OS paste names the ports of the switch it was for
        if lb.interfaces == base.interfaces:
            continue
        ports = {p.ifname for p in fabric.node_ports(name)}
        for ifname in lb.interfaces:
            if ifname not in ports:
                raise ValueError(f"{source}: interface {ifname!r} is not a port of {name} "
                                 f"({', '.join(sorted(ports))})")
    return out


def _targets(who: str, switches: list[str], fabric: Fabric, roles: set[str],
             where: str) -> list[str]:
    if who in switches:
        return [who]
    if who in roles:
        return [s.name for s in fabric.switches() if s.role == who]
    raise ValueError(f"{where}: {who!r} is neither a switch ({', '.join(switches)}) nor a role "
                     f"({', '.join(sorted(roles))})")


def pin_via(fabric: Fabric, lbs: dict[str, LoadBalance], src_gpu: str, dst_gpu: str,
            via: str, where: str = "via") -> None:
    """Pin the flows src -> dst on their first switch's port towards `via` (a neighbour
    of that switch: a spine, usually): the flows collide on purpose (L10.4, L12.1)."""
    g, d = fabric.gpus[src_gpu], fabric.gpus[dst_gpu]
    first = fabric.peer(g.host, g.nic).node
    port = next((local.ifname for local, remote, _ in fabric.node_links(first)
                 if remote.node == via), None)
    if port is None:
        raise ValueError(f"{where}: {first} (the first switch of {src_gpu}) has no link to "
                         f"{via!r}")
    lb = lbs[first]
    lbs[first] = replace(lb, pins=lb.pins + (Pin(g.ip, d.ip, port),))


def dlb_macs(lbs: dict[str, LoadBalance]) -> tuple[str, ...]:
    """Every DLB MAC in use (each switch accepts all of them)."""
    return tuple(sorted({lb.dlb_mac for lb in lbs.values() if lb.dlb_mac}))


def describe(lbs: dict[str, LoadBalance]) -> list[str]:
    """Lines for the terminal: one per distinct setting, naming its switches."""
    by: dict[str, list[str]] = {}
    for name, lb in lbs.items():
        text = lb.describe() + (f", {len(lb.pins)} pinned flow(s)" if lb.pins else "")
        by.setdefault(text, []).append(name)
    return [f"{', '.join(names)}: {text}" for text, names in by.items()]
