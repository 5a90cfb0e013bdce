"""The `emu run TOPO` command line: its options (argparse, `add_parser(sub)`) filled into
one typed `emu.run.options.RunOptions` (`run_options`). Apart from emu.commands.run, which
runs them, so that building `python -m emu`'s parser imports neither the run's machinery
nor Mininet (docs/PERFORMANCE.md "CLI start").
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from collectives.launch import MASTER_PORT
from collectives.ring import RING_KINDS
from emu.commands.topology import topo_args
from emu.run.options import RunOptions, seed_arg
from emucore import datapath, rtsched


def add_parser(sub) -> None:
    """The `run` subcommand and its options (their defaults are RunOptions')."""
    D = RunOptions  # noqa: N806  (the defaults)
    p = sub.add_parser("run", help="build a fabric, check it, run a workload, tear it down",
                       description="Build the fabric in network namespaces with a switch agent "
                                   "per switch, print it, check reachability of every GPU NIC "
                                   "pair, print a summary and tear everything down (also on "
                                   "Ctrl-C). Needs root. Exit status: 0 pass, 1 a check "
                                   "failed, 2 bad options, 3 fidelity lost (the lab fell "
                                   "behind the model; rerun with the TDF the summary names).")
    topo_args(p, auto=True)
    p.add_argument("--seed", type=seed_arg, default=D.seed, metavar="N",
                   help="seed of every switch's and NIC's random draws: the WRED dice of "
                        "each port (Random('N:ifname')), the spray/flowlet balancer's, degraded "
                        "links' losses, each NIC's QPNs, start PSNs (hence RoCE's UDP source "
                        "ports and ECMP paths), keys and UET entropy values (Random('N:gpu')) "
                        "(default 1, the same draws in every run; another N samples another "
                        "draw of DCQCN's randomness and of the paths); summary.json records it")
    p.add_argument("--cli", action="store_true",
                   help="open the Mininet CLI before tearing down (try: h1g1 ping h4g2)")
    p.add_argument("--servers", default=D.servers, metavar="FILE",
                   help="spread the fabric over the servers of FILE (YAML, emu.cluster.servers; one "
                        "of them this machine, address localhost): each other server runs "
                        "its part over SSH as root, links between servers are VXLAN "
                        "tunnels (check first: emu show TOPO --servers FILE --check). "
                        "PyTorch workloads and --script run their workers where their GPUs "
                        "are, write/incast register memory where each NIC is, --fault and "
                        "--cli act on each node where it runs")
    p.add_argument("--out", default=D.out, metavar="DIR",
                   help="run directory (default runs/<topology>-<timestamp>)")
    p.add_argument("--qos", default=D.qos, metavar="CONFIG",
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
    p.add_argument("--datapath", choices=datapath.MODES, default=D.datapath,
                   help="the per-frame code: auto (default: compiled C wherever the "
                        "configuration is supported, Python elsewhere), python (the "
                        "reference everywhere) or fast (compiled, refusing what it does not "
                        "implement); the header and summary.json say what ran compiled")
    p.add_argument("--sched", choices=rtsched.MODES, default=D.sched,
                   help="how switch agents and NICs are scheduled: rr (real-time round "
                        "robin: their wake-ups preempt emu itself and any worker; a kernel "
                        "that refuses it leaves them normal and summary.json says so), "
                        "normal, or auto (default: rr unless the run has PyTorch workers, "
                        "which real-time agents and NICs starve)")
    p.add_argument("--no-plots", action="store_true",
                   help="draw no plots at the end of the run (summary.json, metrics.csv and "
                        "the table are written as always; `emu report RUNDIR` draws them "
                        "later)")
    p.add_argument("--no-shaping", action="store_true",
                   help="do not shape links to their lab rate (forward as fast as possible)")
    p.add_argument("--pcap", default=D.pcap, metavar="WHICH",
                   help="capture per interface: all, hosts (GPU NICs, default), none, or "
                        "node:ifname,... (files in RUNDIR/pcaps/, bounded by --pcap-limit)")
    p.add_argument("--pcap-limit", type=float, default=D.pcap_limit, metavar="MB",
                   help="size bound per capture file (default 20 MB; the capture stops there "
                        "and the summary says it was truncated)")
    p.add_argument("--interval", default=D.interval, metavar="T",
                   help="metrics sampling interval in model time (default 50us; never "
                        "faster than 20 samples/s of lab time)")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    p.add_argument("--workload", choices=["write", "incast", "allreduce", "train", "pipeline",
                                          "tensor", "bookexample"],
                   default=D.workload,
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
    p.add_argument("--cwd", default=D.cwd, metavar="DIR",
                   help="torch workloads: the workers' working directory (default: where "
                        "emu was started, as torchrun)")
    p.add_argument("--backend", default=D.backend, choices=["emu", "gloo"],
                   help="torch workloads: emu (over the fabric, default; what a script's "
                        "'gloo' or 'nccl' becomes) or gloo (torch's, over the frontend's "
                        "kernel TCP, for comparison)")
    p.add_argument("--iters", type=int, default=D.iters,
                   help="allreduce: timed iterations per size (default 3); train: steps")
    p.add_argument("--gpu", default=D.gpu, choices=["none", "h100"],
                   help="torch workloads and scripts: what compute costs in model time - "
                        "none (free, default) or h100 (measured H100 figures: the FLOPs of "
                        "forward and backward, counted with torch's FlopCounterMode, held "
                        "at the throughput an H100 achieves for that shape)")
    p.add_argument("--model", default=D.model, choices=["mlp", "gpt2-small", "xfmr-d2048"],
                   help="train: the model (mlp, default; gpt2-small: 12 blocks d 768, 85 M "
                        "parameters; xfmr-d2048: 4 blocks d 2048, 201 M)")
    p.add_argument("--overlap", default=D.overlap, choices=["on", "off"],
                   help="train: DDP overlaps its gradient AllReduces with the backward (on, "
                        "default) or runs them after it (off)")
    p.add_argument("--ring", default=D.ring, choices=RING_KINDS,
                   help="torch workloads, backend emu: ring order of the collectives: rail "
                        "(rail-aware, as NCCL: inter-host hops stay on a rail; default) or "
                        "rank (the book's ring 0 -> 1 -> ... -> N-1 -> 0 of Fig 14-5; its "
                        "inter-host hops may cross rails through a spine)")
    p.add_argument("--master-port", type=int, default=D.master_port, metavar="N",
                   help="torch workloads: MASTER_PORT, the TCP port rank 0's rendezvous "
                        f"store listens on (default {MASTER_PORT}, torchrun's; the book's "
                        "ch.14 example uses 12345)")
    p.add_argument("--dtype", default=D.dtype,
                   help="allreduce: element type(s), comma list of float32, float64, int32, "
                        "int64 (integer results are checked exactly)")
    p.add_argument("--src", default=D.src, help="write: source GPU (default h1g1)")
    p.add_argument("--dst", default=D.dst, help="write: target GPU (default h4g2)")
    p.add_argument("--to", default=D.to, help="incast: target GPU (default h4g1)")
    p.add_argument("--from", dest="froms", default=D.froms,
                   help="incast: comma-separated sender GPUs (default h1g1,h2g1,h3g1)")
    p.add_argument("--size", default=D.size,
                   help="write/incast: bytes per write (default 16MB); allreduce: bytes per "
                        "rank, a comma list is a size sweep (default 64MB)")
    p.add_argument("--write-only", action="store_true",
                   help="write: every packet WRITE ONLY with its own RETH (ch.12)")
    p.add_argument("--send", action="store_true",
                   help="write: a SEND into a receive buffer the target posted instead of an "
                        "RDMA WRITE (not with --write-only on RoCE: a SEND cannot be sprayed)")
    p.add_argument("--dcqcn", default=D.dcqcn, choices=["paper", "nvidia", "off"],
                   help="NIC congestion control profile (default paper; RoCE only)")
    p.add_argument("--nic-timeout", default=D.nic_timeout, metavar="T",
                   help="every NIC's retransmission timeout, model time (default 1.049ms: "
                        "RoCE's local ACK timeout at IB exponent 8, 4.096 us x 2^8; UET's "
                        "RTO); a QP whose peer never answers fails with RETRY_EXC_ERR after "
                        "8 of them")
    p.add_argument("--transport", default=D.transport, choices=["roce", "uet"],
                   help="what the NICs speak: roce (RC over RoCEv2, default) or uet (Ultra "
                        "Ethernet over UDP 4793: RUD with SACK, NSCC, an entropy value per "
                        "packet that sprays one message over every spine); the same verbs, "
                        "so every workload and --script runs over either")
    p.add_argument("--uet", default=D.uet, metavar="K=V,...",
                   help="UET knobs: mode=rud|rod, ev=oblivious|reps|fixed, ack_every=4, "
                        "reps_slots=8, rnr_s=0.00064 (model s a SEND with no receive posted "
                        "waits), rnr_retries=7 (with --transport uet)")
    p.add_argument("--trim", nargs="?", const="on", default=D.trim, metavar="K=V,...",
                   help="switches trim UET frames on a congested egress instead of queueing "
                        "them whole: cut to keep=64 B, DSCP 11 (12 at the last hop), header "
                        "on queue 7, above threshold=100KB (also dscps=24, trimmed_dscp, "
                        "lasthop_dscp, queue); on top of --qos")
    p.add_argument("--llr", nargs="?", const="on", default=D.llr, metavar="K=V,...",
                   help="link-level retry, modelled in the switch agents (UE; there is no "
                        "PCS on a veth): a frame a degraded link would lose is replayed "
                        "after timeout=1us, in order, up to max_replays=8; advertised in "
                        "LLDP (oui=0xACDE48, subtype=1: not public, configurable); on top "
                        "of --qos")
    p.add_argument("--cbfc", nargs="?", const="on", default=D.cbfc, metavar="K=V,...",
                   help="credit-based flow control, modelled in the switch agents (UE): on "
                        "switch-to-switch links that both advertise it (LLDP), the lossless "
                        "priorities run on credits (credits=the xOFF, update=64KB) instead "
                        "of PFC pauses; host links keep PFC (the NICs speak PFC)")


def run_options(args: argparse.Namespace) -> RunOptions:
    """The parsed `emu run` command line as RunOptions (the one place argparse's
    namespace is read)."""
    given = {f.name: getattr(args, f.name) for f in fields(RunOptions)}
    given["lb"], given["fault"] = tuple(args.lb or ()), tuple(args.fault or ())  # (lists)
    if args.script is not None:
        given["script"] = tuple(args.script)
    return RunOptions(**given)
