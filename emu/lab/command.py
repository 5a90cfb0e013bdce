"""`python -m emu lab list | show ID | run ID [--variant V] [--tdf T] | run --all |
results RUNDIR...`.

`run` prints the run directory first (as `emu run` does), runs every variant (or the one
named), then the verdict table in the terminal, and writes RUNDIR/lab.json (with where the
result came from: emu.lab.publish) and RUNDIR/lab.html; `run --all` also
docs/LAB_RESULTS.md (or --results PATH; issue 31), naming the labs that errored or were
not reached. Exit status: 0
every check passed (or differs from the book for its stated reason) and the lab kept
up, 1 a check failed, 2 a bad lab file or option, 3 the checks passed but the lab did
not keep up with the model (the verdict does not count; the page names the TDF to rerun
with).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import topologies
from emu.lab import page, publish, runner
from emu.lab import schema as S
from emu.lab import verdict as V
from emucore import datapath, rtsched
from emu.lab.curve import curve_bins
from emu.lab.variant import Variant
from emu.run.terminal import Terminal

EXIT_PASS, EXIT_FAIL, EXIT_BAD, EXIT_FIDELITY_LOST = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # as a shell reports SIGINT
#: what `emu lab run --all` writes (emu.lab.results)
RESULTS = publish.RESULTS


def cmd_list(_args) -> int:
    """One line per lab of the catalogue."""
    t = Table("id", "title", "book", "topology", "lab time", box=None)
    for path in S.catalogue():
        try:
            lab = S.load(str(path))
        except ValueError as exc:
            t.add_row(path.stem, f"[red]bad lab file: {exc}[/red]", "", "", "")
            continue
        n = len(lab.variants)
        t.add_row(lab.id, lab.title + (f" ({n} variants)" if n > 1 else ""), lab.figure,
                  lab.topology, f"~{lab.estimate_s:.0f} s")
    Console(width=160).print(t)
    print("\nemu lab show ID: the story and the checks; sudo python -m emu lab run ID")
    return 0


def cmd_show(args) -> int:
    """The story, what to watch, the book's steps, the variants and the checks."""
    lab = S.load(args.id)
    print(f"{lab.id}: {lab.title}\n{lab.figure}\n\n{lab.story}\n")
    if lab.watch:
        print("What to watch:")
        for w in lab.watch:
            print(f"  - {w}")
    if lab.steps:
        print("\nThe book's steps:")
        for s in lab.steps:
            print(f"  {s}")
    print("\nVariants:" if len(lab.variants) > 1 else "\nRun:")
    for v in lab.variants:
        fab = v.fabric
        traffic = (f"a {v.workload['name']} job on every GPU" if v.workload
                   else f"{len(v.flows)} flows")
        print(f"  {v.name}: {v.title} - {fab.name}, TDF {fab.tdf:g}, QoS "
              f"{v.qos.name if v.qos else 'off'}, DCQCN {v.dcqcn}, {traffic}")
    print("\nChecks (the bound, and where it comes from):")
    for c in lab.checks:
        where = c.get("variant", "all")
        exp = c.get("expect", "in order" if c["kind"] == "order" else "any")
        print(f"  {c['name']} ({c['kind']}{'' if where == 'all' else f', {where}'}): "
              + ("shown, not judged" if V.shown(c) else f"expect {exp}")
              + (f"\n      source: {V.cite_text(c['source'])}" if c.get("source") else ""))
        if c.get("differs"):
            d = c["differs"]
            print(f"      differs from the book if {V.differs_text(d)} ({V.cite_text(d['source'])}): "
                  f"{d['why']}")
        if c.get("note"):
            print(f"      note: {c['note']}")
    print(f"\nEstimated lab time: ~{lab.estimate_s:.0f} s. Run: sudo python -m emu lab run {lab.id}")
    return 0


OUTCOME_STYLE = {"pass": "[green]PASS[/green]", "differs": "[yellow]DIFFERS[/yellow]",
                 "fail": "[red]FAIL[/red]", "shown": "[dim]shown[/dim]"}


def verdict_table(doc: dict) -> Table:
    """The verdict table (check, measured, expected, source, outcome)."""
    t = Table("check", "measured", "expected", "source", "", title=f"{doc['id']}: {doc['title']}")
    for c in doc["checks"]:
        exp = str(c["expected"])
        if c.get("outcome") == "differs":
            exp += f"\nemu: {c['differs']['expected']} - {c['differs']['why']}"
        t.add_row(escape(c["name"]), escape(page._fmt(c["measured"])[:60]), escape(exp),
                  escape(c["source"]), OUTCOME_STYLE[c["outcome"]])
    return t


