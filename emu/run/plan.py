"""Step 1 of `emu run`: every option checked and resolved before anything is built
(a bad value fails here, naming the option; docs/CONVENTIONS.md).

The run directory is resolved to an absolute path here, once: agents, NICs, workers
and dumpcap run with other working directories, and every path they get derives from
it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from emu.observe import capture
from emu.faults import plan as faultplan
from emu.realise import lbplan
from emu.cluster import placer as placement, servers
from emu.realise.nics import uet_nic_options
from emu.run import options
from emu.run.options import RunOptions
from emu.run.phases import Phases
from emu.faults.schedule import parse_schedule
from emucore.qos.qosconfig import QosConfig
from emucore.qos.load import load_qos
from emucore.qos.cbfc import Cbfc
from emucore.qos.llr import Llr
from emucore.qos.trim import Trim
from emucore.timedil import TimeDilation, parse_duration
from topologies.model import Fabric


@dataclass
class RunPlan:
    """What one `emu run` will do, validated."""

    options: RunOptions  # resolved (emu.run.options.resolve, absolute_cwd)
    fabric: Fabric
    qos: QosConfig | None  # None = plain forwarding
    targets: list[tuple[str, str]]  # (node, ifname) to capture
    workload: dict | None  # validated workload options (emu.run.options.validate)
    interval: float  # metrics sampling interval, model seconds
    shown_dir: Path  # the run directory as the user named it (printed)
    run_dir: Path  # the same, absolute (every file and child process uses this one)
    #: how the TDF was chosen: {"mode": "auto", "tdf", "need", "path", "s_per_frame",
    #: "cost_factors", "reason"} (emu.run.autotdf.Choice.to_dict)
    #: or {"mode": "given", "tdf"}
    tdf_choice: dict | None = None
    #: node -> ports that send no LLDP (a lab's `lldp_off`; emu.realise.net.FabricNet)
    lldp_off: dict | None = None
    #: switch -> emucore.lbconfig.LoadBalance (`--lb`, a lab's `lb:`; emu.realise.lbplan)
    lb: dict | None = None
    #: the fault schedule resolved against the fabric (`--fault`; emu.faults.plan)
    faults: tuple = ()
    #: `--servers`: the servers the fabric is spread over (emu.cluster.servers, emu.cluster.net)
    servers: object = None
    #: wall time per phase of the run (emu.run.phases; summary.json "phases")
    phases: Phases = field(default_factory=Phases)

    @property
    def td(self) -> TimeDilation:
        """The run's time dilation."""
        return TimeDilation(self.fabric.tdf)


def load_qos_arg(text: str) -> QosConfig | None:
    """`--qos` value -> QosConfig, or None for off."""
    if text in ("off", "none"):
        return None
    return load_qos(text)


def kv_arg(option: str, text: str) -> dict:
    """`K=V,K=V` -> {K: V} (numbers as numbers); ValueError names the option."""
    out: dict = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise ValueError(f"{option}: expected KEY=VALUE, got {item!r}")
        try:
            out[k] = int(v, 0)
        except ValueError:
            out[k] = v
    return out


def with_part(qos: QosConfig | None, option: str, part, text: str | None) -> QosConfig | None:
    """`--trim/--llr/--cbfc [K=V,...]` on top of the QoS configuration (the switches do
    it in their QoS pipeline and advertise it with DCBX): QosConfig's field `option`."""
    if text is None:
        return qos
    if qos is None:
        raise ValueError(f"--{option}: the switches do it in their QoS pipeline; not with "
                         f"--qos off")
    return replace(qos, **{option: part.from_dict(
        {} if text == "on" else kv_arg(f"--{option}", text), f"--{option}")})


def uet_options(opts: RunOptions, qos: QosConfig | None) -> dict:
    """The NicConfig fields of `--transport` and `--uet`; {} for RoCE."""
    if opts.transport != "uet":
        if opts.uet:
            raise ValueError("--uet: UET knobs need --transport uet")
        return {}
    return uet_nic_options(kv_arg("--uet", opts.uet or ""), qos, "--uet")


def nic_timeout_option(opts: RunOptions) -> dict:
    """`--nic-timeout T`: every NIC's retransmission timeout (NicConfig.timeout_s, model
    seconds); {} without it."""
    if opts.nic_timeout is None:
        return {}
    try:
        t = parse_duration(opts.nic_timeout)
    except ValueError:
        t = 0.0
    if not 0 < t < float("inf"):
        raise ValueError(f"--nic-timeout: a model time > 0 such as 131us, got "
                         f"{opts.nic_timeout!r}")
    return {"timeout_s": t}


def run_dir_arg(out: str | None, fabric: Fabric) -> Path:
    """`--out`, or runs/<topology>-<time> under the current directory."""
    if out:
        return Path(out)
    return Path("runs") / f"{fabric.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_plan(opts: RunOptions, fabric: Fabric) -> RunPlan:
    """Check every `emu run` option against the fabric; ValueError names the bad one."""
    targets = capture.select(fabric, opts.pcap)
    qos = load_qos_arg(opts.qos)
    for name, part in (("trim", Trim), ("llr", Llr), ("cbfc", Cbfc)):
        qos = with_part(qos, name, part, getattr(opts, name))
    wl = options.validate(opts, fabric)
    opts = options.absolute_cwd(options.resolve(opts))
    nic = uet_options(opts, qos) | nic_timeout_option(opts)
    if wl is not None:
        wl["nic"] = nic  # further NicConfig fields of every NIC the workload starts
    elif opts.nic_timeout is not None:
        raise ValueError("--nic-timeout: the NICs start with a workload; add --workload or "
                         "--script")
    if wl is not None and opts.workload in options.TORCH_WORKLOADS and targets:
        for h in sorted({g.host for g in fabric.gpus.values()})[:2]:  # the rendezvous
            if (h, "fe0") not in targets:
                targets.append((h, "fe0"))
    interval = parse_duration(opts.interval)
    if not interval > 0:
        raise ValueError(f"--interval: must be > 0, got {opts.interval!r}")
    shown = run_dir_arg(opts.out, fabric)
    lb = lbplan.resolve(fabric, qos, opts.lb)
    faults = faultplan.resolve(fabric, parse_schedule(opts.fault))
    if faults and wl is None:
        raise ValueError("--fault: faults happen during a workload; add --workload or --script")
    sv = servers_arg(opts.servers, fabric)
    return RunPlan(opts, fabric, qos, targets, wl, interval, shown, shown.resolve(),
                   {"mode": "given", "tdf": fabric.tdf}, lb=lb, faults=faults, servers=sv)


def servers_arg(path: str | None, fabric: Fabric) -> object:
    """`--servers FILE`: the servers file read and the fabric placed (a bad file or pin
    fails here)."""
    if not path:
        return None
    sv = servers.load(path)
    local = [s.name for s in sv.servers if s.local]
    if not local:
        raise ValueError(f"--servers: {path}: one server must be this machine "
                         "(address localhost)")
    placement.place(fabric, sv.names(), sv.placement)  # (a bad pin fails here)
    return sv
