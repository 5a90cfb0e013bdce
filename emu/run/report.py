"""Step 5 of `emu run`: what the terminal shows at the end — reachability, the plots
made (emu.observe.plots), the table per switch and class (emu.observe.summary), what went wrong, the
captures, the fidelity guard's line, the verdict and the run directory; the exit status
(EXIT_PASS, EXIT_FAIL, EXIT_FIDELITY_LOST: `python -m emu run --help`)."""

from __future__ import annotations

import sys

from emu.faults import reconverge as faultreport
from emu.observe import plots
from emu.observe.summary import table_text, verdict_text
from emu.run.plan import RunPlan
from emu.run.workload import Outcome

SHOWN = 10  # listed failures per kind
EXIT_PASS, EXIT_FAIL, EXIT_FIDELITY_LOST = 0, 1, 3  # 2: bad options (emu.cli)


def print_report(plan: RunPlan, summary: dict, out: Outcome, pcaps: dict) -> int:
    """Print the end of the run; returns the exit status."""
    v, shown = out.reach, plan.shown_dir
    print(f"\nSummary: {len(v.ok)}/{len(v.results)} GPU pairs reachable; "
          f"{len(v.ok) - len(v.wrong_path)} took the expected path "
          f"(intra-rail 0 routed hops, cross-rail 3: rail->spine->rail).")
    if v.by_design:
        print(f"  {len(v.by_design)} cross-rail pairs have no fabric path by design (rail-only, "
              f"ch.13: their data crosses NVLink first); "
              f"{sum(1 for r in v.by_design if not r.ok)} of them were indeed unreachable.")
    made = []
    if not plan.options.no_plots:
        with plan.phases.timed("plots"):
            made = plots.make_all(plan.run_dir)
    print(table_text(summary, color=sys.stdout.isatty()).rstrip("\n").rsplit("\n", 1)[0])
    if made:
        print(f"  plots: {', '.join(p.name for p in made)} in {shown / 'plots'}")
    elif plan.options.no_plots:
        print(f"  plots: none (--no-plots; `python -m emu report {shown}` draws them)")
    if summary.get("faults"):
        print(faultreport.table(summary["faults"]))
    for r in [r for r in v.bad if not r.ok][:SHOWN]:
        print(f"  UNREACHABLE {r.src} -> {r.dst}")
    for r in [r for r in v.bad if r.ok and r in v.by_design][:SHOWN]:
        print(f"  REACHABLE THOUGH RAIL-ONLY {r.src} -> {r.dst}")
    for r in [r for r in v.wrong_path if r not in v.by_design][:SHOWN]:
        print(f"  UNEXPECTED PATH {r.src} -> {r.dst}: {r.hops} routed hops")
    truncated = [name for name, p in pcaps.items() if p["truncated"]]
    if pcaps:
        print(f"  {len(pcaps)} captures in {shown / 'pcaps'} (timestamps are lab time; "
              f"model time = lab / {plan.fabric.tdf:g})"
              + (f"; truncated at the size bound: {', '.join(truncated)}" if truncated else ""))
    if summary["verdict"] == "fidelity_lost" and not summary.get("checks_passed", True):
        print("  the checks failed too (see above); with the lab behind, that may be why")
    print(plan.phases.line())
    print(f"Verdict: {verdict_text(summary)}.  Run directory: {shown}")
    return {"pass": EXIT_PASS, "fidelity_lost": EXIT_FIDELITY_LOST}.get(summary["verdict"],
                                                                        EXIT_FAIL)
