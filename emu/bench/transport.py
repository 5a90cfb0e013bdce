"""`emu bench transport`: the same 3:1 incast and ring AllReduce over RoCE (RC, DCQCN,
PFC) and over UET (RUD, NSCC, entropy spraying), and the incast once more over UET with
the switches trimming - in one run (issue 16; book ch.11
for the RoCE side).

Each case is one `emu run rail2x4` as a user would start it, at one TDF:
* incast: h1g1, h2g1, h3g1 each WRITE `--size` into h4g1 (three 200 G senders, one 200 G
  port on Rail-1): completion of the slowest sender in model µs against the ideal
  3 x S / the target's host link rate (read from the topology, `emu.bench.ideal`), the
  deepest queue of Rail-1's port to h4, PFC pause frames the switches sent, frames
  trimmed, retransmissions, CNPs, byte-exactness;
* allreduce: 8 ranks, int64 (checked exactly), `--allreduce-size` per rank, the
  book's ring order (`--ring rank`: its inter-host hops cross the spines, where UET
  sprays and RoCE hashes one path per QP): time and busbw in model units.
A figure counts only from a run whose fidelity guard says the lab kept up (printed).
No public table compares NSCC and DCQCN on the same incast (UET_FACTS); uet-htsim's
orientation: 1 MiB 2:1 incast at 400 G in 51 us.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from emu.observe import guard
from emu.bench.benchrun import emu_run
from emu.bench.ideal import bottleneck_bps
from emucore.timedil import format_rate, parse_size

PRESET = "rail2x4"
SENDERS = ("h1g1", "h2g1", "h3g1")
TARGET = "h4g1"
CASES = {  # name -> (workload, extra emu run arguments)
    "incast roce": ("incast", ["--transport", "roce"]),
    "incast uet": ("incast", ["--transport", "uet"]),
    "incast uet+trim": ("incast", ["--transport", "uet", "--trim"]),
    "allreduce roce": ("allreduce", ["--transport", "roce"]),
    "allreduce uet": ("allreduce", ["--transport", "uet"]),
}


def incast_row(run_dir: Path, s: dict, size: int, rate_bps: float | None = None) -> dict:
    """The incast figures of one run directory; the ideal is 3 x S / `rate_bps` (by
    default the target's host link rate)."""
    rate = rate_bps or bottleneck_bps(PRESET, [TARGET])
    w = s.get("workload") or {}
    counters = json.loads((run_dir / "last_counters.json").read_text()) \
        if (run_dir / "last_counters.json").is_file() else {}
    port = next((p for p in (counters.get("rail1") or {}).get("ports", {}).values()
                 if p.get("peer", "").startswith("h4:")), {})
    tdf = s.get("tdf") or 1.0
    lab = w.get("seconds_lab") or {}  # per sender, from the start of all of them
    done_us = (max(lab.values()) if lab else float("nan")) / tdf * 1e6
    pauses = sum(c.get("pause_tx", 0) for sw in (s.get("classes") or {}).values()
                 for c in sw.values())
    return {"completion_us": done_us, "ideal_us": len(SENDERS) * size * 8 / rate * 1e6,
            "max_queue_kb": port.get("max_queue_bytes", 0) / 1000, "pauses": pauses,
            "trimmed": sum(sw.get("trimmed", 0) for sw in (s.get("switches") or {}).values()),
            "retransmits": sum((w.get("retransmits") or {}).values()),
            "cnps": sum((w.get("cnps_rx") or {}).values()),
            "exact": set((w.get("status") or {}).values()) == {"SUCCESS"}
            and all((w.get("byte_exact") or {}).values())}


def allreduce_row(s: dict) -> dict:
    """The AllReduce figures of one summary."""
    rows = ((s.get("workload") or {}).get("rank0") or {}).get("rows") or [{}]
    r = rows[-1]
    nics = s.get("nics") or {}
    return {"time_us": r.get("seconds_model", float("nan")) * 1e6,
            "busbw_gbps": r.get("busbw_model_bps", float("nan")) / 1e9,
            "retransmits": sum(n.get("retransmits", 0) for n in nics.values()),
            "cnps": sum(n.get("cnps_rx", 0) for n in nics.values()),
            "exact": bool(r.get("correct"))}


def transport(size: str = "4MB", allreduce_size: str = "8MB", tdf: float = 10000.0,
              out: str | None = None) -> int:
    """Run every case and print the tables; 0 when every case passed and kept up."""
    nbytes, rate = parse_size(size), bottleneck_bps(PRESET, [TARGET])
    print(f"bench transport: {PRESET}, TDF {tdf:g}: incast 3:1 of {size} per sender, ring "
          f"AllReduce of {allreduce_size} int64 per rank; roce vs uet", flush=True)
    rows: dict[str, tuple[int, dict, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="emu-bench-transport-") as tmp:
        base = Path(out) if out else Path(tmp)
        for name, (wl, extra) in CASES.items():
            d = base / name.replace(" ", "-").replace("+", "-")
            print(f"  {name}: emu run ... (results in {d}) ...", flush=True)
            argv = [PRESET, "--workload", wl, "--pcap", "none", "--quiet", "--out", str(d),
                    "--tdf", f"{tdf:g}", *extra]
            if wl == "incast":
                argv += ["--to", TARGET, "--from", ",".join(SENDERS), "--size", size]
            else:
                argv += ["--size", allreduce_size, "--dtype", "int64", "--iters", "1",
                         "--ring", "rank"]
            code = emu_run(argv)
            path = d / "summary.json"
            s = json.loads(path.read_text()) if path.is_file() else {}
            fig = incast_row(d, s, nbytes, rate) if wl == "incast" else allreduce_row(s)
            rows[name] = (code, s, fig)
        print(f"\nincast 3:1 into {TARGET} ({size} per sender; ideal 3 x S / "
              f"{format_rate(rate)} = {len(SENDERS) * nbytes * 8 / rate * 1e6:.1f} us model)")
        print(f"{'case':<17}{'completion us':>14}{'x ideal':>8}{'max queue KB':>13}"
              f"{'PFC pauses':>11}{'trimmed':>8}{'retx':>7}{'CNPs':>6}{'exact':>6}  fidelity")
        for name, (code, s, f) in rows.items():
            if not name.startswith("incast"):
                continue
            print(f"{name:<17}{f['completion_us']:>14.1f}{f['completion_us'] / f['ideal_us']:>8.2f}"
                  f"{f['max_queue_kb']:>13.1f}{f['pauses']:>11}{f['trimmed']:>8}"
                  f"{f['retransmits']:>7}{f['cnps']:>6}{str(f['exact']):>6}  exit {code}, "
                  f"{guard.line(s) if s else 'no summary.json'}")
        print(f"\nring AllReduce, 8 ranks, {allreduce_size} int64 per rank, --ring rank")
        print(f"{'case':<17}{'time us':>10}{'busbw Gbps':>11}{'retx':>7}{'CNPs':>6}"
              f"{'exact':>6}  fidelity")
        for name, (code, s, f) in rows.items():
            if not name.startswith("allreduce"):
                continue
            print(f"{name:<17}{f['time_us']:>10.1f}{f['busbw_gbps']:>11.1f}{f['retransmits']:>7}"
                  f"{f['cnps']:>6}{str(f['exact']):>6}  exit {code}, "
                  f"{guard.line(s) if s else 'no summary.json'}")
        r, u = rows["incast roce"][2], rows["incast uet"][2]
        a, b = rows["allreduce roce"][2], rows["allreduce uet"][2]
        print(f"\nratios uet / roce: incast completion {u['completion_us'] / r['completion_us']:.2f}, "
              f"allreduce time {b['time_us'] / a['time_us']:.2f}")
        if not out:
            print("(run directories removed; --out DIR keeps them)")
    return 0 if all(code == 0 and f["exact"] for code, _, f in rows.values()) else 1
