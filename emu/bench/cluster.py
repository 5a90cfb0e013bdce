"""`emu bench cluster` (issue 17): the same ring AllReduce on rail2x4 built on this one
machine and spread over two servers - this machine and a second one emulated here (a
namespace with its own sshd a veth away, emu.cluster.emuserver) - in one run. Model-time
results side by side, which must agree within the fidelity bound (a spread fabric
keeps the model's delays: each tunnel's latency is subtracted from its link's dilated
delay), and the lab overhead of the split (build time, the workload's lab seconds).

Each side is one `emu run rail2x4 --workload allreduce` as a user would start it, at
one TDF, int64 (checked exactly); a figure counts only where both runs kept up.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from emu.cluster import emuserver
from emu.observe import guard
from emu.bench.benchrun import emu_run
from emucore.timedil import parse_size

UNDERLAY_MTU = 9300


def row(s: dict) -> dict:
    """The figures of one summary.json."""
    w = s.get("workload") or {}
    rows = (w.get("rank0") or {}).get("rows") or [{}]
    r = rows[-1]
    fid = s.get("fidelity") or {}
    return {"time_us": r.get("seconds_model", float("nan")) * 1e6,
            "busbw_gbps": r.get("busbw_model_bps", float("nan")) / 1e9,
            "exact": bool(r.get("correct")), "build_s": s.get("build_s", float("nan")),
            "lab_s": s.get("workload_lab_s", float("nan")),
            "kept_up": fid.get("kept_up") is True,
            "p99_us": fid.get("p99_lag_model_us", float("nan"))}


def cluster(size: str = "8MB", tdf: float = 10000.0, out: str | None = None) -> int:
    """Both runs and the table; 0 when both were exact and kept up."""
    parse_size(size)
    why = emuserver.missing()
    if why:
        print(f"emu bench cluster: {why}")
        return 2
    print(f"bench cluster: rail2x4, ring AllReduce of {size} int64 per rank, TDF {tdf:g}; "
          "one machine vs two servers (this one and one emulated here)", flush=True)
    figs: dict[str, tuple[int, dict, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="emu-bench-cluster-") as tmp:
        base = Path(out) if out else Path(tmp)
        argv = ["rail2x4", "--workload", "allreduce", "--size", size, "--dtype", "int64",
                "--iters", "1", "--pcap", "none", "--quiet", "--tdf", f"{tdf:g}"]
        d = base / "one-machine"
        print(f"  one machine: emu run ... (results in {d}) ...", flush=True)
        code = emu_run(argv + ["--out", str(d)])
        figs["one machine"] = (code, *_read(d))
        with emuserver.emulated_server(base / "server-b", mtu=UNDERLAY_MTU) as b:
            f = base / "servers.yaml"
            f.write_text("servers:\n  - {name: a, address: localhost}\n"
                         f"  - {{name: b, address: {b.address}, identity: {b.identity}, "
                         f"known_hosts: {b.known_hosts}}}\n")
            d = base / "two-servers"
            print(f"  two servers: emu run ... --servers {f} (results in {d}) ...", flush=True)
            code = emu_run(argv + ["--out", str(d), "--servers", str(f)])
            figs["two servers"] = (code, *_read(d))
        print(f"\n{'case':<13}{'time us':>10}{'busbw Gbps':>11}{'exact':>6}{'build s':>8}"
              f"{'lab s':>7}  fidelity")
        for name, (code, s, g) in figs.items():
            print(f"{name:<13}{g['time_us']:>10.1f}{g['busbw_gbps']:>11.1f}{str(g['exact']):>6}"
                  f"{g['build_s']:>8.1f}{g['lab_s']:>7.1f}  exit {code}, "
                  f"{guard.line(s) if s else 'no summary.json'}")
        (_, s1, a), (_, s2, b2) = figs["one machine"], figs["two servers"]
        bound_us = (s1.get("fidelity") or {}).get("bound_model_us", float("nan"))
        diff = b2["time_us"] - a["time_us"]
        print(f"\ntwo servers vs one: model time {b2['time_us'] / a['time_us']:.3f} x "
              f"({diff:+.1f} us; fidelity bound {bound_us:g} us per action), lab: build "
              f"{b2['build_s'] / a['build_s']:.2f} x, workload {b2['lab_s'] / a['lab_s']:.2f} x")
        where = (s2.get("servers") or {})
        if where:
            print(f"  b ran {', '.join(where['placement'].get('b', []))}; "
                  f"{len(where['crossing'])} links crossed; latency a-b "
                  f"{where['latency_us'].get('a-b', float('nan')):.1f} us lab")
        if not out:
            print("(run directories removed; --out DIR keeps them)")
    return 0 if all(c == 0 and g["exact"] and g["kept_up"] for c, _, g in figs.values()) else 1


def _read(d: Path) -> tuple[dict, dict]:
    path = d / "summary.json"
    s = json.loads(path.read_text()) if path.is_file() else {}
    return s, row(s)
