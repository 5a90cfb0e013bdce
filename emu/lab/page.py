"""RUNDIR/lab.html: one self-contained page per lab run - the story, the timeline beside
the book's steps, the verdict table and the plots (PNG, embedded as data: URIs so the
file opens anywhere, alone). Plots: per variant, a timeline of the events by node (the
book's steps are what happens on it) and the sampled egress queue depth of the busiest
ports with the WRED thresholds (emu.observe.plots draws the same per run)."""

from __future__ import annotations

import base64
import html
import io

from emu.observe.plots import pyplot  # matplotlib on first use: `emu lab show` needs none

MARKS = {"wred_min": "^", "wred_max": "^", "ce_first": "*", "xoff": "v", "xon": "o",
         "pfc_tx": "|", "pfc_rx": "|", "pause_start": ">", "pause_end": "<", "cnp_tx": "x",
         "cnp_rx": "x", "rate": ".", "flow_start": "s", "flow_done": "s", "drop": "X",
         "retransmit": "d", "wd_storm": "P", "wd_restore": "P"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def timeline_png(events: list[dict], title: str) -> str | None:
    """Events by node over model time (µs after t0): which node did what, when."""
    evs = [e for e in events if e["ev"] in MARKS]
    if not evs:
        return None
    nodes = sorted({e["node"] for e in evs}, key=lambda n: (n == "lab", n))
    y = {n: i for i, n in enumerate(nodes)}
    kinds = sorted({e["ev"] for e in evs})
    cmap = pyplot().get_cmap("tab20")
    fig, ax = pyplot().subplots(figsize=(10, 0.45 * len(nodes) + 1.6))
    for i, k in enumerate(kinds):
        pts = [(e["t"], y[e["node"]]) for e in evs if e["ev"] == k]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=MARKS[k], s=30,
                   color=cmap(i % 20), label=k)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlabel("model time after the flows' start (µs)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return _png(fig)


def depth_png(metrics: list[dict], links: dict, title: str, wred: tuple | None) -> str | None:
    """Sampled queue depth of the ports whose queues grew most, with WRED min/max."""
    series: dict[tuple, list] = {}
    for r in metrics:
        if r["metric"] == "depth_bytes":
            series.setdefault((r["node"], r["port"], r["queue"]), []).append((r["t_us"], r["value"]))
    if not series:
        return None
    top = sorted(series, key=lambda k: -max(v for _, v in series[k]))[:4]
    names = {v: k for k, v in links.items()}
    fig, ax = pyplot().subplots(figsize=(10, 3.2))
    for k in top:
        pts = sorted(series[k])
        label = f"{names.get((k[0], k[1]), k[0] + ':' + k[1])} q{k[2]}"
        ax.plot([p[0] for p in pts], [p[1] / 1e3 for p in pts], label=label)
    if wred:
        for v, name in zip(wred, ("WRED min", "WRED max")):
            ax.axhline(v / 1e3, ls="--", lw=0.8, color="grey")
            ax.text(0, v / 1e3, name, fontsize=7, va="bottom")
    ax.set_xlabel("model time after the flows' start (µs)")
    ax.set_ylabel("egress queue (KB)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def curve_png(bins: list[dict], of: str, title: str) -> str | None:
    """A measured WRED curve: the fraction marked (or dropped) per depth bin against the
    expected probability and its binomial interval (emu.lab.checks.curve_bins)."""
    if not bins:
        return None
    fig, ax = pyplot().subplots(figsize=(10, 3.2))
    x = [(b["from"] + b["to"]) / 2e3 for b in bins]
    ax.plot(x, [b["p"] for b in bins], color="grey", lw=1, label="the book's p(d)")
    lo = [b["interval"][0] / b["seen"] for b in bins]
    hi = [b["interval"][1] / b["seen"] for b in bins]
    ax.fill_between(x, lo, hi, color="grey", alpha=0.2, step="mid", label="binomial interval")
    # linear below WRED max; fractions above the axis (1.0 from max on) drawn at its top
    top = 2 * max((b["p"] for b in bins if b["p"] < 1), default=0.05)
    for ok, colour, label in ((True, "tab:green", "inside"), (False, "tab:red", "outside"),
                              (None, "tab:grey", "too few arrivals")):
        pts = [(xx, b[of] / b["seen"]) for xx, b in zip(x, bins) if b["ok"] is ok]
        low = [p for p in pts if p[1] <= top]
        high = [p for p in pts if p[1] > top]
        if low:
            ax.scatter([p[0] for p in low], [p[1] for p in low], color=colour, s=18,
                       label=f"measured, {label}", zorder=3)
        if high:
            ax.scatter([p[0] for p in high], [top] * len(high), color=colour, s=30,
                       marker="^", zorder=3, label=f"measured, {label}, > {top:.2g} (value "
                       f"{min(p[1] for p in high):.2f}..{max(p[1] for p in high):.2f})")
    ax.set_ylim(0, top * 1.05)
    width = (bins[0]["to"] - bins[0]["from"]) / 1e3
    ax.set_xlabel(f"queue depth the packet found (KB, {width:g} KB bins)")
    ax.set_ylabel(f"fraction {of}")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    return str(v)


def render(lab, doc: dict, per_variant: list[dict]) -> str:
    """The page. `per_variant`: [{"name", "title", "timeline", "plots": [data URIs]}]."""
    e = html.escape
    ok = doc["verdict"] in ("pass", "differs")
    rows = "".join(
        f"<tr class={c['outcome']}><td>{e(c['name'])}</td>"
        f"<td>{e(_fmt(c['measured']))}</td><td>{e(str(c['expected']))}{_differs(c)}</td>"
        f"<td>{e(c['source'])}</td><td>{c['outcome'].upper()}</td></tr>"
        for c in doc["checks"])
    steps = "".join(f"<li>{e(s)}</li>" for s in lab.steps)
    watch = "".join(f"<li>{e(s)}</li>" for s in lab.watch)
    parts = []
    for v in per_variant:
        tl = "".join(f"<tr><td>{x['t']:.2f}</td><td>{e(x['node'])}</td>"
                     f"<td>{e(x['ev'])}</td><td>{e(_detail(x))}</td></tr>"
                     for x in v["timeline"])
        imgs = "".join(f'<img alt="{e(v["name"])} plot" src="{u}">' for u in v["plots"] if u)
        meta = doc["variants"].get(v["name"], {})
        parts.append(
            f"<section><h2>Variant {e(v['name'])}: {e(v['title'])}</h2>"
            f"<p>TDF {meta.get('tdf')}, {meta.get('lab_s')} s of lab time; the fidelity "
            f"guard: {'kept up' if meta.get('kept_up') else 'did NOT keep up'} "
            f"(p99 lag {_fmt(meta.get('p99_lag_us'))} µs model).</p>{imgs}"
            f"<div class=cols><div><h3>Timeline (model µs after the flows' start)</h3>"
            f"<table class=tl><tr><th>t (µs)</th><th>node</th><th>event</th><th>detail</th></tr>"
            f"{tl}</table></div><div><h3>The book's steps</h3><ol>{steps}</ol></div></div>"
            f"</section>")
    verdict = doc["verdict"].upper()
    why = "" if doc.get("kept_up") else " (the lab did not keep up with the model: rerun " \
                                        "with a higher --tdf)"
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>{e(lab.id)} {e(lab.title)}</title><style>
body{{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:2px 6px}}
tr.pass td:last-child{{color:#080;font-weight:bold}} tr.fail td:last-child{{color:#c00;font-weight:bold}}
tr.differs td:last-child{{color:#b60;font-weight:bold}} tr.shown td:last-child{{color:#777}}
.cols{{display:flex;gap:2em}} .cols>div{{flex:1}} .tl{{font-size:12px}} img{{max-width:100%}}
.verdict{{font-size:1.4em;font-weight:bold;color:{'#080' if ok else '#c00'}}}
</style></head><body>
<h1>{e(lab.id)}: {e(lab.title)}</h1><p>{e(lab.figure)}</p>
<p class=verdict id=verdict>{verdict}{e(why)}</p>
<h2>The story</h2><p>{e(lab.story).replace(chr(10) + chr(10), '</p><p>')}</p>
<h3>What to watch</h3><ul>{watch}</ul>
<h2>Verdict</h2><p>Outcomes: {e(_tally(doc))}. Each bound names its source: the book,
the lab catalogue, a theory or a spec; "differs": emu differs from the book where the book
simplifies, for the reason given; "shown": a figure without a bound, not judged.</p>
<table id=checks><tr><th>check</th><th>measured</th><th>expected</th>
<th>source</th><th></th></tr>{rows}</table>
{''.join(parts)}
<p><small>{e(lab.calibrated)}</small></p>
<script>window.addEventListener("load", () => {{ document.body.dataset.imagesLoaded =
[...document.images].filter(i => i.complete && i.naturalWidth > 0).length; }});</script>
</body></html>
"""


def _differs(c: dict) -> str:
    """The emu bound and the reason of a check that differs from the book."""
    if c.get("outcome") != "differs":
        return ""
    d = c["differs"]
    return html.escape(f" (emu: {d['expected']}, {d['source']} - {d['why']})")


def _tally(doc: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in doc.get("outcomes", {}).items() if n) or "none"


def _detail(e: dict) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in e.items() if k not in ("t", "node", "ev"))
