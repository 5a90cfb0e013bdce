"""Step 2 of `emu run`: the run directory and topology.json, the fabric printed with
its time dilation, then the fabric built (emu.realise.net: namespaces, switch agents with the
run's QoS, LLDP/DCBX), captures started (emu.observe.capture) and the metrics sampler running
(emu.observe.metrics), which also walks the processes emu started for their CPU time and peak
memory per kind (emu.observe.procstat). Everything is torn down when the `build` context ends, on errors and
Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from collectives import jobresult
from emu.realise import lbplan
from emu.observe.capture import Captures
from emu.cluster.net import ClusterNet
from emu.observe.metrics import Sampler
from emu.realise.net import FabricNet
from emu.observe.procstat import CpuTracker
from emu.run.options import TORCH_WORKLOADS, has_workers
from emu.run.plan import RunPlan
from emu.run.terminal import Terminal
from emucore import datapath, rtsched
from emucore.timedil import format_rate

MODEL_LINK_BPS = 2e11  # the example link of the time-dilation line


@dataclass
class Live:
    """A built fabric with its captures and sampler running."""

    fnet: FabricNet
    captures: Captures
    sampler: Sampler
    build_s: float  # lab seconds from "Building" to agents up
    procs: CpuTracker  # CPU seconds and peak RSS per process kind


def known_pids(fnet: FabricNet) -> dict[int, str]:
    """pid -> kind of the switch agents and RDMA NICs this run started (emu.observe.procstat)."""
    out = {}
    for sw in fnet.local_switches():  # (the agents of other servers are not ours to count)
        agent = getattr(fnet.net[sw.name], "agent", None) if fnet.net is not None else None
        if agent is not None:
            out[agent.pid] = "agents"
    for p in (fnet.nics.procs if fnet.nics is not None else ()):
        out[p.pid] = "nics"
    return out


def announce(plan: RunPlan, term: Terminal) -> None:
    """Create the run directory, write topology.json, print the fabric and its TDF."""
    fab, td = plan.fabric, plan.td
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    for old in (plan.run_dir / "events").glob("*.jsonl"):  # a reused --out: the event
        old.unlink()  # logs are appended to, and must hold this run's events only
    (plan.run_dir / "topology.json").write_text(json.dumps(fab.to_dict(), indent=1))
    term.say(fab.describe())
    term.say(f"\nTime dilation: TDF {fab.tdf:g} — a {format_rate(MODEL_LINK_BPS)} model link "
             f"runs at {format_rate(td.lab_rate(MODEL_LINK_BPS))} in the lab; 1 µs model = "
             f"{td.lab_time(1e-6) * 1e3:g} ms lab.")
    term.say(datapath.header(plan.options.datapath))
    term.say(rtsched.header(plan.options.sched, has_workers(plan.options)))


@contextlib.contextmanager
def build(plan: RunPlan, term: Terminal) -> Iterator[Live]:
    """Build the fabric, start captures and sampling; tear all down on exit (timed as
    plan.phases' "build", "lldp_dcbx", "observe" and "teardown")."""
    fab, qos, opts, phases = plan.fabric, plan.qos, plan.options, plan.phases
    t0 = time.monotonic()
    term.say(f"\nBuilding {fab.name} ({len(fab.nodes)} namespaces, {len(fab.links)} links)...",
             flush=True)
    if qos is not None:
        (plan.run_dir / "qos.json").write_text(json.dumps(qos.to_dict(), indent=1))
        for w in qos.validate([p.ifname for sw in fab.switches() for p in fab.node_ports(sw.name)]):
            print(f"emu: QoS warning: {w}", file=sys.stderr)
    term.say(f"Switch QoS: {'off (plain forwarding)' if qos is None else qos.name}")
    term.say(f"Seed {opts.seed}: the switches' random draws (WRED dice, spray, test drops) "
             "and the NICs' (QPNs, PSNs, UET entropy)")
    extra = {"lldp_off": plan.lldp_off} if plan.lldp_off else {}
    extra["seed"] = opts.seed
    if plan.lb:
        extra["lb"] = plan.lb
        (plan.run_dir / "lb.json").write_text(json.dumps(
            {n: lb.to_dict() for n, lb in plan.lb.items()}, indent=1))
        for line in lbplan.describe(plan.lb):
            term.say(f"Load balancing: {line}")
    if plan.servers is not None:
        fnet_cm = ClusterNet(fab, plan.servers, run_dir=plan.run_dir,
                             shaping=not opts.no_shaping, qos=qos, **extra)
        term.say(f"Spread over {len(plan.servers.servers)} servers (emu.cluster.net):\n"
                 + fnet_cm.placement.describe())
    else:
        fnet_cm = FabricNet(fab, run_dir=plan.run_dir, shaping=not opts.no_shaping, qos=qos,
                            **extra)
        if opts.workload in TORCH_WORKLOADS and os.environ.get("EMU_ZYGOTE", "1") != "0":
            # its torch import beside the build (collectives.launch.Prestart)
            fnet_cm.zygote_prestart = jobresult.prestart(fnet_cm, opts)
    t_down = None
    try:
        with fnet_cm as fnet:
            try:
                yield from _up(plan, term, fnet, time.monotonic() - t0)
            finally:
                t_down = time.monotonic()
    finally:
        pre = getattr(fnet_cm, "zygote_prestart", None)
        if pre is not None:  # a job that never ran (a failed build or check) leaves none
            pre.discard()
        if t_down is not None:
            phases.add("teardown", time.monotonic() - t_down)
        steps = getattr(fnet_cm, "steps_s", {})
        phases.detail["build"] = {k: s for k, s in steps.items() if k in BUILD_STEPS}
        phases.detail["teardown"] = {k: s for k, s in steps.items() if k not in BUILD_STEPS}


#: FabricNet.steps_s of its start (the others are of its stop)
BUILD_STEPS = ("namespaces", "configure", "agents", "lldp_speakers")


def _up(plan: RunPlan, term: Terminal, fnet, build_s: float) -> Iterator[Live]:
    """The built fabric's checks and observers started; yields the Live run."""
    fab, qos, opts, phases = plan.fabric, plan.qos, plan.options, plan.phases
    phases.add("build", build_s)
    term.say(f"  up in {build_s:.1f} s, run tag {fnet.tag} (namespaces emu-{fnet.tag}-*)",
             flush=True)
    if qos is not None:
        with phases.timed("lldp_dcbx"):
            missing = fnet.wait_pfc()
        term.say("  LLDP/DCBX: PFC " + ("active on every fabric port" if not missing else
                                        f"NOT negotiated on {missing}"), flush=True)
    t_obs = time.monotonic()
    caps = Captures(plan.run_dir / "pcaps", bound_kb=int(opts.pcap_limit * 1000))
    caps.start(fnet, plan.targets)
    sampler = Sampler(plan.run_dir / "metrics.csv", plan.td, plan.interval,
                      {s.name: (lambda brief, n=s.name: fnet.counters(n, brief))
                       for s in fab.switches()},
                      {s.name: "switch" for s in fab.switches()})
    procs = CpuTracker(os.getpid(), lambda: known_pids(fnet))
    for s in fab.switches():  # the guard judges the run, not the build (start-up, LLDP)
        fnet.agent_request(s.name, {"cmd": "fidelity_reset"})
    procs.start()
    sampler.hooks.append(procs.sample)
    sampler.start()
    phases.add("observe", time.monotonic() - t_obs)
    yield Live(fnet, caps, sampler, build_s, procs)
