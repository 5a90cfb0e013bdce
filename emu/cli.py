"""`python -m emu`: build, run, inspect and clean emulated AI backend fabrics."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

import topologies
from emu.bench import paths as bench_paths, uetscen
from emu.cluster import remote
from emu.commands import clean as clean_command, lab_args, run_args, show as show_command
from emu.realise import nsutil
from emucore import datapath
from emucore.timedil import parse_size
from switch_agent import control

log = logging.getLogger("emu")

EPILOG = """examples:
  python -m emu list
  python -m emu show rail2x4
  sudo python -m emu run rail2x4
  sudo python -m emu run rail2x4 --cli        # then: h1g1 ping h4g2
  sudo python -m emu clean
  sudo python -m emu bench forward
  python -m emu lab list                      # the book's experiments
  sudo python -m emu lab run L11.4

exit status of `emu run`: 0 every check passed and the lab kept up with the model;
1 a check failed; 2 bad options or not root; 3 fidelity lost (the lab fell behind the
model: results are not trustworthy; the summary names the TDF to rerun with);
130 interrupted.
"""


class _Version(argparse.Action):
    """`--version`, worked out (git) only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(remote.version())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests)."""
    ap = argparse.ArgumentParser(prog="python -m emu", description=__doc__, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    ap.add_argument("--version", action=_Version, nargs=0,
                    help="emu's version and git commit (the servers of --servers must agree)")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sub.add_parser("list", help="list the topologies, one line each")
    show_command.add_parser(sub)
    run_args.add_parser(sub)

    p = sub.add_parser("show-switch", help="ask a running switch agent an NX-OS show command",
                       description="Answered live by the agent of a running emu fabric, e.g. "
                                   "python -m emu show-switch 3fa2 rail1 'show queuing "
                                   "interface eth3'. Commands: show queuing interface [ethN], "
                                   "show interface priority-flow-control, show policy-map, "
                                   "show lldp neighbors.")
    p.add_argument("run", help="run tag (4 hex digits, printed by `emu run`); '-' = the only "
                               "running one")
    p.add_argument("switch", help="switch name, e.g. rail1")
    p.add_argument("text", nargs="+", help="the show command")

    p = sub.add_parser("report", help="regenerate plots and the summary table of a run "
                                      "directory (no root)")
    p.add_argument("run_dir", help="a directory written by `emu run` (runs/<topo>-<time>)")

    clean_command.add_parser(sub)
    lab_args.add_parser(sub)

    p = sub.add_parser("bench", help="benchmarks that print figures against a peer")
    p.add_argument("what", choices=["forward", "tdf", "switch", "rnic", "allreduce", "fidelity",
                                    "speed", "lb", "fuzz", "train", "transport", "cluster", "uet"],
                   help="forward: agent vs Linux bridge; tdf: fabric load sustained per TDF; "
                        "speed: emu's lowest TDF that keeps up vs ns-3's slowdown, same "
                        "fabric and load (--topo, --load 1.0 by default); "
                        "fidelity: the same workloads at TDF T and 4T, model results side "
                        "by side with their ratio and each run's fidelity verdict; "
                        "switch: per-packet cost of the pipeline, QoS on vs off; rnic: "
                        "one-QP RDMA WRITE goodput and frame build rate vs Scapy; allreduce: "
                        "ring AllReduce busbw of 8 PyTorch workers (1, 16, 64 MB) vs gloo; "
                        "lb: a rail2x4 permutation under ecmp, flowlet and spray (--size, "
                        "--tdf): completion against S / link rate, uplink max/min; fuzz: "
                        "--frames malformed frames (truncated, bad lengths and checksums, "
                        "bogus BTH opcodes, PSNs, R_Keys, PFC, LLDP/DCBX, random) into a "
                        "running agent and NIC during an RDMA WRITE; exit 0 only with 0 "
                        "crashes and the WRITE byte-exact; train: a GPT-2-small DDP step on "
                        "rail2x4 with --gpu h100, overlap on and off: compute, communication, "
                        "overlap, iteration time (--tdf, --iters, --out); transport: the "
                        "same 3:1 incast (--size per sender) and ring AllReduce over roce and "
                        "uet, and the incast over uet with trimming: completion, queue, PFC "
                        "pauses, trims, retransmissions (--tdf, default 10000; --out); "
                        "cluster: the same int64 ring AllReduce (--size per rank, default "
                        "8MB) on rail2x4 on this machine and spread over two servers (this "
                        "one and one emulated here: needs OpenSSH), model results side by "
                        "side and the lab overhead of the split (--tdf, default 10000); uet: emu's UET "
                        "flow completion times beside uet-htsim's for the scenarios of "
                        "--scenarios (default emu/bench/data/uet-scenarios.yaml), ratio per "
                        "row (--tdf, default 10000; --out)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    p.add_argument("--load", type=float, default=None,
                   help="bench tdf/speed: offered load per NIC as a fraction of its line "
                        "rate (default 0.5 for tdf, 1.0 for speed)")
    p.add_argument("--topo", default=None,
                   help="bench speed: topologies, comma-separated (default rail2x4; e.g. "
                        "rail2x4,rail8x4); bench tdf: the topology (default rail2x4); bench "
                        "fidelity: only the workloads on these (default all)")
    p.add_argument("--datapath", choices=bench_paths.CHOICES, default=None,
                   help="the per-frame code the fabric runs (emu run --datapath): forward, "
                        "tdf, speed, fidelity measure on python and fast alternately in one "
                        "invocation and print fast/python (default both), or on the one "
                        "named; the other fabric benches run on the one named (default "
                        "auto); bench switch builds no fabric and ignores it")
    p.add_argument("--tdfs", default="1000,2000,5000,10000",
                   help="bench tdf: the TDFs, comma-separated (default 1000,2000,5000,10000)")
    p.add_argument("--size", default=None, help="bench lb: bytes per flow (default 8MB); "
                                                 "bench transport: per incast sender "
                                                 "(default 4MB)")
    p.add_argument("--tdf", type=float, default=None,
                   help="bench lb: TDF (default 10000); bench fuzz: TDF (default 1000); "
                        "bench train: TDF (default emu run's auto); bench fidelity: T for "
                        "every workload (default each one's own: 2000 on rail2x4, 5000 on "
                        "rail8x4)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="bench lb, train: keep the runs here (default a new temporary "
                        "directory)")
    p.add_argument("--frames", type=int, default=100_000,
                   help="bench fuzz: malformed frames to send (default 100000)")
    p.add_argument("--seed", type=int, default=1, help="bench fuzz: frame generator seed")
    p.add_argument("--gpu", default="h100", choices=["h100"],
                   help="bench train: the compute model (default h100)")
    p.add_argument("--scenarios", default=None, metavar="FILE",
                   help="bench uet: the scenarios file (default emu/bench/data/uet-scenarios.yaml)")
    p.add_argument("--iters", type=int, default=2,
                   help="bench train: iterations per mode, the last reported (default 2)")
    return ap



def cmd_list(_args) -> int:
    """`emu list`."""
    print("Topologies (presets; any rail{R}x{H} is generated, e.g. rail4x8 --spines 4):")
    pre = topologies.presets()
    w = max([len(n) for n in pre] + [12])
    for name, desc in pre.items():
        print(f"  {name:<{w}} {desc}")
    print(f"  {'rail{R}x{H}':<{w}} generated: H hosts x R GPUs, R rail switches, --spines N (default 2)")
    print(f"  {'FILE.yaml':<{w}} your own fabric (see topologies/presets/*.yaml for the format)")
    return 0



def cmd_report(args) -> int:
    """`emu report RUNDIR`."""
    from emu.observe.summary import report  # deferred: rich (tests/unit/test_layers.py)

    try:
        report(Path(args.run_dir))
    except (FileNotFoundError, ValueError) as exc:
        print(f"emu: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_show_switch(args) -> int:
    """`emu show-switch RUN SWITCH TEXT`."""
    tag = args.run
    if tag == "-":
        live = [t for t, st in nsutil.run_states().items() if nsutil.alive(st.get("pid", 0))]
        if len(live) != 1:
            print(f"emu: {len(live)} runs are live ({', '.join(live) or 'none'}): name one",
                  file=sys.stderr)
            return 2
        tag = live[0]
    path = nsutil.STATE_DIR / tag / f"{args.switch}.sock"
    if not path.exists():
        print(f"emu: no switch {args.switch!r} in a running run {tag!r} ({path} missing)",
              file=sys.stderr)
        return 2
    reply = control.request(str(path), {"cmd": "show", "text": " ".join(args.text)})
    if not reply.get("ok"):
        print(f"% {reply.get('error')}", file=sys.stderr)
        return 1
    print(reply["text"])
    return 0



def cmd_bench(args) -> int:
    """`emu bench ...`."""
    from emu.bench import basic as bench  # deferred: Scapy and the switch pipeline (tests/unit/test_layers.py)
    from emu.bench import uet as uet_bench  # deferred: Scapy, rich (as basic)

    if args.what == "switch":
        return bench.switch_pipeline()
    if os.geteuid() != 0:
        print("emu bench needs root: try `sudo python -m emu bench forward`", file=sys.stderr)
        return 2
    try:
        paths = bench_paths.modes(args.what, args.datapath)
        tdfs = tuple(bench_paths.tdfs(args.tdfs))
        topos = tuple(args.topo.split(",")) if args.topo else None
        for t in topos or ():
            topologies.load(t)
        if set(paths) - {"python"}:
            datapath.require_built()
    except (ValueError, datapath.NotBuilt, topologies.TopologyError) as exc:
        print(f"emu bench: {exc}", file=sys.stderr)
        return 2
    if args.load is not None and not 0 < args.load <= 1:
        print(f"emu bench: --load must be in (0, 1], got {args.load:g}", file=sys.stderr)
        return 2
    if args.what == "tdf":
        return bench.fabric_load(tdfs, duration=args.duration, topo=(topos or ("rail2x4",))[0],
                                 load=0.5 if args.load is None else args.load, paths=paths)
    if args.what == "speed":
        return bench.speed(topos or ("rail2x4",), load=1.0 if args.load is None else args.load,
                           duration=args.duration, paths=paths)
    if args.what == "fidelity":
        if args.tdf is not None and args.tdf < 1:
            print(f"emu bench: --tdf must be >= 1, got {args.tdf:g}", file=sys.stderr)
            return 2
        return bench.fidelity(paths=paths, topos=topos, tdf=args.tdf)
    if args.what == "forward":
        return bench.forward(duration=args.duration, paths=paths)
    os.environ[datapath.ENV] = paths[0]  # one path: every process of the bench inherits it
    if args.what == "rnic":
        return bench.rnic()
    if args.what == "allreduce":
        return bench.allreduce()
    if args.what == "lb":
        args.size = args.size or "8MB"
        try:
            parse_size(args.size)
        except ValueError as exc:
            print(f"emu bench: --size: {exc}", file=sys.stderr)
            return 2
        return bench.lb_bench(args.size, args.tdf or 10000.0, args.out)
    if args.what == "fuzz":
        if args.frames < 1:
            print(f"emu bench: --frames: must be >= 1, got {args.frames}", file=sys.stderr)
            return 2
        return bench.fuzz_bench(args.frames, args.seed, args.tdf or 1000.0)
    if args.what == "train":
        if args.iters < 1:
            print(f"emu bench: --iters: must be >= 1, got {args.iters}", file=sys.stderr)
            return 2
        return bench.train_bench(args.gpu, args.tdf, args.iters, args.out)
    if args.what == "uet":
        try:
            uetscen.load(args.scenarios or uetscen.DEFAULT_FILE)
        except ValueError as exc:
            print(f"emu bench: {exc}", file=sys.stderr)
            return 2
        return uet_bench.uet(args.scenarios, tdf=args.tdf or 10000.0, out=args.out)
    sized = {"transport": (bench.transport_bench, "4MB"), "cluster": (bench.cluster_bench, "8MB")}
    if args.what in sized:
        fn, default = sized[args.what]
        try:
            parse_size(args.size or default)
        except ValueError as exc:
            print(f"emu bench: --size: {exc}", file=sys.stderr)
            return 2
        return fn(args.size or default, tdf=args.tdf or 10000.0, out=args.out)
    raise AssertionError(f"bench {args.what}")  # argparse's choices


def cmd_run(args) -> int:
    """`emu run TOPO` (emu.commands.run)."""
    from emu.commands import run  # deferred: the run's machinery, Mininet (tests/unit/test_layers.py)

    return run.main(args)


def cmd_lab(args) -> int:
    """`emu lab ACTION` (emu.lab.command)."""
    from emu.lab import command  # deferred: Scapy, matplotlib, rich (tests/unit/test_layers.py)

    return command.main(args)


COMMANDS = {"list": cmd_list, "show": show_command.main, "run": cmd_run,
            "clean": clean_command.main, "lab": cmd_lab,
            "bench": cmd_bench, "show-switch": cmd_show_switch, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m emu`."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")

    def on_term(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    # also when started with SIGINT ignored (a background job of a script, nohup): an
    # explicit SIGINT still tears the run down
    signal.signal(signal.SIGINT, on_term)
    try:
        return COMMANDS[args.command](args)
    except topologies.TopologyError as exc:
        print(f"emu: bad topology: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nemu: interrupted; everything this run created has been removed.",
              file=sys.stderr)
        return 130