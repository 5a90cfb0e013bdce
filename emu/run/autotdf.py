"""`--tdf auto` (the default of `emu run`): the TDF from the fabric's size, the
workload's offered load and a short calibration of this machine (issue 11).

The rule (`choose`, pure, table-tested in tests/unit/test_autotdf.py):

* offered load, worst case (`offered_load`): the NICs that may send at once, each at
  its link's line rate, in `ROCE_FRAME`s (the NIC's 4096-byte path MTU), each frame
  crossing `hops` switches (1 within a rail, 3 rail -> spine -> rail). A write has one
  sender, an incast its senders, a PyTorch job every GPU (the rail-aware ring keeps
  inter-host hops on one rail switch: 1 hop; its intra-host hops use no NIC, so "every
  GPU" over-counts - the safe side). Reachability alone (no workload) is no load.
* cost per frame: what one data frame of the load costs in CPU, in units of the agent
  pipeline's time per frame as this machine runs it on the path the run's switch agents
  will take (`agents_path`: the Python agent, or C's pipeline and ring poll loop under
  `--datapath auto|fast`; `python -m emu.observe.calibrate --path python|c`, ~0.3 s of
  the routed book-QoS frame): `hops x HOP + NIC` units, that path's `FACTORS` (HOP, NIC)
  standing for what the in-process pipeline leaves out (wake-ups, system calls and the
  kernel's veth work per hop; the sending and the receiving NIC, their ACKs).
* the lab must do (model frames/s x units x calibration) / TDF CPU seconds per second on
  `emucore.fidelity.TARGET_LOAD` of the machine's cores: TDF >= that demand / (0.7 x
  cores), rounded up to a nice value (`emucore.fidelity.nice_up`), never below the
  topology's own TDF (its `tdf:`, else 5000 - `bench tdf`'s lossless figure), which
  is the floor.

Python's factors (30 a hop, 60 for the NICs: 30 a NIC end) are fitted on the 2-core VM
(routed pipeline 5.9 us per frame) to `emu run` AllReduces judged by the guard (model
time; guard p99 lag against 1 us): rail2x4 16 MB at TDF 2000 4.5-6.5 ms (7.5-13 us,
lost), 5000 1.98-2.07 ms (1.3-2.4 us, lost), 8000 1.325 ms (1.3 us, lost), 10000 1.184
ms (1.0 us, at the bound), 20000 1.146 ms (0.13 us, kept up); rail8x4 (32 ranks) 4 MB at
5000 3.21 ms (5.6 us, lost), 20000 0.629 ms (1.8 us, lost). The rule gives rail2x4
~18,000 -> 20000 (the first TDF measured comfortably inside the bound; 12.5 gave 10000,
at the bound, and fresh-clone CI runs there ended at p99 1.3-1.8 us) and rail8x4 ~73,000
-> 100000.
The guard (emu.observe.guard) judges every run afterwards, whatever the TDF.

C's factors (HOP 89.7, NIC 603.5) are the agents' and the NICs' CPU per data frame of a
whole run that kept up, divided by the same hour's calibration, measured apart because
on the C path the NICs cost ~7x an agent's hop (docs/PERFORMANCE.md "The compiled data
path", the AllReduce at auto's TDF and two lower ones, 2026-11-28 00:09-00:14 UTC, the
2-core VM otherwise quiet, commit 057ab3e): rail2x4 AllReduce 16 MB at TDF 10000 (kept
up, p99 0.42 us; its model time within 0.1 % of TDF 20000's), the agents 5.8 s and the
NICs 39.0 s of CPU for the job's 164,063 data frames (672 MB of 4 KB payloads, 1 switch
hop each: the rail-aware ring), the C calibration 0.394 us per frame (the same hour's
auto run, 2,538,697 frames/s): 5.8 / 164,063 / 0.394 us = 89.7 per hop, 39.0 / 164,063 /
0.394 us = 603.5 for the two NIC ends and their ACKs. The workers' CPU (12.1 s) is left
out: it was the same at every TDF from 1000 to 20000 (11.6-14.4 s), work per job, not
per lab second. At 10000 that is 1.31 cores of demand, within 70 % of 2: the rule picks
10000 for that AllReduce (need 9,355), where the single factor before (401.4 for hop and
NIC end alike, from the agents' CPU alone) asked 20000. A frame's cost falls as the TDF
falls (the NICs 47.3 / 39.0 / 35.2 s at 20000 / 10000 / 5000: shorter sleeps wake on
warmer caches), so factors from 10000 are the safe side below it; 5000 kept up too
(p99 0.56 us, 1.73 cores), 2500 and 1000 fell behind with both cores full.

A run whose agents are not all C is sized as Python (the safe side): `--datapath
python`; `auto` with a configuration the C pipeline refuses (`switch_agent.fast.pipeline.
check_config` / `check_agent`: trimming, LLR, CBFC, a load balancing other than ECMP),
whose agents then run Python; and `EMU_FAST_RINGS=0`, the C pipeline in Python's poll
loop (0.74-0.83 x Python's CPU per frame-hop in the same document). A C calibration that
fails (the C module not built) says so and assumes the C reference figure, never
Python's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from emu.observe.procstat import machine_cores
from emu.realise.procs import REPO
from emu.run.options import TORCH_WORKLOADS
from emucore.fidelity import TARGET_LOAD, nice_up
from emucore.timedil import format_rate
from topologies.model import Fabric

ROCE_FRAME = 14 + 20 + 8 + 12 + 16 + 4096 + 4  # Eth/IPv4/UDP/BTH/RETH/4096 B/ICRC
PYTHON, C = "python", "c"  # the switch agents' paths (emu.observe.calibrate.PATHS)
PATH_NAME = {PYTHON: "Python", C: "C"}
#: the whole run C's factors come from (module docstring): rail2x4 AllReduce 16 MB at TDF
#: 10000, kept up; its data frames, the agents' and the NICs' CPU, the hour's calibration
FIT_FRAMES, FIT_AGENTS_S, FIT_NICS_S, FIT_CAL_C = 164_063, 5.8, 39.0, 1 / 2_538_697


@dataclass(frozen=True)
class Factors:
    """A data frame's CPU in a whole run, in calibrations (the in-process pipeline's time
    per frame): `hop` per switch it crosses, `nic` for both NIC ends and their ACKs."""

    hop: float
    nic: float

    def units(self, hops: float) -> float:
        """Calibrations per data frame crossing `hops` switches."""
        return hops * self.hop + self.nic


#: per path: Python's fitted to verdicts (30 a hop, 30 a NIC end), C's measured (module
#: docstring)
FACTORS = {PYTHON: Factors(30.0, 2 * 30.0),
           C: Factors(FIT_AGENTS_S / FIT_FRAMES / FIT_CAL_C, FIT_NICS_S / FIT_FRAMES / FIT_CAL_C)}
CAL_C = 0.48e-6  # C's pipeline the day its ring loop landed (2026-11-27, docs/PERFORMANCE.md)
#: the routed book-QoS pipeline per frame when the calibration cannot run: Python's on
#: the 2-core VM when the factor was fitted (`bench switch`), C's the day of its factor
REFERENCE_S_PER_FRAME = {PYTHON: 5.9e-6, C: CAL_C}
CALIBRATION_S = 0.3
RINGS_ENV = "EMU_FAST_RINGS"  # "0": the fast agents poll in Python (switch_agent.fastagent.RINGS)


@dataclass(frozen=True)
class Load:
    """The worst-case offered load of a workload on a fabric."""

    senders: int  # NICs sending at line rate at once
    line_bps: float  # model line rate of a sender's link (the fastest, if they differ)
    hops: float  # switches a frame crosses (mean over the senders)
    what: str  # for the printed reason

    def frames_per_model_s(self) -> float:
        """Frames per model second the senders offer together."""
        return self.senders * self.line_bps / 8 / ROCE_FRAME


@dataclass(frozen=True)
class Choice:
    """The chosen TDF and why."""

    tdf: float
    need: float  # the TDF the load needs on this machine, before rounding and the floor
    reason: str
    path: str = PYTHON  # the agents' path it was sized for
    s_per_frame: float = 0.0  # that path's calibration (0: none was needed)

    def to_dict(self) -> dict:
        """summary.json's "tdf_choice"."""
        return {"mode": "auto", "tdf": self.tdf, "need": round(self.need, 1),
                "path": self.path, "s_per_frame": self.s_per_frame,
                "cost_factors": {"hop": round(FACTORS[self.path].hop, 1),
                                 "nic": round(FACTORS[self.path].nic, 1)},
                "reason": self.reason}