def curves(lab: S.Lab, v: Variant, ev) -> list:
    """The measured WRED curves of the variant's curve checks, as plots."""
    out = []
    for c in lab.checks:
        if c["kind"] != "curve" or not runner.applies(c, v.name):
            continue
        try:
            bins = curve_bins(ev, c["curve"])
        except ValueError:
            continue  # the check itself reports why
        out.append(page.curve_png(bins, c["curve"].get("of", "marked"),
                                  f"{lab.id} {v.name}: {c['curve']['port']} queue "
                                  f"{c['curve'].get('queue', 3)}"))
    return out


def variant_plots(lab: S.Lab, v: Variant, ev) -> list:
    """A variant's plots for lab.html: the event timeline, the queue depths (with the WRED
    thresholds of queue 3) and the measured WRED curves."""
    wred = v.qos.queuing.queues[3].wred if v.qos is not None else None
    return [page.timeline_png(ev.events, f"{lab.id} {v.name}: events"),
            page.depth_png(ev.metrics, ev.links, f"{lab.id} {v.name}",
                           (wred.min_bytes, wred.max_bytes) if wred else None),
            *curves(lab, v, ev)]


def run_one(lab: S.Lab, out: Path, variant: str | None, quiet: bool,
            rejudge: bool = False, seed: int = 1, plots: bool = True) -> tuple[int, dict]:
    """Run a lab (all variants or one) into `out` - or, with `rejudge`, judge the runs
    already there again (after editing the lab's checks); exit status and lab.json.
    `seed`: the switches' and the NICs' random draws (`--seed`; a rejudged run keeps its own).
    `plots=False`: lab.html without its plots (0.6-3.2 s each; the fabric tests that never
    look at them, issue 30); the verdict and lab.json are the same."""
    term = Terminal(quiet)
    start = time.monotonic()
    todo = [v for v in lab.variants if variant is None or v.name == variant]
    many = len(lab.variants) > 1
    runs, results, shown = {}, [], []
    for v in todo:
        term.say(f"\n{lab.id} variant {v.name}: {v.title}" if many else f"\n{lab.id}: {lab.title}")
        rd = out / v.name if many else out
        run = runner.load_run(rd) if rejudge else runner.run_variant(lab, v, rd, term, seed=seed)
        run["tdf"] = v.fabric.tdf
        runs[v.name] = run
        ev = runner.evidence(v, run)
        results += runner.judge_variant(lab, v, ev, many)
        shown.append({"name": v.name, "title": v.title, "timeline": runner.timeline(ev),
                      "plots": variant_plots(lab, v, ev) if plots else []})
        fid = run["fidelity"]
        term.say(f"  traffic done in {run['lab_s']:.1f} s lab; fidelity guard: "
                 f"{'kept up' if fid.get('kept_up') else 'DID NOT keep up'} "
                 f"(p99 lag {fid.get('p99_lag_model_us', float('nan')):.2f} µs model)")
    results += runner.judge_ratios(lab, results)
    doc = runner.write_json(out / "lab.json", lab, results, runs, publish.provenance(
        lab, None if rejudge else time.monotonic() - start, variant=variant,
        rejudged=publish.earlier_run(out) if rejudge else None))
    (out / "lab.html").write_text(page.render(lab, doc, shown))
    Console(width=150).print(verdict_table(doc))
    if doc["kept_up"] is False:
        sug = [r.get("suggested_tdf") for r in runs.values() if r.get("suggested_tdf")]
        print(f"The lab did not keep up with the model: its verdict does not count. Rerun "
              f"with --tdf {max(sug):g}." if sug else "The lab did not keep up with the model.")
    print(f"Verdict: {doc['verdict'].upper()}.  Run directory: {out}  (open {out / 'lab.html'})")
    if doc["verdict"] in ("pass", "differs"):
        return EXIT_PASS, doc
    return (EXIT_FIDELITY_LOST if doc["checks_passed"] else EXIT_FAIL), doc


