"""`python -m emu`: build, run, inspect and clean emulated AI backend fabrics."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import topologies
from fabric.timedil import DEFAULT_TDF, TimeDilation, format_rate

log = logging.getLogger("emu")

EPILOG = """examples:
  python -m emu list
  python -m emu show rail2x4
  sudo python -m emu run rail2x4
  sudo python -m emu run rail2x4 --cli        # then: h1g1 ping h4g2
  sudo python -m emu clean
  sudo python -m emu bench forward
"""


def _topo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", help="a preset (see `emu list`), rail{R}x{H}, or a YAML file")
    p.add_argument("--spines", type=int, default=None, metavar="N",
                   help="number of spines for generated rail fabrics (default 2)")
    p.add_argument("--tdf", type=float, default=None,
                   help="time-dilation factor: lab rate = model rate / TDF (default from the "
                        "topology, else %g)" % DEFAULT_TDF)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests)."""
    ap = argparse.ArgumentParser(prog="python -m emu", description=__doc__, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sub.add_parser("list", help="list the topologies, one line each")

    p = sub.add_parser("show", help="print a topology's wiring and addressing plan (no root)")
    _topo_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable description")

    p = sub.add_parser("run", help="build a fabric, check it, run a workload, tear it down",
                       description="Build the fabric in network namespaces with a switch agent "
                                   "per switch, print it, check reachability of every GPU NIC "
                                   "pair, print a summary and tear everything down (also on "
                                   "Ctrl-C). Needs root.")
    _topo_args(p)
    p.add_argument("--cli", action="store_true",
                   help="open the Mininet CLI before tearing down (try: h1g1 ping h4g2)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="run directory (default runs/<topology>-<timestamp>)")
    p.add_argument("--qos", default="book", metavar="CONFIG",
                   help="switch QoS: book (ch.11, default), paper, a YAML file, an NX-OS "
                        "snippet (.nxos/.cfg/.conf, Examples 11-1..11-7), or off (plain "
                        "forwarding)")
    p.add_argument("--no-shaping", action="store_true",
                   help="do not shape links to their lab rate (forward as fast as possible)")
    p.add_argument("--pcap", default="hosts", metavar="WHICH",
                   help="capture per interface: all, hosts (GPU NICs, default), none, or "
                        "node:ifname,... (files in RUNDIR/pcaps/, bounded by --pcap-limit)")
    p.add_argument("--pcap-limit", type=float, default=20.0, metavar="MB",
                   help="size bound per capture file (default 20 MB; the capture stops there "
                        "and the summary says it was truncated)")
    p.add_argument("--interval", default="50us", metavar="T",
                   help="metrics sampling interval in model time (default 50us; never "
                        "faster than 20 samples/s of lab time)")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    p.add_argument("--workload", choices=["write", "incast", "allreduce", "train", "pipeline",
                                          "tensor", "bookexample"],
                   default=None,
                   help="after the reachability check, start one RDMA NIC per GPU and run: "
                        "write (--src, --dst, --size), incast (--to, --from, --size); with one "
                        "PyTorch worker per GPU (torchrun-style, backend 'emu'): allreduce "
                        "(nccl-tests table, --size 1MB,64MB, --iters, --dtype), train (DDP "
                        "MLP vs a single-process reference), pipeline (ch.8, 4 GPUs on 2 "
                        "hosts), tensor (tensor-parallel FFN); bookexample: the book's Figs "
                        "2-2..2-4 network, one torch step")
    p.add_argument("--script", nargs=argparse.REMAINDER, default=None, metavar="FILE [ARGS]",
                   help="run your own torch.distributed script on every GPU the way torchrun "
                        "would (RANK, WORLD_SIZE, MASTER_ADDR, ... set; backend name 'emu', "
                        "also the default of init_process_group()); must come last")
    p.add_argument("--backend", default="emu", choices=["emu", "gloo"],
                   help="torch workloads: emu (over the fabric, default) or gloo (torch's, "
                        "over the frontend's kernel TCP, for comparison)")
    p.add_argument("--iters", type=int, default=None,
                   help="allreduce: timed iterations per size (default 3); train: steps")
    p.add_argument("--dtype", default="float32",
                   help="allreduce: element type(s), comma list of float32, float64, int32, "
                        "int64 (integer results are checked exactly)")
    p.add_argument("--src", default="h1g1", help="write: source GPU (default h1g1)")
    p.add_argument("--dst", default="h4g2", help="write: target GPU (default h4g2)")
    p.add_argument("--to", default="h4g1", help="incast: target GPU (default h4g1)")
    p.add_argument("--from", dest="froms", default="h1g1,h2g1,h3g1",
                   help="incast: comma-separated sender GPUs (default h1g1,h2g1,h3g1)")
    p.add_argument("--size", default=None,
                   help="write/incast: bytes per write (default 16MB); allreduce: bytes per "
                        "rank, a comma list is a size sweep (default 64MB)")
    p.add_argument("--write-only", action="store_true",
                   help="write: every packet WRITE ONLY with its own RETH (ch.12)")
    p.add_argument("--dcqcn", default="paper", choices=["paper", "nvidia", "off"],
                   help="NIC congestion control profile (default paper)")

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

    p = sub.add_parser("clean", help="remove what emu runs left behind (only emu's namespaces)")
    p.add_argument("--run", default=None, metavar="TAG", help="only this run (4 hex digits)")
    p.add_argument("--all", action="store_true",
                   help="also runs whose emu process is still alive")

    p = sub.add_parser("bench", help="benchmarks that print figures against a peer")
    p.add_argument("what", choices=["forward", "tdf", "switch", "rnic", "allreduce"],
                   help="forward: agent vs Linux bridge; tdf: fabric load sustained per TDF; "
                        "switch: per-packet cost of the pipeline, QoS on vs off; rnic: "
                        "one-QP RDMA WRITE goodput and frame build rate vs Scapy; allreduce: "
                        "ring AllReduce busbw of 8 PyTorch workers (1, 16, 64 MB) vs gloo")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    p.add_argument("--load", type=float, default=0.5,
                   help="bench tdf: offered load per NIC as a fraction of its line rate")
    return ap


def cmd_list(_args) -> int:
    """`emu list`."""
    print("Topologies (presets; any rail{R}x{H} is generated, e.g. rail4x8 --spines 4):")
    for name, desc in topologies.presets().items():
        print(f"  {name:<14} {desc}")
    print("  rail{R}x{H}    generated: H hosts x R GPUs, R rail switches, --spines N (default 2)")
    print("  FILE.yaml      your own fabric (see topologies/presets/*.yaml for the format)")
    return 0


def cmd_show(args) -> int:
    """`emu show TOPO`."""
    fab = topologies.load(args.topology, spines=args.spines, tdf=args.tdf)
    print(json.dumps(fab.to_dict(), indent=1) if args.json else fab.describe())
    return 0


def _run_dir(args, fab) -> Path:
    if args.out:
        d = Path(args.out)
    else:
        d = Path("runs") / f"{fab.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cmd_run(args) -> int:
    """`emu run TOPO`."""
    from emu import capture, reach
    from emu.metrics import Sampler
    from emu.net import FabricNet
    from fabric.timedil import parse_duration

    fab = topologies.load(args.topology, spines=args.spines, tdf=args.tdf)
    try:
        targets = capture.select(fab, args.pcap)
        qos = load_qos_arg(args.qos)
        workload = _workload_args(args, fab)
        if workload is not None and args.workload in TORCH_WORKLOADS and targets:
            for h in sorted({g.host for g in fab.gpus.values()})[:2]:  # the rendezvous
                if (h, "fe0") not in targets:
                    targets.append((h, "fe0"))
        interval = parse_duration(args.interval)
        if not interval > 0:
            raise ValueError(f"--interval: must be > 0, got {args.interval!r}")
    except ValueError as exc:
        print(f"emu: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("emu run needs root (network namespaces, raw sockets): try `sudo python -m emu "
              f"run {args.topology}`", file=sys.stderr)
        return 2
    say = (lambda *a, **k: None) if args.quiet else print
    td = TimeDilation(fab.tdf)
    run_dir = _run_dir(args, fab)
    (run_dir / "topology.json").write_text(json.dumps(fab.to_dict(), indent=1))
    say(fab.describe())
    say(f"\nTime dilation: TDF {fab.tdf:g} — a {format_rate(2e11)} model link runs at "
        f"{format_rate(td.lab_rate(2e11))} in the lab; 1 µs model = "
        f"{td.lab_time(1e-6) * 1e3:g} ms lab.")
    t0 = time.monotonic()
    say(f"\nBuilding {fab.name} ({len(fab.nodes)} namespaces, {len(fab.links)} links)...",
        flush=True)
    results = []
    if qos is not None:
        (run_dir / "qos.json").write_text(json.dumps(qos.to_dict(), indent=1))
        for w in qos.validate([p.ifname for sw in fab.switches() for p in fab.node_ports(sw.name)]):
            print(f"emu: QoS warning: {w}", file=sys.stderr)
    say(f"Switch QoS: {'off (plain forwarding)' if qos is None else qos.name}")
    with FabricNet(fab, run_dir=run_dir, shaping=not args.no_shaping, qos=qos) as fnet:
        t_build = time.monotonic() - t0
        say(f"  up in {t_build:.1f} s, run tag {fnet.tag} (namespaces emu-{fnet.tag}-*)",
            flush=True)
        if qos is not None:
            missing = fnet.wait_pfc()
            say("  LLDP/DCBX: PFC " + ("active on every fabric port" if not missing else
                                       f"NOT negotiated on {missing}"), flush=True)
        caps = capture.Captures(run_dir / "pcaps", bound_kb=int(args.pcap_limit * 1000))
        caps.start(fnet, targets)
        sampler = Sampler(run_dir / "metrics.csv", td, interval,
                          {s.name: (lambda n=s.name: fnet.counters(n)) for s in fab.switches()},
                          {s.name: "switch" for s in fab.switches()})
        sampler.start()
        n = len(fab.gpus)
        say(f"Checking reachability of all {n * (n - 1)} ordered GPU NIC pairs...", flush=True)
        with phase(args, "pinging every GPU pair through the fabric"):
            results = reach.check_all(fnet)
        wl = None
        t_work = time.monotonic()
        if workload is not None:
            say(f"Running workload {args.workload} ...", flush=True)
            with phase(args, f"{args.workload}: running over the fabric (TDF {fab.tdf:g})"):
                wl = _run_workload(fnet, args, workload, sampler)
            print(wl["text"], flush=True)
        t_work = time.monotonic() - t_work
        all_counters = sampler.stop()
        (run_dir / "last_counters.json").write_text(json.dumps(all_counters))
        counters = {k: v for k, v in all_counters.items() if "ports" in v}
        if args.cli:
            from mininet.log import setLogLevel

            from emu.mncli import EmuCLI

            setLogLevel("output")  # the CLI prints through Mininet's 'output' level
            say("\nMininet CLI: try `h1g1 ping h4g2`, `counters rail1`, `fabric`, `exit`.")
            EmuCLI(fnet)
        pcaps = caps.stop()
    ok = [r for r in results if r.ok]
    bad = [r for r in results if not reach.as_expected(fab, r)]
    by_design = [r for r in results if reach.expected_hops(fab, r.src, r.dst) is None]
    wrong_path = [r for r in ok if r in bad]
    summary = {
        "topology": fab.name, "tdf": fab.tdf, "build_s": round(t_build, 2),
        "pairs": len(results), "reachable": len(ok), "wrong_path": len(wrong_path),
        "min_rtt_ms": {"intra_rail": _min_rtt(fab, ok, same=True),
                       "cross_rail": _min_rtt(fab, ok, same=False)},
        "switches": {sw: {"rx_packets": sum(p["rx_packets"] for p in c["ports"].values()),
                          "tx_packets": sum(p["tx_packets"] for p in c["ports"].values()),
                          "drops": sum(sum(p["drops"].values()) for p in c["ports"].values())}
                     for sw, c in counters.items()},
        "pcaps": pcaps,
        "unreachable_by_design": len(by_design),
        "verdict": "pass" if results and not bad and (wl is None or wl["ok"]) else "fail",
        "version": 1, "qos": qos.name if qos is not None else "off",
        "workload_lab_s": round(t_work, 3), "workload_model_s": td.model_time(t_work),
        "metrics_rows": sampler.rows,
    }
    from emu.report import class_totals, nic_totals, table_text

    summary["classes"] = class_totals(counters)
    summary["nics"] = nic_totals(all_counters)
    if wl is not None:
        summary["workload"] = {k: v for k, v in wl["result"].items()
                               if k not in ("rate_samples", "steps")}
        if wl["result"].get("steps"):
            summary["steps"] = wl["result"]["steps"]
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nSummary: {len(ok)}/{len(results)} GPU pairs reachable; "
          f"{len(ok) - len(wrong_path)} took the expected path "
          f"(intra-rail 0 routed hops, cross-rail 3: rail->spine->rail).")
    if by_design:
        print(f"  {len(by_design)} cross-rail pairs have no fabric path by design (rail-only, "
              f"ch.13: their data crosses NVLink first); "
              f"{sum(1 for r in by_design if not r.ok)} of them were indeed unreachable.")
    from emu import plots

    made = plots.make_all(run_dir)
    print(table_text(summary, color=sys.stdout.isatty()).rstrip("\n").rsplit("\n", 1)[0])
    if made:
        print(f"  plots: {', '.join(p.name for p in made)} in {run_dir / 'plots'}")
    for r in [r for r in bad if not r.ok][:10]:
        print(f"  UNREACHABLE {r.src} -> {r.dst}")
    for r in [r for r in bad if r.ok and r in by_design][:10]:
        print(f"  REACHABLE THOUGH RAIL-ONLY {r.src} -> {r.dst}")
    for r in [r for r in wrong_path if r not in by_design][:10]:
        print(f"  UNEXPECTED PATH {r.src} -> {r.dst}: {r.hops} routed hops")
    truncated = [name for name, p in pcaps.items() if p["truncated"]]
    if pcaps:
        print(f"  {len(pcaps)} captures in {run_dir / 'pcaps'} (timestamps are lab time; "
              f"model time = lab / {fab.tdf:g})"
              + (f"; truncated at the size bound: {', '.join(truncated)}" if truncated else ""))
    print(f"Verdict: {summary['verdict'].upper()}.  Run directory: {run_dir}")
    return 0 if summary["verdict"] == "pass" else 1


def phase(args, text: str):
    """A rich spinner for a long phase on a terminal; nothing when quiet or not a TTY
    (the phase's own plain line was printed already, so CI logs stay readable)."""
    import contextlib

    if args.quiet or not sys.stdout.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console().status(text)


TORCH_WORKLOADS = {"allreduce": "collectives.workloads.allreduce",
                   "train": "collectives.workloads.train",
                   "pipeline": "collectives.workloads.pipeline",
                   "tensor": "collectives.workloads.tensor", "script": None}


def _workload_args(args, fab) -> dict | None:
    """Validate --workload options before anything is built (ValueError names the bad one)."""
    from fabric.timedil import parse_size

    if args.script is not None:
        if args.workload is not None:
            raise ValueError(f"--script and --workload {args.workload}: pick one")
        if not args.script or not Path(args.script[0]).is_file():
            raise ValueError(f"--script: no such file {(args.script or [''])[0]!r}")
        args.workload = "script"
    if args.workload is None:
        return None
    if args.workload == "bookexample":
        return {"gpus": [], "size": 0}
    if args.workload in TORCH_WORKLOADS:
        from collectives.launch import plan

        slots = plan(fab)  # ValueError unless every host has as many GPUs
        if args.workload == "pipeline" and (len({s.host for s in slots}) < 2
                                            or len(slots) // len({s.host for s in slots}) < 2):
            raise ValueError("pipeline: needs 2 hosts with 2 GPUs each (the book's 0a, 1a, "
                             "0b, 1b)")
        bad = [d for d in args.dtype.split(",") if d not in ("float32", "float64", "int32", "int64")]
        if bad:
            raise ValueError(f"--dtype: {bad[0]!r} is not float32, float64, int32 or int64")
        if args.iters is not None and args.iters < 1:
            raise ValueError(f"--iters: must be >= 1, got {args.iters}")
        sizes = [parse_size(x) for x in (args.size or "64MB").split(",") if x.strip()]
        if not sizes or not all(0 < x < 1 << 31 for x in sizes):
            raise ValueError(f"--size: 1 B .. 2 GiB per rank, got {args.size!r}")
        return {"gpus": list(fab.gpus), "sizes": sizes, "size": max(sizes)}
    if args.workload == "write":
        named = [("--src", args.src), ("--dst", args.dst)]
    else:
        named = [("--to", args.to)] + [("--from", g) for g in args.froms.split(",") if g]
    for opt, g in named:
        if g not in fab.gpus:
            raise ValueError(f"{opt}: no GPU {g!r} in {fab.name} (e.g. {next(iter(fab.gpus))})")
    size = parse_size(args.size or "16MB")
    if not 0 < size < 1 << 31:
        raise ValueError(f"--size: must be 1 B .. 2 GiB, got {args.size!r}")
    return {"gpus": [g for _, g in named], "size": size}


def _run_workload(fnet, args, w: dict, sampler=None) -> dict:
    """Start the NICs of the GPUs involved and run the workload; result and verdict."""
    from traffic import nic_client
    from traffic.workloads import rdma

    if args.workload == "bookexample":
        from traffic.workloads import bookexample

        r = bookexample.run()
        ok = abs(r["loss"] - 0.25) < 1e-6 and abs(r["W53"] - 0.995) < 1e-6
        return {"result": r, "ok": ok, "text": bookexample.describe(r)}

    socks = fnet.start_nics(dcqcn=args.dcqcn, gpus=sorted(set(w["gpus"])))
    if fnet.run_dir is not None:  # the effective congestion-control configuration
        import dataclasses

        from traffic.dcqcn import DcqcnProfile

        prof = (dataclasses.asdict(DcqcnProfile.by_name(args.dcqcn)) if args.dcqcn != "off"
                else {"name": "off"})
        (fnet.run_dir / "dcqcn.json").write_text(json.dumps(prof, indent=1))
    if sampler is not None:  # sample the NICs' QPs too (rate, CNPs)
        for gpu, sock in socks.items():
            sampler.kinds[gpu] = "nic"
            sampler.sources[gpu] = (lambda p=sock: nic_client.request(p, {"cmd": "counters"}))
    if args.workload in TORCH_WORKLOADS:
        from collectives.jobresult import run_torch_workload

        return run_torch_workload(fnet, args, w, socks)
    if args.workload == "write":
        r = rdma.write(fnet.fabric, socks, args.src, args.dst, w["size"],
                       write_only=args.write_only)
        ok = r["status"] == "SUCCESS" and r["byte_exact"]
    else:
        r = rdma.incast(fnet.fabric, socks, w["gpus"][0], w["gpus"][1:], w["size"])
        ok = set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values())
    return {"result": r, "ok": ok, "text": rdma.describe(r)}


def load_qos_arg(text: str):
    """`--qos` value -> QosConfig, or None for off."""
    if text in ("off", "none"):
        return None
    from fabric.qos.load import load_qos

    return load_qos(text)


def cmd_report(args) -> int:
    """`emu report RUNDIR`."""
    from emu.report import report

    try:
        report(Path(args.run_dir))
    except (FileNotFoundError, ValueError) as exc:
        print(f"emu: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_show_switch(args) -> int:
    """`emu show-switch RUN SWITCH TEXT`."""
    from emu import nsutil
    from switch_agent import control

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


def _min_rtt(fab, results, same: bool):
    vals = [r.rtt_ms for r in results if r.rtt_ms is not None
            and (fab.gpus[r.src].rail == fab.gpus[r.dst].rail) == same]
    return min(vals) if vals else None


def cmd_clean(args) -> int:
    """`emu clean`."""
    from emu import nsutil

    if os.geteuid() != 0:
        print("emu clean needs root to remove namespaces: try `sudo python -m emu clean`",
              file=sys.stderr)
        return 2
    removed = nsutil.clean(args.run, include_live=args.all)
    if not removed["runs"] and not removed["skipped"]:
        print("Nothing to clean: no emu namespaces or run state.")
    for t in removed["runs"]:
        print(f"Removed run {t}.")
    print(f"  {len(removed['namespaces'])} namespaces, {len(removed['processes'])} processes")
    for t in removed["skipped"]:
        print(f"Skipped run {t}: its emu process is still running (use --all to remove it).")
    return 0


def cmd_bench(args) -> int:
    """`emu bench ...`."""
    from emu import bench

    if args.what == "switch":
        return bench.switch_pipeline()
    if os.geteuid() != 0:
        print("emu bench needs root: try `sudo python -m emu bench forward`", file=sys.stderr)
        return 2
    if args.what == "tdf":
        return bench.fabric_load(duration=args.duration, load=args.load)
    if args.what == "rnic":
        return bench.rnic()
    if args.what == "allreduce":
        return bench.allreduce()
    return bench.forward(duration=args.duration)


COMMANDS = {"list": cmd_list, "show": cmd_show, "run": cmd_run, "clean": cmd_clean,
            "bench": cmd_bench, "show-switch": cmd_show_switch, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m emu`."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")

    def on_term(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        return COMMANDS[args.command](args)
    except topologies.TopologyError as exc:
        print(f"emu: bad topology: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nemu: interrupted; everything this run created has been removed.",
              file=sys.stderr)
        return 130