def _switch_of(fab: Fabric, gpu: str) -> tuple[str, float]:
    g = fab.gpus[gpu]
    lk = fab.link_of(g.host, g.nic)
    other = lk.b if (lk.a.node, lk.a.ifname) == (g.host, g.nic) else lk.a
    return other.node, lk.model_bps


def offered_load(fab: Fabric, workload: str | None, options: dict | None) -> Load:
    """The worst-case load of a validated workload (emu.run.options.validate)."""
    if workload is None or workload == "bookexample" or not options:
        return Load(0, 0.0, 0.0, "reachability only")
    if workload in TORCH_WORKLOADS:
        rates = [_switch_of(fab, g)[1] for g in fab.gpus]
        return Load(len(rates), max(rates), 1.0,
                    f"{workload}: every GPU's NIC at line rate, 1 hop (rail-aware ring)")
    gpus = options["gpus"]  # write: [src, dst]; incast: [to, from...]
    if workload == "write":
        pairs = [(gpus[0], gpus[1])]
    else:
        pairs = [(s, gpus[0]) for s in gpus[1:]]
    hops = [1 if _switch_of(fab, a)[0] == _switch_of(fab, b)[0] else 3 for a, b in pairs]
    rate = max(_switch_of(fab, a)[1] for a, _ in pairs)
    mean = sum(hops) / len(hops)
    return Load(len(pairs), rate, mean,
                f"{workload}: {len(pairs)} sender{'s' * (len(pairs) > 1)} at line rate, "
                f"{mean:g} switch hop{'s' * (mean != 1)} per frame")


