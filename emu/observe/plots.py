"""Plots of a run directory (matplotlib, Agg; no display, no root): book ch.11 in
pictures. Each plot is skipped (and logged) when the run has no data for it.

* queue depth over time for the busiest egress queues, with WRED min/max and the PFC
  xOFF/xON thresholds (ch.11 Figure 11-8's rule xON < WRED min < WRED max < xOFF);
* per-QP rate (DCQCN) with CNP arrivals, or under UET NSCC's window as a rate; beside it
  NSCC's window per QP (UET runs);
* PFC pause timeline: one row per link direction (who paused whom, when);
* link utilisation heatmap: fabric ports x time, fraction of the model link rate;
* fidelity: each process's p99 lag per interval over model time (log scale), with the
  guard's bound (emu.observe.guard) as a line: where the lab fell behind the model;
* paths (ch.12): per switch with balanced flows, one row per flow and in it one band
  per egress port, filled where the flow sent on that port (opacity: its rate against
  the port's model rate), ticks where a flowlet started: ECMP is one band per flow,
  flowlets hop between bands, spraying fills them all (from paths.csv, emu.observe.metrics);
* collective step timeline (ch.14's ring steps): one row per rank, one bar per step,
  from ``summary.json["steps"]`` = [{"rank", "step", "phase", "t_start_s", "t_end_s"}]
  in model seconds (phase e.g. "reduce-scatter" / "all-gather"), written by collective
  workloads.
Times are model time (lab time / TDF). The plots are drawn on every core at once
(emu.observe.plotfork); matplotlib's import may start early in a thread (`warm`).
"""

from __future__ import annotations

import json
import logging
import threading
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path

from emu.observe import paths as pathsum
from emu.observe import plotfork
from emu.observe.metrics import PATHS_CSV, SAMPLER_JSON, read_paths, read_rows
from emucore.eventlog import read_events

log = logging.getLogger("emu.observe.plots")
_warming: list[threading.Thread] = []  # `warm`'s thread, until pyplot() joined it


def warm() -> None:
    """Import matplotlib in a thread now, while the caller waits for something else
    (`emu run`: the fabric's teardown, ~0.6 s of waiting for processes and the kernel);
    the import takes ~0.85 s of CPU. pyplot() joins it (an error in it is raised there,
    by the import done again)."""
    if not _warming:
        t = threading.Thread(target=_quiet_import, name="emu-plots-warm", daemon=True)
        _warming.append(t)
        t.start()


def _quiet_import() -> None:
    try:
        pyplot()
    except Exception:  # noqa: BLE001 - pyplot() in the caller raises it again
        log.debug("matplotlib import in the warm-up thread failed", exc_info=True)


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use (it takes most of a
    second: `python -m emu --help`, runs without plots and `emu lab list|show` do not pay
    for it; emu.lab.page draws with it too)."""
    if _warming and _warming[0] is not threading.current_thread():
        _warming.pop().join()
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
    pyplot().close(fig)
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
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
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


def _sending(rows, metric: str) -> dict:
    """`metric`'s series of the QPs that sent anything."""
    sending = {k for k, pts in _series(rows, "tx_bps").items() if any(v > 0 for _, v in pts)}
    return {k: v for k, v in _series(rows, metric).items() if k in sending}


def qp_rates(rows, path: Path, transport: str = "roce") -> bool:
    """Rate per QP: DCQCN's with CNP arrivals marked, or UET's NSCC window as a rate."""
    s = _sending(rows, "rate_bps")
    if not s:
        return False
    cnps = _series(rows, "cnps_rx")
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
    for k, pts in s.items():
        t, v = zip(*pts)
        (line,) = ax.plot([x * 1e3 for x in t], [y / 1e9 for y in v], label=f"{k[0]} {k[1]}")
        arr = [(x, y) for (x, n), (_, y) in zip(cnps.get(k, []), pts) if n > 0]
        if arr:
            ax.scatter([x * 1e3 for x, _ in arr], [y / 1e9 for _, y in arr], marker="v",
                       color=line.get_color(), s=18)
    title = ("NSCC rate per QP (window / base RTT, at most the link)" if transport == "uet"
             else "DCQCN rate per QP (triangles: CNPs received)")
    return _save(fig, ax, path, title, "rate (Gbps, model)", legend=True)


