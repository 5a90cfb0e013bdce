"""`python -m emu`: build, run, inspect and clean emulated AI backend fabrics."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

import topologies
from collectives.launch import MASTER_PORT
from collectives.ring import RING_KINDS
from emu.realise import nsutil, tunnel
from emu.cluster import placer as placement, remote, servers
from emu.cluster.net import ClusterNet
from emu.lab import command as lab_command
from emu.mncli import open_cli
from emu.observe.summary import report
from emu.run import autotdf, build, collect, workload
from emu.run.plan import make_plan
from emu.run.report import print_report
from emu.run.terminal import Terminal
from emucore.runmark import is_tag
from emucore.timedil import DEFAULT_TDF, parse_size
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


def tdf_arg(text: str) -> float | str:
    """`--tdf` value: "auto" or a number > 0."""
    if text == "auto":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'auto' or a number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def tag_arg(text: str) -> str:
    """`--run` value: a run tag (4 hex digits, printed by `emu run`)."""
    if not is_tag(text):
        raise argparse.ArgumentTypeError(f"a run tag is 4 hex digits, got {text!r}")
    return text


def _topo_args(p: argparse.ArgumentParser, auto: bool = False) -> None:
    p.add_argument("topology", help="a preset (see `emu list`), rail{R}x{H}, or a YAML file")
    p.add_argument("--spines", type=int, default=None, metavar="N",
                   help="number of spines for generated rail fabrics (default 2)")
    if auto:
        p.add_argument("--tdf", type=tdf_arg, default="auto",
                       help="time-dilation factor: lab rate = model rate / TDF. auto "
                            "(default): sized from the fabric, the workload's offered load "
                            "and a 0.3 s calibration of this machine, never below the "
                            "topology's TDF (its tdf:, else %g); a number is used as given. "
                            "Either way the fidelity guard judges whether the lab kept up "
                            "(exit 3 if not)" % DEFAULT_TDF)
    else:
        p.add_argument("--tdf", type=tdf_arg, default=None,
                       help="time-dilation factor: lab rate = model rate / TDF (default from "
                            "the topology, else %g)" % DEFAULT_TDF)


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

    p = sub.add_parser("show", help="print a topology's wiring and addressing plan (no root)")
    _topo_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable description")
    p.add_argument("--servers", default=None, metavar="FILE",
                   help="also show how the fabric would be placed on the servers of FILE "
                        "(YAML: servers, placement pins; emu.cluster.servers) and which links would "
                        "cross servers as VXLAN tunnels")
    p.add_argument("--check", action="store_true",
                   help="with --servers: check each server (SSH without a password, root, "
                        "the same emu at the same path, VXLAN); exit 2 naming the server "
                        "that is not ready")

    p = sub.add_parser("run", help="build a fabric, check it, run a workload, tear it down",
                       description="Build the fabric in network namespaces with a switch agent "
                                   "per switch, print it, check reachability of every GPU NIC "
                                   "pair, print a summary and tear everything down (also on "
                                   "Ctrl-C). Needs root. Exit status: 0 pass, 1 a check "
                                   "failed, 2 bad options, 3 fidelity lost (the lab fell "
                                   "behind the model; rerun with the TDF the summary names).")
    _topo_args(p, auto=True)
    p.add_argument("--cli", action="store_true",
                   help="open the Mininet CLI before tearing down (try: h1g1 ping h4g2)")
    p.add_argument("--servers", default=None, metavar="FILE",
                   help="spread the fabric over the servers of FILE (YAML, emu.cluster.servers; one "
                        "of them this machine, address localhost): each other server runs "
                        "its part over SSH as root, links between servers are VXLAN "
                        "tunnels (check first: emu show TOPO --servers FILE --check). "
                        "PyTorch workloads and --script run their workers where their GPUs "
                        "are, write/incast register memory where each NIC is, --fault and "
                        "--cli act on each node where it runs")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="run directory (default runs/<topology>-<timestamp>)")
    p.add_argument("--qos", default="book", metavar="CONFIG",
                   help="switch QoS: book (ch.11, default), paper, a YAML file, an NX-OS "
                        "snippet (.nxos/.cfg/.conf, Examples 11-1..11-7), or off (plain "
                        "forwarding)")
    p.add_argument("--lb", action="append", default=None, metavar="[WHO=]SPEC",
                   help="load balancing over equal-cost next hops (ch.12), repeatable: SPEC "
                        "is MODE[,key=value...] with MODE ecmp (default; hash=5-tuple|"
                        "no-sport|3-tuple|dst-ip), flowlet (flowlet_gap=256us, estimator="
                        "bytes|queue, util_threshold=0.7, queue_threshold=150KB) or spray "
                        "(spray=round-robin|random|least-queue); also order=route|port|"
                        "nexthop, interfaces=eth5+eth6, dlb_mac=M. WHO= limits it to a "
                        "switch (rail1=spray) or a role (spine=...). On top of --qos's "
                        "(an NX-OS 'hardware profile dlb')")
    p.add_argument("--fault", action="append", default=None, metavar="SCHEDULE",
                   help="faults during the workload, repeatable, ';'-separated events "
                        "'TIME KIND TARGET [ACTION] [k=v..]', TIME in model units after the "
                        "workload starts: link rail1:eth5 down|up (or rail1-spine1), "
                        "link X degrade rate=100G loss=1%% delay=2us corrupt=0.1%%, "
                        "link X restore, switch spine1 down|up, nic h1g1 down|up, "
                        "storm h1g1 prio=3 for=5ms, storm h1g1 stop, pause h1g1 prio=3 "
                        "quanta=65535; e.g. \"1ms link rail1:eth5 down; 3ms link "
                        "rail1:eth5 up\"")
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
                        "would (RANK, WORLD_SIZE, MASTER_ADDR, ... set; sys.path[0] the "
                        "script's directory; whatever backend it names - gloo, nccl, none - "
                        "runs over the fabric); must come last")
    p.add_argument("--cwd", default=None, metavar="DIR",
                   help="torch workloads: the workers' working directory (default: where "
                        "emu was started, as torchrun)")
    p.add_argument("--backend", default="emu", choices=["emu", "gloo"],
                   help="torch workloads: emu (over the fabric, default; what a script's "
                        "'gloo' or 'nccl' becomes) or gloo (torch's, over the frontend's "
                        "kernel TCP, for comparison)")
    p.add_argument("--iters", type=int, default=None,
                   help="allreduce: timed iterations per size (default 3); train: steps")
    p.add_argument("--gpu", default="none", choices=["none", "h100"],
                   help="torch workloads and scripts: what compute costs in model time - "
                        "none (free, default) or h100 (measured H100 figures: the FLOPs of "
                        "forward and backward, counted with torch's FlopCounterMode, held "
                        "at the throughput an H100 achieves for that shape)")
    p.add_argument("--model", default="mlp", choices=["mlp", "gpt2-small", "xfmr-d2048"],
                   help="train: the model (mlp, default; gpt2-small: 12 blocks d 768, 85 M "
                        "parameters; xfmr-d2048: 4 blocks d 2048, 201 M)")
    p.add_argument("--overlap", default="on", choices=["on", "off"],
                   help="train: DDP overlaps its gradient AllReduces with the backward (on, "
                        "default) or runs them after it (off)")
    p.add_argument("--ring", default="rail", choices=RING_KINDS,
                   help="torch workloads, backend emu: ring order of the collectives: rail "
                        "(rail-aware, as NCCL: inter-host hops stay on a rail; default) or "
                        "rank (the book's ring 0 -> 1 -> ... -> N-1 -> 0 of Fig 14-5; its "
                        "inter-host hops may cross rails through a spine)")
    p.add_argument("--master-port", type=int, default=MASTER_PORT, metavar="N",
                   help="torch workloads: MASTER_PORT, the TCP port rank 0's rendezvous "
                        f"store listens on (default {MASTER_PORT}, torchrun's; the book's "
                        "ch.14 example uses 12345)")
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
    p.add_argument("--send", action="store_true",
                   help="write: a SEND into a receive buffer the target posted instead of an "
                        "RDMA WRITE (not with --write-only on RoCE: a SEND cannot be sprayed)")
    p.add_argument("--dcqcn", default="paper", choices=["paper", "nvidia", "off"],
                   help="NIC congestion control profile (default paper; RoCE only)")
    p.add_argument("--transport", default="roce", choices=["roce", "uet"],
                   help="what the NICs speak: roce (RC over RoCEv2, default) or uet (Ultra "
                        "Ethernet over UDP 4793: RUD with SACK, NSCC, an entropy value per "
                        "packet that sprays one message over every spine); the same verbs, "
                        "so every workload and --script runs over either")
    p.add_argument("--uet", default=None, metavar="K=V,...",
                   help="UET knobs: mode=rud|rod, ev=oblivious|reps|fixed, ack_every=4, "
                        "reps_slots=8, rnr_s=0.00064 (model s a SEND with no receive posted "
                        "waits), rnr_retries=7 (with --transport uet)")
    p.add_argument("--trim", nargs="?", const="on", default=None, metavar="K=V,...",
                   help="switches trim UET frames on a congested egress instead of queueing "
                        "them whole: cut to keep=64 B, DSCP 11 (12 at the last hop), header "
                        "on queue 7, above threshold=100KB (also dscps=24, trimmed_dscp, "
                        "lasthop_dscp, queue); on top of --qos")
    p.add_argument("--llr", nargs="?", const="on", default=None, metavar="K=V,...",
                   help="link-level retry, modelled in the switch agents (UE; there is no "
                        "PCS on a veth): a frame a degraded link would lose is replayed "
                        "after timeout=1us, in order, up to max_replays=8; advertised in "
                        "LLDP (oui=0xACDE48, subtype=1: not public, configurable); on top "
                        "of --qos")
    p.add_argument("--cbfc", nargs="?", const="on", default=None, metavar="K=V,...",
                   help="credit-based flow control, modelled in the switch agents (UE): on "
                        "switch-to-switch links that both advertise it (LLDP), the lossless "
                        "priorities run on credits (credits=the xOFF, update=64KB) instead "
                        "of PFC pauses; host links keep PFC (the NICs speak PFC)")

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

    p = sub.add_parser("clean", help="remove what emu runs left behind: their namespaces, "
                                      "processes, shared memory and sockets (only emu's)")
    p.add_argument("--run", default=None, metavar="TAG", type=tag_arg,
                   help="only this run (4 hex digits)")
    p.add_argument("--all", action="store_true",
                   help="also runs whose emu process is still alive")

    lab_command.add_parser(sub)

    p = sub.add_parser("bench", help="benchmarks that print figures against a peer")
    p.add_argument("what", choices=["forward", "tdf", "switch", "rnic", "allreduce", "fidelity",
                                    "speed", "lb", "fuzz", "train", "transport", "cluster"],
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
                        "side and the lab overhead of the split (--tdf, default 10000)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    p.add_argument("--load", type=float, default=None,
                   help="bench tdf/speed: offered load per NIC as a fraction of its line "
                        "rate (default 0.5 for tdf, 1.0 for speed)")
    p.add_argument("--topo", default="rail2x4",
                   help="bench speed: topologies, comma-separated (e.g. rail2x4,rail8x4)")
    p.add_argument("--size", default=None, help="bench lb: bytes per flow (default 8MB); "
                                                 "bench transport: per incast sender "
                                                 "(default 4MB)")
    p.add_argument("--tdf", type=float, default=None,
                   help="bench lb: TDF (default 10000); bench fuzz: TDF (default 1000); "
                        "bench train: TDF (default emu run's auto)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="bench lb, train: keep the runs here (default a new temporary "
                        "directory)")
    p.add_argument("--frames", type=int, default=100_000,
                   help="bench fuzz: malformed frames to send (default 100000)")
    p.add_argument("--seed", type=int, default=1, help="bench fuzz: frame generator seed")
    p.add_argument("--gpu", default="h100", choices=["h100"],
                   help="bench train: the compute model (default h100)")
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


def cmd_show(args) -> int:
    """`emu show TOPO`."""
    tdf = None if args.tdf == "auto" else args.tdf
    fab = topologies.load(args.topology, spines=args.spines, tdf=tdf)
    placed = None
    if getattr(args, "servers", None):
        try:
            sv = servers.load(args.servers)
            tunnel.check_mtu(sv.underlay_mtu, fab.mtu)
            placed = placement.place(fab, sv.names(), sv.placement)
        except ValueError as exc:
            print(f"emu: {exc}", file=sys.stderr)
            return 2
        if args.check:
            problems = remote.check_all(sv.servers)
            if problems:
                print("\n".join(f"emu: {p}" for p in problems), file=sys.stderr)
                return 2
            print(f"{len(sv.servers)} servers ready: {', '.join(sv.names())}", file=sys.stderr)
            if not _latency_fits(fab, sv, placed):
                return 2
    elif getattr(args, "check", False):
        print("emu: --check: with --servers FILE", file=sys.stderr)
        return 2
    if args.json:
        d = fab.to_dict()
        if placed is not None:
            d["placement"] = {"server_of": placed.server_of, "load": placed.load,
                              "cut": [tunnel.link_name(l) for l in placed.cut]}
        print(json.dumps(d, indent=1))
        return 0
    print(fab.describe())
    if placed is not None:
        print("\nPlacement on the servers (emu.cluster.placer; work = switch agents + 2 per GPU):")
        print(placed.describe())
    return 0


def _latency_fits(fab, sv, placed) -> bool:
    """Print each server's measured latency and the TDF its crossing links need (a link
    is estimated from the larger latency of its two servers, measured from here)."""
    lat = {s.name: remote.one_way_latency(s) for s in sv.servers}
    ok = True
    for s in sv.servers:
        if lat[s.name] is None:
            print(f"emu: server {s.name}: no answer to ping {s.address}", file=sys.stderr)
            ok = False
    if not ok:
        return False
    for s in sv.servers:
        links = [l for l in placed.cut if s.name in (placed.server_of[l.a.node],
                                                       placed.server_of[l.b.node])]
        if s.local or not links:
            continue
        est = [max(lat[placed.server_of[l.a.node]], lat[placed.server_of[l.b.node]])
               for l in links]
        need = max(tunnel.min_tdf(l, e) for l, e in zip(links, est))
        verdict = "fits" if need <= fab.tdf else "too low: rerun with --tdf"
        print(f"server {s.name}: one-way latency {lat[s.name] * 1e6:.0f} us lab; its "
              f"{len(links)} crossing links need TDF >= {need:.0f} (TDF {fab.tdf:g} {verdict})",
              file=sys.stderr)
        ok = ok and need <= fab.tdf
    return ok


def cmd_run(args) -> int:
    """`emu run TOPO`: plan -> build -> workload -> collect -> report (emu.run)."""
    auto = args.tdf == "auto"
    fab = topologies.load(args.topology, spines=args.spines, tdf=None if auto else args.tdf)
    try:
        plan = make_plan(args, fab)
    except ValueError as exc:
        print(f"emu: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("emu run needs root (network namespaces, raw sockets): try `sudo python -m emu "
              f"run {args.topology}`", file=sys.stderr)
        return 2
    term = Terminal(args.quiet)
    if auto:  # the topology's TDF is the floor (emu.run.autotdf)
        choice = autotdf.auto(fab, args.workload, plan.workload)
        term.say(choice.reason)
        plan.tdf_choice = choice.to_dict()
        plan.fabric = topologies.load(args.topology, spines=args.spines, tdf=choice.tdf)
    build.announce(plan, term)
    with build.build(plan, term) as live:
        outcome = workload.run_all(plan, live, term)
        all_counters = collect.stop_sampling(plan, live)
        if args.cli:
            open_cli(live.fnet, term.say)
        pcaps = live.captures.stop()
    summary = collect.summarise(plan, live, outcome, all_counters, pcaps)
    return print_report(plan, summary, outcome, pcaps)


def cmd_report(args) -> int:
    """`emu report RUNDIR`."""
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


def clean_counts(counts: dict[str, int]) -> str:
    """One run's removals as `emu clean` prints them."""
    return (f"{counts['namespaces']} namespaces, {counts['processes']} processes, "
            f"{counts['shm']} shared-memory segments, {counts['sockets']} sockets")


