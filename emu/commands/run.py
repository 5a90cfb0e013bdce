"""`emu run TOPO`: the steps of emu.run in order, plan -> build -> workload -> collect ->
report (docs/ARCHITECTURE.md "One run"), on the options of emu.commands.run_args (their
argparse part, apart so that `python -m emu`'s parser is built without all this).
"""

from __future__ import annotations

import argparse
import os
import sys

import topologies
from emu.commands.run_args import run_options
from emu.mncli import open_cli
from emu.observe import plots
from emu.realise.procs import START_ERRORS, start_timeout
from emucore import datapath, rtsched
from emu.run import autotdf, build, collect, workload
from emu.run.options import has_workers
from emu.run.plan import make_plan
from emu.run.report import print_report
from emu.run.terminal import Terminal


def main(args: argparse.Namespace) -> int:
    """`emu run TOPO`: plan -> build -> workload -> collect -> report (emu.run)."""
    opts = run_options(args)
    auto = opts.tdf == "auto"
    fab = topologies.load(opts.topology, spines=opts.spines, tdf=None if auto else opts.tdf)
    try:
        plan = make_plan(opts, fab)
        start_timeout()  # EMU_START_TIMEOUT, if set, is valid before anything is built
        if opts.datapath != "python":
            datapath.require_built()
    except (ValueError, datapath.NotBuilt) as exc:
        print(f"emu: {exc}", file=sys.stderr)
        return 2
    os.environ[datapath.ENV] = opts.datapath  # every process of the run inherits it
    # the agents and NICs schedule themselves so (auto: rr unless the run has workers)
    os.environ[rtsched.ENV] = rtsched.resolve(opts.sched, has_workers(opts))
    if os.geteuid() != 0:
        print("emu run needs root (network namespaces, raw sockets): try `sudo python -m emu "
              f"run {opts.topology}`", file=sys.stderr)
        return 2
    term = Terminal(opts.quiet)
    if auto:  # the topology's TDF is the floor (emu.run.autotdf)
        with plan.phases.timed("calibrate"):
            choice = autotdf.auto(fab, plan.options.workload, plan.workload,
                                  agents=autotdf.agents_path(opts.datapath, plan.qos, plan.lb))
        term.say(choice.reason)
        plan.tdf_choice = choice.to_dict()
        plan.fabric = topologies.load(opts.topology, spines=opts.spines, tdf=choice.tdf)
    build.announce(plan, term)
    try:
        with build.build(plan, term) as live:
            outcome = workload.run_all(plan, live, term)
            all_counters = collect.stop_sampling(plan, live)
            if opts.cli:
                open_cli(live.fnet, term.say)
            with plan.phases.timed("collect"):
                pcaps = live.captures.stop()
            if not opts.no_plots:
                plots.warm()  # matplotlib's import while the fabric is torn down
    except START_ERRORS as exc:  # torn down already; e.g. an agent refused --datapath fast
        print(f"emu: {exc}", file=sys.stderr)
        return 2
    summary = collect.summarise(plan, live, outcome, all_counters, pcaps)
    return print_report(plan, summary, outcome, pcaps)
