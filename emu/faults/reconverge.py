"""What each fault of a run cost the control plane: when the agents saw it and when their
FIBs settled (issue 14 "reconvergence ... within a bounded model time (report it)").

Read from the run's event log (docs/EVENTS.md): the `fault` events of
RUNDIR/events/faults.jsonl and the agents' `link` (carrier seen) and `fib` (routes
installed) events. For every fault: `detect_us`, model µs from the fault to the first
agent that saw a carrier change; `local_us`, to the first FIB change (a switch at an end
dropped the dead next hop); `converged_us`, to the last FIB change before the next fault
(every switch has its new routes); the switches whose FIB changed. Pure over the event
dicts; `load(run_dir)` reads them.
"""

from __future__ import annotations

import json
from pathlib import Path


def load(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """(fault events, agent link/fib events) of a run, each sorted by time."""
    ev_dir = Path(run_dir) / "events"
    faults: list[dict] = []
    agents: list[dict] = []
    if not ev_dir.is_dir():
        return faults, agents
    for path in sorted(ev_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            if e.get("ev") in ("fault", "faults_start"):
                faults.append(e)
            elif e.get("ev") in ("link", "fib", "switch_admin"):
                agents.append(e)
    faults.sort(key=lambda e: e["t"])
    start = next((e["t"] for e in faults if e["ev"] == "faults_start"), None)
    faults = [{**e, "rel_us": e["t"] - start if start is not None else e["t"]}
              for e in faults if e["ev"] == "fault"]
    return faults, sorted(agents, key=lambda e: e["t"])


def group(faults: list[dict]) -> list[dict]:
    """Faults scheduled for the same model time as one (their texts joined by '; ')."""
    out: list[dict] = []
    for f in faults:
        if out and "at" in f and out[-1].get("at") == f["at"]:
            prev = out[-1]
            out[-1] = {**prev, "text": f"{prev.get('text', '')}; {f.get('text', '')}",
                       "late": max(prev.get("late", 0.0), f.get("late", 0.0)),
                       "error": prev.get("error") or f.get("error")}
        else:
            out.append(dict(f))
    return out


def reconvergence(faults: list[dict], agents: list[dict]) -> list[dict]:
    """One row per fault, faults of the same scheduled time together (see the module
    docstring); times in model µs from the first fault of the row."""
    rows = []
    faults = group(faults)
    for i, f in enumerate(faults):
        t0 = f["t"]
        end = faults[i + 1]["t"] if i + 1 < len(faults) else float("inf")
        window = [e for e in agents if t0 <= e["t"] < end]
        links = [e for e in window if e["ev"] == "link"]
        fibs = [e for e in window if e["ev"] == "fib"]
        row = {"fault": f.get("text", ""), "t_us": round(f.get("rel_us", t0), 3),
               "late_us": f.get("late", 0.0),
               "detect_us": round(links[0]["t"] - t0, 3) if links else None,
               "local_us": round(fibs[0]["t"] - t0, 3) if fibs else None,
               "converged_us": round(fibs[-1]["t"] - t0, 3) if fibs else None,
               "switches": sorted({e["node"] for e in fibs}),
               "ports_down": sorted({f"{e['node']}:{e['port']}" for e in links
                                     if e.get("state") == "down"}),
               "ports_up": sorted({f"{e['node']}:{e['port']}" for e in links
                                   if e.get("state") == "up"})}
        if f.get("error"):
            row["error"] = f["error"]
        rows.append(row)
    return rows


def summarise(run_dir: Path, applied: list[dict]) -> dict:
    """The `faults` block of summary.json: the schedule as carried out and its rows."""
    faults, agents = load(run_dir)
    return {"applied": applied, "reconvergence": reconvergence(faults, agents)}


def table(block: dict) -> str:
    """The terminal table of a run's faults."""
    lines = ["Faults (at: model µs from the first data frame; then µs after the fault: a "
             "port saw it, first and last FIB change):",
             f"  {'fault':44} {'at µs':>10} {'late':>7} {'seen':>8} {'1st FIB':>8} "
             f"{'settled':>8}  switches"]

    def f(v) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = block.get("reconvergence", [])
    for r in rows:
        text = r["fault"] if len(r["fault"]) <= 44 else r["fault"][:43] + "…"
        lines.append(f"  {text:44} {r['t_us']:>10.1f} {f(r['late_us']):>7} "
                     f"{f(r['detect_us']):>8} {f(r['local_us']):>8} {f(r['converged_us']):>8}"
                     f"  {','.join(r['switches']) or '-'}" +
                     (f"  ERROR {r['error']}" if r.get("error") else ""))
    for a in block.get("applied", []):
        if a.get("skipped"):
            lines.append(f"  {a['text'][:44]:44} skipped: {a['skipped']}")
    after = block.get("reach_after")
    if after:
        lines.append(f"  reach with the faults in effect: {after['reachable']}/{after['pairs']}"
                     f" pairs (predicted {after['predicted']})")
        lines += [f"  UNEXPECTED {d}" for d in after["differ"][:10]]
    return "\n".join(lines)
