"""The run's summary: summary.json (schema, totals per switch and class), the terminal
table, and `python -m emu report RUNDIR` (regenerates plots and the summary table from
a run directory, without root).

Totals per switch and traffic class come from the last counters snapshot of every
agent (kept by the sampler in RUNDIR/last_counters.json): packets and bytes sent per
egress queue (= class: 0 default, 3 RoCE, 7 CNP in the book's config), ECN marks,
drops, PFC pauses sent/received per priority; NIC totals (CNPs, retransmits, payload
bytes) when the run had RDMA NICs, exact whatever QPs were destroyed during the run:
the NIC's own sums over its destroyed QPs plus its live QPs' (emu.observe.metrics.nic_sum).
Where the balanced flows' bytes went, per switch, flow and egress
port (summary.json's "paths", ch.12), comes from the same snapshots (emu.observe.paths).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from emu.observe import guard, paths, plots, procstat
from emu.observe.metrics import nic_sum

SCHEMA_VERSION = 1
#: "fidelity_lost": the lab fell behind the model (emu.observe.guard), whatever the checks said
VERDICTS = ("pass", "fail", "fidelity_lost")
REQUIRED = {"version": int, "topology": str, "tdf": (int, float), "verdict": str,
            "switches": dict}


def class_totals(counters: dict) -> dict[str, dict]:
    """{switch: {class: {packets, bytes, ecn_marks, drops, pause_tx, pause_rx}}}."""
    out: dict[str, dict] = {}
    for sw, snap in counters.items():
        if "ports" not in snap:
            continue
        per: dict[str, dict] = {}
        for port in snap["ports"].values():
            for q, qc in port.get("queues", {}).items():
                t = per.setdefault(q, {"packets": 0, "bytes": 0, "ecn_marks": 0, "drops": 0,
                                       "pause_tx": 0, "pause_rx": 0})
                t["packets"] += qc.get("dequeued", 0)
                t["bytes"] += qc.get("dequeued_bytes", 0)
                t["ecn_marks"] += qc.get("ecn_marks", 0)
                t["drops"] += sum(qc.get("drops", {}).values())
            pfc = port.get("pfc")
            if pfc:
                for prio in range(8):
                    t = per.setdefault(str(prio), {"packets": 0, "bytes": 0, "ecn_marks": 0,
                                                   "drops": 0, "pause_tx": 0, "pause_rx": 0})
                    t["pause_tx"] += pfc["pause_tx"][prio]
                    t["pause_rx"] += pfc["pause_rx"][prio]
        out[sw] = {q: t for q, t in sorted(per.items(), key=lambda kv: int(kv[0]))
                   if any(t.values())}
    return out


def nic_totals(counters: dict) -> dict[str, dict]:
    """{gpu: {cnps_sent, cnps_rx, retransmits, tx_bytes}} from NIC snapshots (nic_sum;
    tx_bytes: RDMA payload sent, retransmissions included, headers not)."""
    return {name: {k: nic_sum(snap, k) for k in ("cnps_sent", "cnps_rx", "retransmits", "tx_bytes")}
            for name, snap in counters.items() if "qps" in snap}


def validate_summary(d: dict) -> None:
    """Raise ValueError naming the first missing or mistyped field."""
    for key, typ in REQUIRED.items():
        if key not in d:
            raise ValueError(f"summary: missing field {key!r}")
        if not isinstance(d[key], typ):
            raise ValueError(f"summary: field {key!r} has type {type(d[key]).__name__}")
    if d["version"] != SCHEMA_VERSION:
        raise ValueError(f"summary: version {d['version']!r}, expected {SCHEMA_VERSION}")
    if d["verdict"] not in VERDICTS:
        raise ValueError(f"summary: verdict must be one of {', '.join(VERDICTS)}, got "
                         f"{d['verdict']!r}")


def verdict_text(summary: dict) -> str:
    """The verdict as the terminal says it: PASS, FAIL, FIDELITY LOST (rerun with ...)."""
    text = summary["verdict"].replace("_", " ").upper()
    if summary["verdict"] == "fidelity_lost":
        sug = summary.get("suggested_tdf")
        text += (f" (the lab fell behind the model at TDF {summary['tdf']:g}"
                 + (f"; rerun with --tdf {sug:g}" if sug else "") + ")")
    return text


CLASS_NAMES = {"0": "default", "3": "RoCE (3)", "7": "CNP (7)"}


def table_text(summary: dict, run_dir: Path | None = None, width: int = 100,
               color: bool | None = None) -> str:
    """The end-of-run table per switch and class, as text (rich; plain when not a TTY)."""
    t = Table(title=f"{summary['topology']}: per switch and class (TDF {summary['tdf']:g})")
    for col in ("switch", "class", "packets", "ECN marks", "PFC tx", "PFC rx", "drops"):
        t.add_column(col, justify="left" if col in ("switch", "class") else "right")
    for sw, classes in summary.get("classes", {}).items():
        for q, c in classes.items():
            t.add_row(sw, CLASS_NAMES.get(q, q), str(c["packets"]), str(c["ecn_marks"]),
                      str(c["pause_tx"]), str(c["pause_rx"]), str(c["drops"]))
    con = Console(width=width, record=True, force_terminal=color, no_color=not color,
                  file=open("/dev/null", "w"))
    con.print(t)
    nics = summary.get("nics") or {}
    if nics:
        n = Table(title="RDMA NICs")
        for col in ("GPU", "CNPs sent", "CNPs received", "retransmits"):
            n.add_column(col, justify="right")
        for g, c in nics.items():
            n.add_row(g, str(c["cnps_sent"]), str(c["cnps_rx"]), str(c["retransmits"]))
        con.print(n)
    for t in paths.tables(summary.get("paths") or {}):
        con.print(t)
    fid = guard.line(summary)
    if fid:
        con.print(fid, highlight=False, soft_wrap=True)
    procs = procstat.line(summary.get("cpu"))
    if procs:
        con.print(procs, highlight=False, soft_wrap=True)
    con.print(f"Verdict: {verdict_text(summary)}"
              + (f"   files: {run_dir}" if run_dir else ""))
    return con.export_text(styles=bool(color))


def report(run_dir: Path, out=sys.stdout) -> dict:
    """Regenerate plots and print the summary table of a run directory (no root)."""
    run_dir = Path(run_dir)
    path = run_dir / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no summary.json (not an emu run directory?)")
    summary = json.loads(path.read_text())
    validate_summary(summary)
    last = run_dir / "last_counters.json"
    if last.is_file():  # recompute the totals from the raw counters
        counters = json.loads(last.read_text())
        summary["classes"] = class_totals(counters)
        summary["nics"] = nic_totals(counters) or summary.get("nics")
        topo = run_dir / "topology.json"
        summary["paths"] = paths.summarise(
            counters, json.loads(topo.read_text()) if topo.is_file() else None)
    made = plots.make_all(run_dir)
    out.write(table_text(summary, run_dir, color=out.isatty() if hasattr(out, "isatty") else False))
    for p in made:
        out.write(f"plot: {p}\n")
    return summary