def qp_windows(rows, path: Path, transport: str = "uet") -> bool:
    """Congestion window per QP (UET's NSCC; RoCE's DCQCN is rate based: no window)."""
    s = _sending(rows, "cwnd_bytes")
    if not s:
        return False
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
    for k, pts in s.items():
        t, v = zip(*pts)
        ax.plot([x * 1e3 for x in t], [y / 1e3 for y in v], label=f"{k[0]} {k[1]}")
    cc = "NSCC" if transport == "uet" else transport
    return _save(fig, ax, path, f"{cc} window per QP", "window (KB)", legend=True)


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
    fig, ax = pyplot().subplots(figsize=(9, 1 + 0.4 * len(labels)))
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
    fig, ax = pyplot().subplots(figsize=(9, 1 + 0.25 * len(ports)))
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
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
    for k in worst:
        t, v = zip(*s[k])
        ax.plot([x * 1e3 for x in t], [min(y, 1.0) * 1e6 for y in v], marker=".", label=k[0])
    if bound_s:
        ax.axhline(bound_s * 1e6, linestyle="--", color="grey", linewidth=1)
        # x in axes coordinates: at the plot's left edge whatever the model times are (at
        # x = 0 in data, a run whose samples start later put the label far left of the
        # axes, and tight_layout could not fit it: "Tight layout not applied")
        ax.text(0, bound_s * 1e6, " bound (one MTU on the fastest link)", va="bottom",
                fontsize=8, color="grey", transform=ax.get_yaxis_transform())
    ax.set_yscale("log")
    return _save(fig, ax, path, "Lag behind the model schedule (p99 per interval)",
                 "lag (us, model)", legend=True)