def cmd_run(args) -> int:
    """`emu lab run ID | --all`."""
    if not args.all and not args.id:
        print("emu lab run: name a lab (emu lab list) or --all", file=sys.stderr)
        return EXIT_BAD
    if not args.all and (args.results or args.no_results):
        print("emu lab run: --results and --no-results go with --all", file=sys.stderr)
        return EXIT_BAD
    try:
        if args.tdf is not None and not args.tdf > 0:
            raise ValueError(f"--tdf: must be > 0, got {args.tdf:g}")
        labs = ([S.load(str(p), args.tdf) for p in S.catalogue()] if args.all
                else [S.load(args.id, args.tdf)])
        if args.variant is not None:
            for lab in labs:
                if args.variant not in [v.name for v in lab.variants]:
                    raise ValueError(f"--variant: {lab.id} has no variant {args.variant!r} "
                                     f"(it has: {', '.join(v.name for v in lab.variants)})")
    except (ValueError, topologies.TopologyError) as exc:
        print(f"emu lab: {exc}", file=sys.stderr)
        return EXIT_BAD
    if not args.judge:
        try:
            if args.datapath != "python":
                datapath.require_built()
        except datapath.NotBuilt as exc:
            print(f"emu lab: {exc}", file=sys.stderr)
            return EXIT_BAD
        os.environ[datapath.ENV] = args.datapath  # the agents and NICs inherit it
        os.environ[rtsched.ENV] = args.sched  # and schedule themselves so
    if os.geteuid() != 0 and not args.judge:
        print("emu lab run needs root (network namespaces, raw sockets): try `sudo python -m "
              "emu lab run ...`", file=sys.stderr)
        return EXIT_BAD
    if args.judge:
        if args.all or not args.out:
            print("emu lab run --judge: name one lab and its run directory with --out",
                  file=sys.stderr)
            return EXIT_BAD
        return run_one(labs[0], Path(args.out), args.variant, args.quiet, rejudge=True)[0]
    if not args.all:
        out = Path(args.out) if args.out else Path("runs") / \
            f"lab-{labs[0].id}-{time.strftime('%Y%m%d-%H%M%S')}"
        print(f"Run directory: {out}", flush=True)
        return run_one(labs[0], out, args.variant, args.quiet, seed=args.seed)[0]
    return run_all(labs, args)


def run_all(labs: list, args) -> int:
    """`run --all`: every lab in turn; a lab that errors is named and the next one runs;
    Ctrl-C stops. Then the table and (unless --no-results or --variant) LAB_RESULTS.md,
    which names the labs left without a result and why."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows, docs, reasons, worst = [], {}, {}, EXIT_PASS
    for i, lab in enumerate(labs):
        out = Path(args.out or "runs") / f"lab-{lab.id}-{stamp}"
        print(f"Run directory: {out}", flush=True)
        t = time.monotonic()
        try:
            code, doc = run_one(lab, out, args.variant, args.quiet, seed=args.seed)
        except KeyboardInterrupt:
            print(f"\nemu lab: interrupted at {lab.id}; its fabric has been removed, the "
                  "labs not reached are named in the results", file=sys.stderr)
            for rest in labs[i:]:
                reasons[rest.id] = f"not run: `run --all` was interrupted at {lab.id}"
            worst = EXIT_INTERRUPTED
            break
        except Exception as exc:  # one broken lab must not end the benchmark
            print(f"emu lab: {lab.id} errored: {exc!r}", file=sys.stderr)
            reasons[lab.id] = f"errored: {type(exc).__name__}: {exc}"
            worst = max(worst, EXIT_FAIL)
            continue
        rows.append((lab.id, lab.title, doc["verdict"], doc["kept_up"], time.monotonic() - t,
                     sum(c["pass"] for c in doc["checks"]), len(doc["checks"])))
        docs[lab.id] = doc
        worst = max(worst, code)
    t = Table("lab", "title", "verdict", "kept up", "checks", "lab time", box=None)
    for lid, title, verdict, kept, secs, npass, n in rows:
        t.add_row(lid, title[:60], OUTCOME_STYLE[verdict].lower(), str(kept),
                  f"{npass}/{n}", f"{secs:.0f} s")
    Console(width=150).print(t)
    Path(args.out or "runs").mkdir(parents=True, exist_ok=True)
    (Path(args.out or "runs") / f"labs-{stamp}.json").write_text(json.dumps(rows))
    if args.variant is None and not args.no_results:  # every variant: what a reader checks
        dest = Path(args.results) if args.results else RESULTS
        publish.write(dest, docs, "python -m emu lab run --all", reasons)
        print(f"Wrote {dest}")
    return worst


def main(args) -> int:
    """Dispatch `emu lab ACTION`."""
    try:
        return {"list": cmd_list, "show": cmd_show, "run": cmd_run,
                "results": publish.cmd_results}[args.lab_command](args)
    except ValueError as exc:
        print(f"emu lab: {exc}", file=sys.stderr)
        return EXIT_BAD