def agents_path(mode: str, qos, lb: dict | None,
                env: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(PYTHON or C, why): the pipeline a run's switch agents will take under datapath
    `mode` (switch_agent.fastagent.build) with the run's `qos` (QosConfig or None) and
    `lb` (switch -> emucore.lbconfig.LoadBalance); PYTHON when any agent will."""
    if mode == PYTHON:
        return PYTHON, "--datapath python"
    refused = [f"qos.{f}" for f in ("trim", "llr", "cbfc") if getattr(qos, f, None)]
    refused += sorted({f"lb.mode {b.mode}" for b in (lb or {}).values() if b.mode != "ecmp"})
    if refused and mode == "auto":
        return PYTHON, f"--datapath auto, and C refuses {', '.join(refused)}"
    if env.get(RINGS_ENV, "1") == "0":
        return PYTHON, (f"{RINGS_ENV}=0: C's pipeline in Python's poll loop, sized as "
                        "Python's")
    return C, f"--datapath {mode}: C's pipeline and ring poll loop"


def choose(load: Load, s_per_frame: float, cores: int, floor: float,
           path: str = PYTHON) -> tuple[float, float]:
    """(TDF, the TDF the load needs): the lab's CPU demand at TDF T is
    frames/s x FACTORS[path].units(hops) x s_per_frame / T; keep it within
    TARGET_LOAD x cores, round up nicely, never below `floor`."""
    if s_per_frame <= 0 or cores <= 0 or floor <= 0:
        raise ValueError(f"s_per_frame, cores and floor must be > 0, got {s_per_frame!r}, "
                         f"{cores!r}, {floor!r}")
    demand = (load.frames_per_model_s() * FACTORS[path].units(load.hops)
              * s_per_frame)  # lab CPU seconds per model second
    need = demand / (TARGET_LOAD * cores)
    return (max(floor, nice_up(need)) if need > 0 else floor), need


def explain(fab: Fabric, load: Load, s_per_frame: float, cores: int, tdf: float,
            need: float, floor: float, calibrated: str,
            agents: tuple[str, str] = (PYTHON, "")) -> str:
    """The printed reason of a choice (`s_per_frame` and `agents`, (path, why), unused
    without load)."""
    ports = sum(len(fab.node_ports(s.name)) for s in fab.switches())
    rates = sorted({_switch_of(fab, g)[1] for g in fab.gpus})
    head = (f"TDF auto: {tdf:g} - {fab.name} has {len(fab.switches())} switches "
            f"({ports} ports) and {len(fab.gpus)} NICs x "
            f"{'/'.join(format_rate(r) for r in rates)}; {load.what}")
    if load.senders == 0:
        return f"{head}: no data-path load, so the topology's TDF {floor:g}."
    path, why = agents
    f = FACTORS[path]
    per_frame = f.units(load.hops) * s_per_frame
    cap = TARGET_LOAD * cores / per_frame
    machine = (f"the switch agents run {PATH_NAME[path]} ({why}), whose pipeline forwards "
               f"~{1 / s_per_frame:,.0f} frames/s on this machine ({calibrated}); in a "
               f"whole run a frame costs ~{per_frame * 1e6:,.0f} us of CPU ({load.hops:g} "
               f"hop{'s' * (load.hops != 1)} x {f.hop:.0f} + NICs {f.nic:.0f} pipeline "
               f"frames, {PATH_NAME[path]}'s factors), so {cores} core{'s' * (cores > 1)} "
               f"at {TARGET_LOAD:.0%} take ~{cap:,.0f} frames/s")
    lab = load.frames_per_model_s() / tdf
    tail = (f"needs TDF >= {need:,.0f}" + (f", below the topology's TDF {floor:g} (the floor)"
                                           if need <= floor else f", rounded up to {tdf:g}"))
    return (f"{head} = {load.frames_per_model_s():,.0f} frames/s model; {machine}; "
            f"at TDF {tdf:g} the run asks ~{lab:,.0f}: {tail}.")


def calibrate(seconds: float = CALIBRATION_S, path: str = PYTHON) -> tuple[float, str]:
    """Seconds per frame of this machine's agent pipeline on `path` (`python -m
    emu.observe.calibrate --path P` in a child, so that the pipeline is never imported by
    `emu` itself), and how it was found; that path's reference figure when the child
    fails, saying why (for C, e.g. that its module is not built)."""
    name = PATH_NAME[path]
    try:
        r = subprocess.run([sys.executable, "-m", "emu.observe.calibrate", "--seconds",
                            str(seconds), "--path", path],
                           cwd=str(REPO), capture_output=True, text=True, timeout=60)
        out = json.loads(r.stdout)
        if "error" in out:
            raise ValueError(out["error"])
        s = float(out["s_per_frame"])
        if not (math.isfinite(s) and s > 0):
            raise ValueError(f"s_per_frame {s!r}")
        return s, f"measured in {seconds:g} s"
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
        ref = REFERENCE_S_PER_FRAME[path]
        return ref, (f"calibrating the {name} pipeline failed ({exc}); assumed {name}'s "
                     f"{ref * 1e6:g} us/frame")


def auto(fab: Fabric, workload: str | None, options: dict | None,
         measured: tuple[float, str] | None = None, cores: int | None = None,
         agents: tuple[str, str] = (PYTHON, "the agents' path not given")) -> Choice:
    """The auto TDF for a fabric whose `tdf` is the floor, sized for the agents' path
    (`agents`: (path, why), `agents_path`); calibrates that path unless `measured`
    (s_per_frame, how) is given."""
    load = offered_load(fab, workload, options)
    path = agents[0]
    if load.senders == 0:  # nothing to size: no calibration either
        measured = measured or (REFERENCE_S_PER_FRAME[path], "not calibrated")
    s, how = measured if measured is not None else calibrate(path=path)
    cores = cores or machine_cores()
    tdf, need = choose(load, s, cores, fab.tdf, path)
    return Choice(tdf, need, explain(fab, load, s, cores, tdf, need, fab.tdf, how, agents),
                  path, s if load.senders else 0.0)
