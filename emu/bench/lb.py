"""`emu bench lb`: flow ECMP, flowlet adaptive routing and per-packet spraying on the same
permutation, in one run (book ch.12; lab L12.5 is its judged form).

Every GPU of rail2x4 sends S bytes to a GPU on the next host and the other rail
(h{i}g1 -> h{i+1}g2, h{i}g2 -> h{i+1}g1): eight single-QP flows, all across the spines.
Each rail switch has 4 x 200G down and 2 x 400G up, non-blocking only if its four flows
split two and two over its uplinks. The same traffic (WRITE ONLY, messages of S/8 with a
gap so flowlets exist) runs three times: `ecmp` (per-switch seeds, 5-tuple), `flowlet`
(gap 10 us, bytes estimator) and `spray` (round-robin). Printed per mode: the completion
of the slowest flow against the ideal S / host link rate (read from the topology,
`emu.bench.ideal`), the max/min of the rail switches' uplink
bytes, retransmissions, and whether the fidelity guard says the lab kept up (a figure
counts only then).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from emu.bench.ideal import bottleneck_bps
from emu.lab import runner
from emu.lab import schema
from emu.run.terminal import Terminal
from emucore.timedil import format_rate, parse_size

PRESET = "rail2x4"
MODES = {"ecmp": [], "flowlet": ["rail=flowlet,flowlet_gap=10us"], "spray": ["rail=spray"]}
UPLINKS = (("rail1", "spine1"), ("rail1", "spine2"), ("rail2", "spine1"), ("rail2", "spine2"))


def permutation(size: str, hosts: int = 4) -> list[dict]:
    """The flows: every GPU to the next host's GPU on the other rail."""
    msg = max(parse_size(size) // 8, 4096)
    out = []
    for h in range(1, hosts + 1):
        nxt = h % hosts + 1
        for g, other in ((1, 2), (2, 1)):
            out.append({"name": f"h{h}g{g}", "src": f"h{h}g{g}", "dst": f"h{nxt}g{other}",
                        "size": size, "write_only": True, "message": msg, "gap": "12us"})
    return out


def lab_of(size: str, tdf: float) -> schema.Lab:
    """The benchmark as a lab with one variant per mode (no checks)."""
    return schema.parse({
        "id": "bench-lb", "title": "load balancing on a permutation", "figure": "ch.12",
        "story": "bench", "topology": {"preset": PRESET}, "tdf": tdf, "qos": "book",
        "dcqcn": "paper", "flows": permutation(size),
        "variants": {m: {"title": m, "lb": specs} for m, specs in MODES.items()},
        "checks": [{"name": "flows", "flows": {}, "expect": "all",
                     "source": "spec: an RC WRITE delivers every byte (IBTA RC, book ch.9)"}]})


def ideal_bps(size: str = "8MB") -> float:
    """The rate a flow of the permutation cannot beat: its slowest host link."""
    return bottleneck_bps(PRESET, {g for f in permutation(size) for g in (f["src"], f["dst"])})


def summarise(run: dict, size_bytes: int, rate_bps: float | None = None) -> dict:
    """Completion, ideal (S / `rate_bps`, by default `ideal_bps()`), max/min uplink bytes,
    retransmissions of one mode's run."""
    flows = run["result"]["flows"].values()
    done = max(f["done_us"] for f in flows) - min(f["start_us"] for f in flows)
    ideal = size_bytes * 8 / (rate_bps or ideal_bps()) * 1e6
    up = []
    for node, peer in UPLINKS:
        ports = run["counters"][node]["ports"]
        up.append(next(p["tx_bytes"] for p in ports.values() if p["peer"].startswith(peer + ":")))
    return {"completion_us": done, "ideal_us": ideal, "ratio": done / ideal,
            "max_min": max(up) / min(up) if min(up) > 0 else float("inf"),
            "retransmits": sum(f.get("retransmits", 0) for f in flows),
            "exact": all(f.get("byte_exact") for f in flows),
            "kept_up": bool(run["fidelity"].get("kept_up")),
            "p99_lag_us": run["fidelity"].get("p99_lag_model_us")}


def lb(size: str = "8MB", tdf: float = 10000.0, out: str | None = None) -> int:
    """Run the three modes and print the table; 0 when every flow was byte-exact."""
    lab = lab_of(size, tdf)
    base = Path(out) if out else Path(tempfile.mkdtemp(prefix="emu-bench-lb-"))
    term = Terminal(quiet=True)
    rows, rate = {}, ideal_bps(size)
    for v in lab.variants:
        print(f"bench lb: {v.name} ({len(v.flows)} flows of {size}, TDF {tdf:g})...", flush=True)
        run = runner.run_variant(lab, v, base / v.name, term)
        rows[v.name] = summarise(run, parse_size(size), rate)
    print(f"\nbench lb: {PRESET} permutation, 8 flows of {size} (WRITE ONLY, messages of "
          f"{size}/8, 12 us gaps), ideal = S / {format_rate(rate)} = "
          f"{rows['ecmp']['ideal_us']:.1f} us model")
    print(f"{'mode':<8} {'completion us':>14} {'x ideal':>8} {'uplink max/min':>15} "
          f"{'retransmits':>12} {'exact':>6} {'kept up (p99 lag)':>20}")
    for m, r in rows.items():
        lag = "" if r["p99_lag_us"] is None else f" ({r['p99_lag_us']:.2f} us)"
        print(f"{m:<8} {r['completion_us']:>14.1f} {r['ratio']:>8.2f} {r['max_min']:>15.2f} "
              f"{r['retransmits']:>12} {str(r['exact']):>6} {('yes' if r['kept_up'] else 'NO') + lag:>20}")
    e = rows["ecmp"]["completion_us"]
    print("ratios to ecmp (completion): " + ", ".join(
        f"{m} {r['completion_us'] / e:.2f}" for m, r in rows.items() if m != "ecmp"))
    print(f"run directories: {base}  (host link rate {format_rate(rate)} model)")
    return 0 if all(r["exact"] for r in rows.values()) else 1
