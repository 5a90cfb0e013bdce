"""Step 2 of `emu run`: the run directory and topology.json, the fabric printed with
its time dilation, then the fabric built (emu.net: namespaces, switch agents with the
run's QoS, LLDP/DCBX), captures started (emu.capture) and the metrics sampler running
(emu.metrics). Everything is torn down when the `build` context ends, on errors and
Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from emu.capture import Captures
from emu.metrics import Sampler
from emu.net import FabricNet
from emu.run.plan import RunPlan
from emu.run.terminal import Terminal
from fabric.timedil import format_rate

MODEL_LINK_BPS = 2e11  # the example link of the time-dilation line


@dataclass
class Live:
    """A built fabric with its captures and sampler running."""

    fnet: FabricNet
    captures: Captures
    sampler: Sampler
    build_s: float  # lab seconds from "Building" to agents up


def announce(plan: RunPlan, term: Terminal) -> None:
    """Create the run directory, write topology.json, print the fabric and its TDF."""
    fab, td = plan.fabric, plan.td
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    (plan.run_dir / "topology.json").write_text(json.dumps(fab.to_dict(), indent=1))
    term.say(fab.describe())
    term.say(f"\nTime dilation: TDF {fab.tdf:g} — a {format_rate(MODEL_LINK_BPS)} model link "
             f"runs at {format_rate(td.lab_rate(MODEL_LINK_BPS))} in the lab; 1 µs model = "
             f"{td.lab_time(1e-6) * 1e3:g} ms lab.")


@contextlib.contextmanager
def build(plan: RunPlan, term: Terminal) -> Iterator[Live]:
    """Build the fabric, start captures and sampling; tear all down on exit."""
    fab, qos, args = plan.fabric, plan.qos, plan.args
    t0 = time.monotonic()
    term.say(f"\nBuilding {fab.name} ({len(fab.nodes)} namespaces, {len(fab.links)} links)...",
             flush=True)
    if qos is not None:
        (plan.run_dir / "qos.json").write_text(json.dumps(qos.to_dict(), indent=1))
        for w in qos.validate([p.ifname for sw in fab.switches() for p in fab.node_ports(sw.name)]):
            print(f"emu: QoS warning: {w}", file=sys.stderr)
    term.say(f"Switch QoS: {'off (plain forwarding)' if qos is None else qos.name}")
    with FabricNet(fab, run_dir=plan.run_dir, shaping=not args.no_shaping, qos=qos) as fnet:
        build_s = time.monotonic() - t0
        term.say(f"  up in {build_s:.1f} s, run tag {fnet.tag} (namespaces emu-{fnet.tag}-*)",
                 flush=True)
        if qos is not None:
            missing = fnet.wait_pfc()
            term.say("  LLDP/DCBX: PFC " + ("active on every fabric port" if not missing else
                                            f"NOT negotiated on {missing}"), flush=True)
        caps = Captures(plan.run_dir / "pcaps", bound_kb=int(args.pcap_limit * 1000))
        caps.start(fnet, plan.targets)
        sampler = Sampler(plan.run_dir / "metrics.csv", plan.td, plan.interval,
                          {s.name: (lambda n=s.name: fnet.counters(n)) for s in fab.switches()},
                          {s.name: "switch" for s in fab.switches()})
        sampler.start()
        yield Live(fnet, caps, sampler, build_s)