def cmd_clean(args) -> int:
    """`emu clean`."""
    if os.geteuid() != 0:
        print("emu clean needs root to remove namespaces: try `sudo python -m emu clean`",
              file=sys.stderr)
        return 2
    states = nsutil.run_states()  # (read before the clean removes them)
    removed = nsutil.clean(args.run, include_live=args.all)
    for t in removed["runs"]:  # a run spread over servers: its parts there (emu.cluster.net)
        for line in ClusterNet.clean_parts(states.get(t, {})):
            print(line)
    if not removed["runs"] and not removed["skipped"]:
        print("Nothing to clean: no emu namespaces, processes, shared memory or run state.")
    for t in removed["runs"]:
        print(f"Removed run {t}: {clean_counts(removed['by_run'][t])}.")
    if len(removed["runs"]) > 1:
        total = {k: sum(c[k] for c in removed["by_run"].values()) for k in nsutil.KINDS}
        print(f"  in all: {clean_counts(total)}.")
    for t in removed["skipped"]:
        print(f"Skipped run {t}: its emu process is still running (use --all to remove it).")
    return 0


def cmd_bench(args) -> int:
    """`emu bench ...`."""
    from emu.bench import basic as bench  # deferred: Scapy and the switch pipeline (tests/unit/test_layers.py)

    if args.what == "switch":
        return bench.switch_pipeline()
    if os.geteuid() != 0:
        print("emu bench needs root: try `sudo python -m emu bench forward`", file=sys.stderr)
        return 2
    if args.load is not None and not 0 < args.load <= 1:
        print(f"emu bench: --load must be in (0, 1], got {args.load:g}", file=sys.stderr)
        return 2
    if args.what == "tdf":
        return bench.fabric_load(duration=args.duration,
                                 load=0.5 if args.load is None else args.load)
    if args.what == "speed":
        topos = tuple(args.topo.split(","))
        try:
            for t in topos:
                topologies.load(t)
        except topologies.TopologyError as exc:
            print(f"emu bench: --topo: {exc}", file=sys.stderr)
            return 2
        return bench.speed(topos, load=1.0 if args.load is None else args.load,
                           duration=args.duration)
    if args.what == "rnic":
        return bench.rnic()
    if args.what == "allreduce":
        return bench.allreduce()
    if args.what == "fidelity":
        return bench.fidelity()
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
    sized = {"transport": (bench.transport_bench, "4MB"), "cluster": (bench.cluster_bench, "8MB")}
    if args.what in sized:
        fn, default = sized[args.what]
        try:
            parse_size(args.size or default)
        except ValueError as exc:
            print(f"emu bench: --size: {exc}", file=sys.stderr)
            return 2
        return fn(args.size or default, tdf=args.tdf or 10000.0, out=args.out)
    return bench.forward(duration=args.duration)


COMMANDS = {"list": cmd_list, "show": cmd_show, "run": cmd_run, "clean": cmd_clean,
            "lab": lab_command.main,
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
