"""NX-OS-like `show` commands rendered from plain dicts (book ch.11 QoS, PFC, LLDP/DCBX).

Pure text renderers: the agent answers a control request with a *state dict*, and
`dispatch(command, state)` turns a command line into what an engineer expects from a
Nexus switch configured as in the book (ch.11 Examples 11-1..11-7). Commands
(keywords may be abbreviated to any unique prefix: ``sh queu int eth3``):

* ``show queuing interface [ethN | ethernet1/N]``
* ``show interface priority-flow-control``
* ``show policy-map``
* ``show lldp neighbors``

State dict schema (every key optional unless marked; queue and priority keys may be
ints or their decimal strings, as JSON makes them):

    {
      "switch": "rail1",                                # system name
      "qos": QosConfig.to_dict(),                       # required by show policy-map;
                                                        # gives WRED/limits to show queuing
      "ports": {
        "eth3": {
          "queues": {                                   # egress queue -> counters
            "3": {"depth_bytes": 0, "max_depth_bytes": 0,
                  "enq_pkts": 0, "enq_bytes": 0, "tx_pkts": 0, "tx_bytes": 0,
                  "ecn_marked": 0,
                  "drops": {"wred": 0, "tail": 0, "watchdog": 0, ...}},   # reason -> pkts
          },
          "ingress": {"3": {"bytes": 0, "xoff": false}}, # per-priority ingress accounting
          "pfc": {"mode": "auto",                       # configured mode auto|on|off
                  "active": [3],                        # operational lossless priorities
                  "paused": [3],                        # priorities the peer paused us on
                  "rx_pause": {"3": 0}, "tx_pause": {"3": 0},   # PFC frames per priority
                  "watchdog": {"enabled": true, "state": "ok",  # ok | storm | restored ...
                               "storms": 0, "dropped": 0}},
        },
      },
      "lldp": {"eth3": Neighbor.to_dict() + {"age_s": 3.0, "capability": "BR"}},
    }
"""

from __future__ import annotations

from typing import Any

from emucore.qos.qosconfig import QosConfig
from emucore.qos.fields import NUM_QUEUES
from emucore.qos.nxos_lines import interface_name
from emucore.qos.nxos_render import to_nxos

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("show", "queuing", "interface"),
    ("show", "interface", "priority-flow-control"),
    ("show", "policy-map"),
    ("show", "lldp", "neighbors"),
    ("show", "mac", "address-table"),
)


def _get(d: dict | None, key: int) -> Any:
    if not d:
        return None
    return d.get(key, d.get(str(key)))


def _prios(d: dict | None) -> dict[int, int]:
    return {int(k): int(v) for k, v in (d or {}).items()}


def _qos(state: dict) -> QosConfig | None:
    q = state.get("qos")
    return QosConfig.from_dict(q) if q else None


def _rule(ch: str = "-", n: int = 78) -> str:
    return ch * n