def path_spans(prows, rows) -> dict[str, list[tuple[str, str, float, float, float]]]:
    """{switch: [(flow, port, start_s, end_s, bps)]}: each paths.csv row as the interval
    it covers, from the switch's sampling round before it (its metrics.csv times), or
    one median sampling step before the first."""
    grids = defaultdict(set)
    for r in rows:
        grids[r["node"]].add(r["t_model_s"])
    by_node = defaultdict(list)
    for r in prows:
        by_node[r["node"]].append(r)
    out = {}
    for node, rs in by_node.items():
        pts = sorted(grids[node] | {r["t_model_s"] for r in rs})
        steps = sorted(b - a for a, b in zip(pts, pts[1:]))
        step = steps[len(steps) // 2] if steps else pts[0] or 1e-6
        out[node] = []
        for r in rs:
            i = bisect_left(pts, r["t_model_s"])
            start = pts[i - 1] if i else r["t_model_s"] - step
            out[node].append((r["flow"], r["port"], start, r["t_model_s"], r["bps"]))
    return out


def path_bands(prows, rows, summary_paths: dict, topology: dict, events: list[dict],
               t0_us: float | None, path: Path, panels: int = 4, flows_shown: int = 8) -> bool:
    """Flows x egress ports over model time, one panel per switch (the busiest)."""
    spans = path_spans(prows, rows)
    if not spans:
        return False
    rate = {(lk[e]["node"], lk[e]["ifname"]): lk["model_bps"]
            for lk in topology.get("links", []) for e in ("a", "b")}
    peers, names = pathsum.far_ends(topology), pathsum.gpu_names(topology)
    layout = []
    for node, ss in spans.items():
        sent = defaultdict(float)  # bits per flow
        for f, _, a, b, bps in ss:
            sent[f] += bps * (b - a)
        flows = sorted(sent, key=lambda f: (-sent[f], f))
        ports = sorted({p for _, p, *_ in ss}, key=pathsum.port_key)
        layout.append((sum(sent.values()), node, flows[:flows_shown], len(flows), ports))
    layout = sorted(layout, key=lambda x: (-x[0], x[1]))[:panels]
    plt = pyplot()
    from matplotlib.colors import to_rgba

    heights = [1.0 + 0.4 * len(f) * max(1, len(p) / 2) for _, _, f, _, p in layout]  # inches
    fig, axes = plt.subplots(len(layout), 1, squeeze=False, height_ratios=heights,
                             figsize=(10, 0.6 + sum(heights)))
    for ax, (_, node, flows, nflows, ports) in zip(axes[:, 0], layout):
        h = 0.9 / len(ports)
        y = {(f, p): i + 0.05 + j * h for i, f in enumerate(flows) for j, p in enumerate(ports)}
        peak = defaultdict(float)
        for _, p, _, _, bps in spans[node]:
            peak[p] = max(peak[p], bps)
        bands = defaultdict(lambda: ([], []))
        for f, p, a, b, bps in spans[node]:
            if (f, p) in y:
                full = rate.get((node, p)) or peak[p]
                bands[(f, p)][0].append((a * 1e6, (b - a) * 1e6))
                alpha = max(0.2, min(1.0, bps / full))  # visible even when slow
                bands[(f, p)][1].append(to_rgba(f"C{ports.index(p)}", alpha))
        for k, (segs, colors) in bands.items():
            ax.broken_barh(segs, (y[k], h), facecolors=colors)
        for i in range(1, len(flows)):
            ax.axhline(i, color="0.85", linewidth=0.5)
        handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{j}",
                                 label=f"{p} → {peers.get((node, p), '?')}")
                   for j, p in enumerate(ports)]
        ticks = [(e["t"] - t0_us, y[(e["flow"], e["port"])] + h / 2) for e in events
                 if t0_us is not None and e.get("ev") == "flowlet" and e.get("node") == node
                 and (e.get("flow"), e.get("port")) in y]
        if ticks:
            handles.append(ax.scatter(*zip(*ticks), marker="|", s=60, color="black",
                                      linewidths=0.8, label="flowlet start"))
        ax.set_yticks([i + 0.5 for i in range(len(flows))],
                      [pathsum.short_flow(f, names) for f in flows], fontsize=7)
        ax.set_ylim(len(flows), 0)
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        sw = summary_paths.get(node) or {}
        more = f" ({len(flows)} busiest of {nflows} flows)" if nflows > len(flows) else ""
        ax.set_title(f"{node}: {sw.get('describe', 'balanced flows')}{more}", fontsize=9)
    axes[-1, 0].set_xlabel("model time (us)")
    fig.suptitle("Paths: flows x egress ports (opacity: rate / the port's model rate)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


#: the steps' labels are drawn when the median bar spans at least this fraction of the
#: time axis (~12 px of the ~700-px axis: two digits at 7 pt); narrower bars hide them
LABEL_MIN_FRACTION = 1 / 60


def step_timeline(steps: list[dict], path: Path) -> bool:
    """Gantt chart of collective steps per rank (ch.14 ring AllReduce walk-through): a bar
    per step, coloured by phase, drawn as one bar collection per rank and phase, each
    labelled with its step when the bars are wide enough for labels (rail8x4's 32 ranks
    drew 1,984 bars and labels one call each: 11.5 s of a run's plots)."""
    if not steps:
        return False
    ranks = sorted({s["rank"] for s in steps})
    row = {r: i for i, r in enumerate(ranks)}
    phases = sorted({s.get("phase", "") for s in steps})
    colors = {ph: f"C{i}" for i, ph in enumerate(phases)}
    fig, ax = pyplot().subplots(figsize=(9, 1 + 0.4 * len(ranks)))
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for s in steps:
        bars[row[s["rank"]], s.get("phase", "")].append(
            (s["t_start_s"] * 1e3, (s["t_end_s"] - s["t_start_s"]) * 1e3))
    for (y, ph), spans in bars.items():
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colors[ph], edgecolor="white")
    span = max(s["t_end_s"] for s in steps) - min(s["t_start_s"] for s in steps)
    widths = sorted(s["t_end_s"] - s["t_start_s"] for s in steps)
    labelled = widths[len(widths) // 2] >= LABEL_MIN_FRACTION * span
    for s in steps if labelled else ():
        ax.text((s["t_start_s"] + s["t_end_s"]) / 2 * 1e3, row[s["rank"]],
                str(s["step"]), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    handles = [pyplot().Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), fontsize=8)
    return _save(fig, ax, path, "Collective steps per rank " + (
        "(bar label: step)" if labelled else "(steps left to right; too narrow to label)"))


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
    transport = summary.get("transport") or "roce"
    prows = read_paths(run_dir / PATHS_CSV)
    logs = [run_dir / "events" / f"{n}.jsonl" for n in sorted({r["node"] for r in prows})]
    events = read_events([p for p in logs if p.is_file()])
    origin = run_dir / SAMPLER_JSON  # t = 0 of paths.csv on the events' axis
    t0_us = json.loads(origin.read_text())["t0_model_us"] if origin.is_file() else None
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    pyplot()  # imported once, before the drawing is shared out (emu.observe.plotfork)
    jobs = []
    for name, fn in (("queue_depth", lambda p: queue_depth(rows, qos, p)),
                     ("qp_rates", lambda p: qp_rates(rows, p, transport)),
                     ("qp_windows", lambda p: qp_windows(rows, p, transport)),
                     ("pfc_pauses", lambda p: pause_timeline(rows, topo, p)),
                     ("utilisation", lambda p: utilisation(rows, topo, p)),
                     ("paths", lambda p: path_bands(prows, rows, summary.get("paths") or {}, topo,
                                                    events, t0_us, p)),
                     ("fidelity_lag", lambda p: fidelity_lag(
                         rows, (summary.get("fidelity") or {}).get("bound_model_us", 0) / 1e6, p)),
                     ("collective_steps", lambda p: step_timeline(summary.get("steps", []), p))):
        jobs.append((name, lambda fn=fn, p=out_dir / f"{name}.png": fn(p)))
    made = []
    for (name, _), drew in zip(jobs, plotfork.run(jobs)):
        if drew:
            made.append(out_dir / f"{name}.png")
        else:
            log.info("plot %s skipped: no data in this run", name)
    return made
