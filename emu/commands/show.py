"""`emu show TOPO`: a topology's wiring and addressing plan (no root); with --servers how
it would be placed on them (emu.cluster.placer) and, with --check, whether each server is
ready and its measured latency fits the TDF (emu.cluster.remote, emu.realise.tunnel).
"""

from __future__ import annotations

import argparse
import json
import sys

import topologies
from emu.cluster import placer as placement, remote, servers
from emu.commands.topology import topo_args
from emu.realise import tunnel


def add_parser(sub) -> None:
    """The `show` subcommand and its options."""
    p = sub.add_parser("show", help="print a topology's wiring and addressing plan (no root)")
    topo_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable description")
    p.add_argument("--servers", default=None, metavar="FILE",
                   help="also show how the fabric would be placed on the servers of FILE "
                        "(YAML: servers, placement pins; emu.cluster.servers) and which links would "
                        "cross servers as VXLAN tunnels")
    p.add_argument("--check", action="store_true",
                   help="with --servers: check each server (SSH without a password, root, "
                        "the same emu at the same path, VXLAN); exit 2 naming the server "
                        "that is not ready")


def main(args: argparse.Namespace) -> int:
    """`emu show TOPO`."""
    tdf = None if args.tdf == "auto" else args.tdf
    fab = topologies.load(args.topology, spines=args.spines, tdf=tdf)
    placed = None
    if getattr(args, "servers", None):
        try:
            sv = servers.load(args.servers)
            tunnel.check_mtu(sv.underlay_mtu, fab.mtu)
            placed = placement.place(fab, sv.names(), sv.placement)
        except ValueError as exc:
            print(f"emu: {exc}", file=sys.stderr)
            return 2
        if args.check:
            problems = remote.check_all(sv.servers)
            if problems:
                print("\n".join(f"emu: {p}" for p in problems), file=sys.stderr)
                return 2
            print(f"{len(sv.servers)} servers ready: {', '.join(sv.names())}", file=sys.stderr)
            if not _latency_fits(fab, sv, placed):
                return 2
    elif getattr(args, "check", False):
        print("emu: --check: with --servers FILE", file=sys.stderr)
        return 2
    if args.json:
        d = fab.to_dict()
        if placed is not None:
            d["placement"] = {"server_of": placed.server_of, "load": placed.load,
                              "cut": [tunnel.link_name(l) for l in placed.cut]}
        print(json.dumps(d, indent=1))
        return 0
    print(fab.describe())
    if placed is not None:
        print("\nPlacement on the servers (emu.cluster.placer; work = switch agents + 2 per GPU):")
        print(placed.describe())
    return 0


def _latency_fits(fab, sv, placed) -> bool:
    """Print each server's measured latency and the TDF its crossing links need (a link
    is estimated from the larger latency of its two servers, measured from here)."""
    lat = {s.name: remote.one_way_latency(s) for s in sv.servers}
    ok = True
    for s in sv.servers:
        if lat[s.name] is None:
            print(f"emu: server {s.name}: no answer to ping {s.address}", file=sys.stderr)
            ok = False
    if not ok:
        return False
    for s in sv.servers:
        links = [l for l in placed.cut if s.name in (placed.server_of[l.a.node],
                                                       placed.server_of[l.b.node])]
        if s.local or not links:
            continue
        est = [max(lat[placed.server_of[l.a.node]], lat[placed.server_of[l.b.node]])
               for l in links]
        need = max(tunnel.min_tdf(l, e) for l, e in zip(links, est))
        verdict = "fits" if need <= fab.tdf else "too low: rerun with --tdf"
        print(f"server {s.name}: one-way latency {lat[s.name] * 1e6:.0f} us lab; its "
              f"{len(links)} crossing links need TDF >= {need:.0f} (TDF {fab.tdf:g} {verdict})",
              file=sys.stderr)
        ok = ok and need <= fab.tdf
    return ok