def show_queuing(state: dict, ifname: str | None = None) -> str:
    """``show queuing interface``: queue configuration, then one counter box per queue."""
    ports = state.get("ports", {})
    names = [ifname] if ifname else sorted(ports, key=_port_key)
    if ifname and ifname not in ports:
        known = ", ".join(sorted(ports, key=_port_key))
        raise ValueError(f"% Invalid interface {ifname!r} (ports: {known})")
    cfg = _qos(state)
    out: list[str] = []
    for name in names:
        p = ports[name]
        paused = set(p.get("pfc", {}).get("paused", []))
        out += [f"Egress Queuing for {name} [System]", _rule(),
                "QoS-Group# Bandwidth% PrioLevel   QLimit(B)  WRED-Min(B)  WRED-Max(B) Prob%  ECN",
                _rule()]
        for q in reversed(range(NUM_QUEUES)):
            if cfg is None:
                out.append(f"{q:>10} {'-':>10} {'-':>9} {'-':>11}")
                continue
            qc = cfg.queuing.queues[q]
            w = qc.wred
            out.append(f"{q:>10} {'-' if qc.strict else qc.bandwidth_percent:>10} "
                       f"{'1' if qc.strict else '-':>9} {qc.limit_bytes:>11} "
                       f"{w.min_bytes if w else '-':>12} {w.max_bytes if w else '-':>12} "
                       f"{f'{w.max_prob_pct:g}' if w else '-':>5} "
                       f"{('yes' if w.ecn else 'no') if w else '-':>4}")
        if cfg is not None:
            out.append(f"No-drop (PFC) priorities: {_list(sorted(cfg.pfc.no_drop))}   "
                       f"xOFF {cfg.pfc.xoff_bytes} B  xON {cfg.pfc.xon_bytes} B  "
                       f"headroom {cfg.pfc.headroom_bytes} B")
        out.append("")
        idle = []
        for q in reversed(range(NUM_QUEUES)):
            c = _get(p.get("queues"), q) or {}
            qc = cfg.queuing.queues[q] if cfg else None
            busy = (any(v for k, v in c.items() if k != "drops")
                    or any((c.get("drops") or {}).values()))
            if not busy and not (qc and (qc.strict or qc.bandwidth_percent or qc.wred)) \
                    and q not in paused and not _get(p.get("ingress"), q):
                idle.append(q)
                continue
            rows = [("Tx Pkts", c.get("tx_pkts", 0)), ("Tx Byts", c.get("tx_bytes", 0)),
                    ("Enq Pkts", c.get("enq_pkts", 0)), ("Enq Byts", c.get("enq_bytes", 0)),
                    ("ECN Marked Pkts", c.get("ecn_marked", 0))]
            rows += [(f"{r.upper() if r == 'wred' else r.capitalize()} Drop Pkts", n)
                     for r, n in sorted((c.get("drops") or {}).items())]
            rows += [("Q Depth Byts", c.get("depth_bytes", 0)),
                     ("Max Q Depth Byts", c.get("max_depth_bytes", 0))]
            ing = _get(p.get("ingress"), q)
            if ing:
                rows += [("Ingress Buf Byts", ing.get("bytes", 0)),
                         ("Ingress xOFF", "yes" if ing.get("xoff") else "no")]
            if q in paused:
                rows.append(("PFC Paused", "yes"))
            out += ["+" + "-" * 60 + "+", f"|{f'QOS GROUP {q}':^60}|", "+" + "-" * 60 + "+"]
            out += [f"|{k:>28} | {v!s:>29}|" for k, v in rows]
            out.append("+" + "-" * 60 + "+")
        if idle:
            out.append(f"QOS GROUP {_list(idle)}: no traffic, no bandwidth (not shown)")
        out.append("")
    return "\n".join(out)


def _port_key(name: str) -> tuple:
    digits = "".join(ch for ch in name if ch.isdigit())
    return (name.rstrip("0123456789/"), int(digits) if digits else 0, name)


def _list(xs) -> str:
    return ",".join(str(x) for x in xs) if xs else "-"


def show_pfc(state: dict) -> str:
    """``show interface priority-flow-control``: mode, oper state, pause counters, watchdog."""
    ports = state.get("ports", {})
    head = (f"{'Port':<12}{'Mode':<6}{'Oper(VL bmap)':<15}{'RxPPP':>9}{'TxPPP':>9}  "
            f"{'Paused':<8}Watchdog")
    out = ["", "=" * len(head) + "=" * 12, head, "=" * len(head) + "=" * 12, ""]
    detail: list[str] = []
    for name in sorted(ports, key=_port_key):
        pfc = ports[name].get("pfc") or {}
        active = sorted(int(x) for x in pfc.get("active", []))
        bmap = sum(1 << x for x in active)
        oper = f"On  ({bmap:x})" if active else "Off"
        rx, tx = _prios(pfc.get("rx_pause")), _prios(pfc.get("tx_pause"))
        wd = pfc.get("watchdog") or {}
        wds = (f"On  {wd.get('state', 'ok')}" if wd.get("enabled") else "Off")
        if wd.get("storms"):
            wds += f" storms {wd['storms']} dropped {wd.get('dropped', 0)}"
        out.append(f"{name:<12}{str(pfc.get('mode', 'auto')).capitalize():<6}{oper:<15}"
                   f"{sum(rx.values()):>9}{sum(tx.values()):>9}  "
                   f"{_list(sorted(pfc.get('paused', []))):<8}{wds}")
        for prio in sorted(set(rx) | set(tx) | set(active)):
            detail.append(f"{name:<12}{prio:>4}{rx.get(prio, 0):>11}{tx.get(prio, 0):>11}"
                          f"  {'lossless' if prio in active else ''}")
    if detail:
        out += ["", f"{'Port':<12}{'Prio':>4}{'RxPPP':>11}{'TxPPP':>11}", "-" * 50] + detail
    return "\n".join(out) + "\n"


def show_policy_map(state: dict) -> str:
    """``show policy-map``: the effective QoS configuration in NX-OS syntax."""
    cfg = _qos(state)
    if cfg is None:
        raise ValueError("% No QoS configuration in this switch's state")
    return f"! effective QoS configuration '{cfg.name}'\n" + to_nxos(cfg)


