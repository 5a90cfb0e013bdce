"""Where the bytes went: per-flow path accounting of a run's balanced flows (book ch.12;
ch.10 Fig 10-5's uneven uplinks).

Every switch agent counts, per flow that had a choice of equal-cost next hops (rail
uplinks to the spines, spine to super-spine, ...), the bytes it sent on each egress
port (the snapshot's ``lb.paths``, switch_agent.balancer). `summarise` turns the last
snapshots (RUNDIR/last_counters.json) into summary.json's "paths"::

    {switch: {"mode": "ecmp"|"flowlet"|"spray", "describe": str,
              "flows": [{"flow", "label", "bytes", "ports": {port: bytes},
                         "flowlets": int|None, "moves": int|None}],   # busiest first
              "ports": {port: bytes}, "peers": {port: far end},
              "max_min": float|None, "untracked": int}}

``label`` is the flow with GPU names for addresses (``h1g1:49152>h4g2:4791``; the
protocol is left out for UDP, RoCEv2's); ``flowlets``/``moves`` are counted in flowlet
mode only (None otherwise); ``max_min`` is the imbalance: the most loaded port's bytes
over the least loaded's, over the ports the switch's balanced flows used (None with one
port: then every balanced flow took the same one). Only switches whose balanced flows
sent bytes appear. `tables` renders it for the terminal (`emu run`, `emu report`).
"""

from __future__ import annotations

import re

from rich.markup import escape
from rich.table import Table

#: balanced flows listed per switch in the terminal (summary.json keeps them all)
SHOWN_FLOWS = 8


def port_key(name: str) -> tuple:
    """Sort key that puts eth2 before eth10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def far_ends(topology: dict | None) -> dict[tuple[str, str], str]:
    """{(node, ifname): the node at the other end of its link} from topology.json."""
    out = {}
    for lk in (topology or {}).get("links", []):
        a, b = lk["a"], lk["b"]
        out[(a["node"], a["ifname"])] = b["node"]
        out[(b["node"], b["ifname"])] = a["node"]
    return out


def gpu_names(topology: dict | None) -> dict[str, str]:
    """{ip: GPU name} from topology.json."""
    return {g["ip"]: g["name"] for g in (topology or {}).get("gpus", []) if g.get("ip")}


def short_flow(flow: str, names: dict[str, str]) -> str:
    """``10.0.1.11:49152>10.0.2.14:4791/udp`` -> ``h1g1:49152>h4g2:4791`` (GPU names
    for known addresses, no "/udp"); anything unparsable is returned as it is."""
    body, _, proto = flow.rpartition("/")
    src, sep, dst = body.partition(">")
    if not (body and sep):
        return flow

    def end(e: str) -> str:
        ip, colon, port = e.partition(":")
        return names.get(ip, ip) + colon + port

    return f"{end(src)}>{end(dst)}" + ("" if proto == "udp" else f"/{proto}")


def summarise(counters: dict, topology: dict | None = None) -> dict[str, dict]:
    """summary.json's "paths" from the last snapshot of every switch (module docstring)."""
    names, peers = gpu_names(topology), far_ends(topology)
    out: dict[str, dict] = {}
    for sw in sorted(counters, key=port_key):
        lb = counters[sw].get("lb") if isinstance(counters[sw], dict) else None
        if not lb:
            continue
        flows: dict[str, dict[str, int]] = {}
        for p in lb.get("paths", ()):
            if p.get("bytes", 0) > 0:
                ports = flows.setdefault(p["flow"], {})
                ports[p["port"]] = ports.get(p["port"], 0) + p["bytes"]
        if not flows:
            continue
        mode = lb.get("mode", "?")
        counts = {f["flow"]: f for f in lb.get("flowlets", ())}
        totals: dict[str, int] = {}
        for ports in flows.values():
            for port, b in ports.items():
                totals[port] = totals.get(port, 0) + b
        totals = dict(sorted(totals.items(), key=lambda kv: port_key(kv[0])))
        rows = []
        for flow, ports in sorted(flows.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
            c = counts.get(flow, {})
            rows.append({"flow": flow, "label": short_flow(flow, names),
                         "bytes": sum(ports.values()),
                         "ports": dict(sorted(ports.items(), key=lambda kv: port_key(kv[0]))),
                         "flowlets": c.get("flowlets", 0) if mode == "flowlet" else None,
                         "moves": c.get("moves", 0) if mode == "flowlet" else None})
        out[sw] = {"mode": mode, "describe": lb.get("describe", mode), "flows": rows,
                   "ports": totals, "peers": {p: peers.get((sw, p), "?") for p in totals},
                   "max_min": (max(totals.values()) / min(totals.values())
                               if len(totals) > 1 else None),
                   "untracked": lb.get("untracked", 0)}
    return out


def _size(b: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.3g} {unit}"
    return f"{b:g} B"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if part else ""


def imbalance_text(sw: dict) -> str:
    """The switch's imbalance as one phrase (the tables' caption)."""
    ports = list(sw["ports"])
    if sw["max_min"] is None:
        return (f"every balanced flow left on {escape(ports[0])} → "
                f"{escape(sw['peers'].get(ports[0], '?'))}: one port carried them all")
    return f"max/min bytes over {', '.join(map(escape, ports))}: {sw['max_min']:.2f}"


def tables(paths: dict[str, dict], shown: int = SHOWN_FLOWS) -> list[Table]:
    """One "where the bytes went" table per switch of summary.json's "paths": per
    balanced flow its bytes' share on each egress port (and flowlets/moves in flowlet
    mode), then all flows together; [] when no switch had balanced bytes."""
    out = []
    for name, sw in paths.items():
        flowlet = sw["mode"] == "flowlet"
        t = Table(title=f"Where the bytes went: {escape(name)}, {escape(sw['describe'])}",
                  caption=imbalance_text(sw)
                  + (f"; {sw['untracked']} paths not tracked" if sw.get("untracked") else ""))
        t.add_column("flow")
        for port in sw["ports"]:
            far = sw["peers"].get(port, "?")
            t.add_column(f"{escape(port)} → {escape(far)}", justify="right")
        t.add_column("bytes", justify="right")
        if flowlet:
            t.add_column("flowlets", justify="right")
            t.add_column("moves", justify="right")
        for f in sw["flows"][:shown]:
            t.add_row(escape(f["label"]),
                      *(_share(f["ports"].get(p, 0), f["bytes"]) for p in sw["ports"]),
                      _size(f["bytes"]),
                      *((str(f["flowlets"]), str(f["moves"])) if flowlet else ()))
        more = len(sw["flows"]) - shown
        if more > 0:
            t.add_row(f"... {more} more flows")
        total = sum(sw["ports"].values())
        t.add_section()
        t.add_row("all flows", *(_share(b, total) for b in sw["ports"].values()), _size(total),
                  *((str(sum(f["flowlets"] for f in sw["flows"])),
                     str(sum(f["moves"] for f in sw["flows"]))) if flowlet else ()),
                  style="bold")
        out.append(t)
    return out
