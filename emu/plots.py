"""Plots of a run directory (matplotlib, Agg; no display, no root): book ch.11 in
pictures. Each plot is skipped (and logged) when the run has no data for it.

* queue depth over time for the busiest egress queues, with WRED min/max and the PFC
  xOFF/xON thresholds (ch.11 Figure 11-8's rule xON < WRED min < WRED max < xOFF);
* per-QP rate (DCQCN) with CNP arrivals;
* PFC pause timeline: one row per link direction (who paused whom, when);
* link utilisation heatmap: fabric ports x time, fraction of the model link rate;
* fidelity: each process's p99 lag per interval over model time (log scale), with the
  guard's bound (emu.guard) as a line: where the lab fell behind the model;
* collective step timeline (ch.14's ring steps): one row per rank, one bar per step,
  from ``summary.json["steps"]`` = [{"rank", "step", "phase", "t_start_s", "t_end_s"}]
  in model seconds (phase e.g. "reduce-scatter" / "all-gather"), written by collective
  workloads.
Times are model time (lab time / TDF).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path

from emu.metrics import read_rows

log = logging.getLogger("emu.plots")


def _pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use (it takes most of a
    second: `python -m emu --help` and runs without plots do not pay for it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, ax, path: Path, title: str, ylabel: str | None = None, legend: bool = False) -> bool:
    """Common finish of every plot: model-time x axis, title, file, close."""
    ax.set_xlabel("model time (ms)")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    _pyplot().close(fig)
    return True


def _series(rows, metric):
    out = defaultdict(list)
    for r in rows:
        if r["metric"] == metric:
            out[(r["node"], r["port"], r["queue"])].append((r["t_model_s"], r["value"]))
    return out


def queue_depth(rows, qos: dict | None, path: Path, top: int = 4) -> bool:
    """Depth of the deepest queues with WRED and PFC thresholds."""
    s = _series(rows, "depth_bytes")
    if not s or max(v for pts in s.values() for _, v in pts) <= 0:
        return False
    busiest = sorted(s, key=lambda k: -max(v for _, v in s[k]))[:top]
    fig, ax = _pyplot().subplots(figsize=(9, 4.5))
    for k in busiest:
        t, v = zip(*s[k])
        ax.plot([x * 1e3 for x in t], [y / 1e3 for y in v], label=f"{k[0]}:{k[1]} q{k[2]}")
    if qos:
        w = (qos.get("queuing", {}).get("queues", {}) or {})
        q3 = w.get("3", w.get(3, {})) if isinstance(w, dict) else (w[3] if len(w) > 3 else {})
        wred = (q3 or {}).get("wred") or {}
        pfc = qos.get("pfc", {})
        for val, name, style in ((wred.get("min"), "WRED min", ":"), (wred.get("max"), "WRED max", ":"),
                                 (pfc.get("xoff"), "xOFF (per ingress)", "--"),
                                 (pfc.get("xon"), "xON (per ingress)", "--")):
            if isinstance(val, (int, float)):
                ax.axhline(val / 1e3, linestyle=style, color="grey", linewidth=1)
                ax.text(0, val / 1e3, f" {name}", va="bottom", fontsize=8, color="grey")
    return _save(fig, ax, path, "Egress queue depth", "queue depth (KB)", legend=True)


def qp_rates(rows, path: Path) -> bool:
    """DCQCN rate per QP with CNP arrivals marked."""
    sending = {k for k, pts in _series(rows, "tx_bps").items() if any(v > 0 for _, v in pts)}
    s = {k: v for k, v in _series(rows, "rate_bps").items() if k in sending}
    if not s:
        return False
    cnps = _series(rows, "cnps_rx")
    fig, ax = _pyplot().subplots(figsize=(9, 4.5))
    for k, pts in s.items():
        t, v = zip(*pts)
        (line,) = ax.plot([x * 1e3 for x in t], [y / 1e9 for y in v], label=f"{k[0]} {k[1]}")
        arr = [(x, y) for (x, n), (_, y) in zip(cnps.get(k, []), pts) if n > 0]
        if arr:
            ax.scatter([x * 1e3 for x, _ in arr], [y / 1e9 for _, y in arr], marker="v",
                       color=line.get_color(), s=18)
    return _save(fig, ax, path, "DCQCN rate per QP (triangles: CNPs received)",
                 "rate (Gbps, model)", legend=True)


def pause_timeline(rows, topology: dict, path: Path) -> bool:
    """One row per link direction: when PFC pause frames were sent on it."""
    sent = [(r["t_model_s"], r["node"], r["port"]) for r in rows
            if r["metric"] == "pause_tx" and r["value"] > 0]
    if not sent:
        return False
    peer = {}
    for lk in topology.get("links", []):
        peer[(lk["a"]["node"], lk["a"]["ifname"])] = lk["b"]["node"]
        peer[(lk["b"]["node"], lk["b"]["ifname"])] = lk["a"]["node"]
    labels = sorted({f"{n} pauses {peer.get((n, p), '?')} ({p})" for _, n, p in sent})
    y = {lab: i for i, lab in enumerate(labels)}
    fig, ax = _pyplot().subplots(figsize=(9, 1 + 0.4 * len(labels)))
    for t, n, p in sent:
        ax.scatter(t * 1e3, y[f"{n} pauses {peer.get((n, p), '?')} ({p})"], marker="|", s=200,
                   color="tab:red")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    return _save(fig, ax, path, "PFC pause frames sent (who paused whom)")


def utilisation(rows, topology: dict, path: Path) -> bool:
    """Heatmap of tx utilisation of every fabric port (fraction of its model rate)."""
    rate = {}
    for lk in topology.get("links", []):
        if lk.get("kind") == "frontend":
            continue
        for end in ("a", "b"):
            rate[(lk[end]["node"], lk[end]["ifname"])] = lk["model_bps"]
    s = {k[:2]: v for k, v in _series(rows, "tx_bps").items() if k[:2] in rate}
    if not s:
        return False
    ports = sorted(s)
    t0 = min(t for pts in s.values() for t, _ in pts)
    t1 = max(t for pts in s.values() for t, _ in pts)
    nbins = max(len(pts) for pts in s.values())  # one column per sampling round
    if nbins < 2 or t1 <= t0:
        return False
    grid = [[0.0] * nbins for _ in ports]
    for i, k in enumerate(ports):
        for t, v in s[k]:  # switches are sampled one after the other: bin by round
            grid[i][min(nbins - 1, round((t - t0) / (t1 - t0) * (nbins - 1)))] = min(v / rate[k], 1.0)
    times = (t0, t1)
    fig, ax = _pyplot().subplots(figsize=(9, 1 + 0.25 * len(ports)))
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", vmin=0, vmax=1, cmap="viridis",
                   extent=(times[0] * 1e3, times[1] * 1e3, len(ports) - 0.5, -0.5))
    ax.set_yticks(range(len(ports)), [f"{n}:{p}" for n, p in ports], fontsize=7)
    fig.colorbar(im, ax=ax)
    return _save(fig, ax, path, "Link utilisation (tx, fraction of model rate)")


def fidelity_lag(rows, bound_s: float | None, path: Path, top: int = 6) -> bool:
    """p99 lag per interval of the processes with the largest lags, and the bound."""
    s = {k: [(t, v) for t, v in pts if v > 0]
         for k, pts in _series(rows, "lag_p99_s").items()}
    s = {k: pts for k, pts in s.items() if pts}
    if not s:
        return False
    worst = sorted(s, key=lambda k: -max(v for _, v in s[k]))[:top]
    fig, ax = _pyplot().subplots(figsize=(9, 4.5))
    for k in worst:
        t, v = zip(*s[k])
        ax.plot([x * 1e3 for x in t], [min(y, 1.0) * 1e6 for y in v], marker=".", label=k[0])
    if bound_s:
        ax.axhline(bound_s * 1e6, linestyle="--", color="grey", linewidth=1)
        ax.text(0, bound_s * 1e6, " bound (one MTU on the fastest link)", va="bottom",
                fontsize=8, color="grey")
    ax.set_yscale("log")
    return _save(fig, ax, path, "Lag behind the model schedule (p99 per interval)",
                 "lag (us, model)", legend=True)


def step_timeline(steps: list[dict], path: Path) -> bool:
    """Gantt chart of collective steps per rank (ch.14 ring AllReduce walk-through)."""
    if not steps:
        return False
    ranks = sorted({s["rank"] for s in steps})
    phases = sorted({s.get("phase", "") for s in steps})
    colors = {ph: f"C{i}" for i, ph in enumerate(phases)}
    fig, ax = _pyplot().subplots(figsize=(9, 1 + 0.4 * len(ranks)))
    for s in steps:
        ax.barh(ranks.index(s["rank"]), (s["t_end_s"] - s["t_start_s"]) * 1e3,
                left=s["t_start_s"] * 1e3, color=colors[s.get("phase", "")], edgecolor="white")
        ax.text((s["t_start_s"] + s["t_end_s"]) / 2 * 1e3, ranks.index(s["rank"]),
                str(s["step"]), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    handles = [_pyplot().Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), fontsize=8)
    return _save(fig, ax, path, "Collective steps per rank (bar label: step)")


def make_all(run_dir: Path) -> list[Path]:
    """Write every plot the run has data for into RUNDIR/plots; returns the files."""
    metrics = run_dir / "metrics.csv"
    if not metrics.is_file():
        log.info("no metrics.csv in %s: no plots", run_dir)
        return []
    rows = read_rows(metrics)
    topo = json.loads((run_dir / "topology.json").read_text()) if (run_dir / "topology.json").is_file() else {}
    qos = json.loads((run_dir / "qos.json").read_text()) if (run_dir / "qos.json").is_file() else None
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    made = []
    for name, fn in (("queue_depth", lambda p: queue_depth(rows, qos, p)),
                     ("qp_rates", lambda p: qp_rates(rows, p)),
                     ("pfc_pauses", lambda p: pause_timeline(rows, topo, p)),
                     ("utilisation", lambda p: utilisation(rows, topo, p)),
                     ("fidelity_lag", lambda p: fidelity_lag(
                         rows, (summary.get("fidelity") or {}).get("bound_model_us", 0) / 1e6, p)),
                     ("collective_steps", lambda p: step_timeline(summary.get("steps", []), p))):
        path = out_dir / f"{name}.png"
        if fn(path):
            made.append(path)
        else:
            log.info("plot %s skipped: no data in this run", name)
    return made