def show_lldp_neighbors(state: dict) -> str:
    """``show lldp neighbors``: one line per port with an LLDP neighbour, plus DCBX PFC."""
    nbrs = state.get("lldp") or {}
    out = ["Capability codes:",
           "  (R) Router, (B) Bridge, (T) Telephone, (C) DOCSIS Cable Device",
           "  (W) WLAN Access Point, (P) Repeater, (S) Station, (O) Other",
           f"{'Device ID':<20} {'Local Intf':<15} {'Hold-time':<10} {'Capability':<11} "
           f"{'Port ID':<16} DCBX PFC"]
    for port in sorted(nbrs, key=_port_key):
        n = nbrs[port]
        pfc = n.get("pfc_enabled")
        hold = int(n.get("ttl", 0) - n.get("age_s", 0))
        out.append(f"{(n.get('system_name') or n.get('chassis_id', '?'))[:20]:<20} {port:<15} "
                   f"{hold:<10} {n.get('capability', ''):<11} {n.get('port_id', ''):<16} "
                   f"{'none' if pfc is None else _list(pfc)}")
    out.append(f"Total entries displayed: {len(nbrs)}")
    return "\n".join(out) + "\n"


def _nxos_mac(mac: str) -> str:
    h = mac.replace(":", "").lower()
    return f"{h[0:4]}.{h[4:8]}.{h[8:12]}"


def show_mac_address_table(state: dict, vlan: int | None = None) -> str:
    """``show mac address-table [vlan N]`` (NX-OS layout): the static entries of each
    rail VLAN (ch.13 Fig 13-4: one VLAN per rail on a shared rail switch)."""
    rows = [r for r in state.get("mac_table") or () if vlan is None or r["vlan"] == vlan]
    rows.sort(key=lambda r: (r["vlan"], _port_key(r["port"]), r["mac"]))
    out = ["Legend:",
           "        * - primary entry, G - Gateway MAC, (R) - Routed MAC, O - Overlay MAC",
           "        age - seconds since last seen,+ - primary entry using vPC Peer-Link,",
           "   VLAN     MAC Address      Type      age     Secure NTFY Ports",
           "---------+-----------------+--------+---------+------+----+------------------"]
    for r in rows:
        out.append(f"*  {r['vlan']:<7}{_nxos_mac(r['mac']):<17}{'static':<9}"
                   f"{'-':<10}{'F':<7}{'F':<5}{r['port']}")
    out.append(f"Total MAC Addresses: {len(rows)}")
    return "\n".join(out) + "\n"


def _match(tokens: list[str]) -> tuple[tuple[str, ...], list[str]]:
    cands = list(COMMANDS)
    for pos, tok in enumerate(tokens):
        live = [c for c in cands if pos < len(c) and c[pos].startswith(tok.lower())]
        if not live:
            if any(len(c) == pos for c in cands):
                return next(c for c in cands if len(c) == pos), tokens[pos:]
            marker = " ".join(tokens[:pos])
            raise ValueError(f"% Invalid command at '^' marker.\n{' '.join(tokens)}\n"
                             f"{' ' * (len(marker) + (1 if pos else 0))}^\n"
                             f"Known: {'; '.join(' '.join(c) for c in COMMANDS)}")
        exact = [c for c in live if c[pos] == tok.lower()]
        cands = exact or live
        if len({c[pos] for c in cands}) > 1:
            raise ValueError(f"% Ambiguous command: {tok!r} could be "
                             f"{', '.join(sorted({c[pos] for c in cands}))}")
    done = [c for c in cands if len(c) == len(tokens)]
    if not done:
        raise ValueError(f"% Incomplete command: {' '.join(tokens)!r} "
                         f"(try: {'; '.join(' '.join(c) for c in cands)})")
    return done[0], []


def dispatch(command_text: str, state: dict) -> str:
    """Run one ``show`` command line against a state dict; ValueError on bad commands."""
    tokens = command_text.split()
    if not tokens:
        raise ValueError("% Empty command")
    cmd, rest = _match(tokens)
    if cmd == ("show", "queuing", "interface"):
        ifname = None
        if rest:
            arg = "".join(rest)
            try:
                ifname = interface_name(arg)
            except ValueError:
                raise ValueError(f"% Invalid interface {arg!r}") from None
        return show_queuing(state, ifname)
    if cmd == ("show", "mac", "address-table"):
        if not rest:
            return show_mac_address_table(state)
        if len(rest) == 2 and rest[0].lower() == "vlan" and rest[1].isdigit():
            return show_mac_address_table(state, int(rest[1]))
        raise ValueError(f"% Invalid command: expected 'vlan N', got {' '.join(rest)!r}")
    if rest:
        raise ValueError(f"% Invalid command: unexpected {' '.join(rest)!r}")
    if cmd == ("show", "interface", "priority-flow-control"):
        return show_pfc(state)
    if cmd == ("show", "policy-map"):
        return show_policy_map(state)
    return show_lldp_neighbors(state)
