"""Step 3 of `emu run`: every GPU NIC pair pinged (emu.observe.reach), then the workload run
over the fabric: RDMA WRITE / incast through the emulated NICs (traffic.workloads.rdma,
book ch.9/12), a PyTorch job with one worker per GPU (collectives, ch.14), or the
book's worked example (ch.2, no fabric). Each returns {"result", "ok", "text"}; the
workload module owns its check. The options were checked by emu.run.options.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass

from collectives.jobresult import run_torch_workload
from emu.observe import reach
from emu.faults.inject import FaultRunner
from emu.observe.reach import Verdicts
from emu.realise.procs import slowness
from emu.run.build import Live
from emu.run.options import TORCH_WORKLOADS, RunOptions
from emu.run.plan import RunPlan
from emu.run.terminal import Terminal
from traffic.nic import client as nic_client
from traffic.dcqcn import DcqcnProfile
from traffic.workloads import bookexample, rdma


class NicSource:
    """One NIC's counters for the metrics sampler, over a connection kept open: the NIC
    serves each connection in a thread of its own (traffic.nic.ctl), so a connection per
    sample would start and end a thread in the NIC 20 times a second. A NIC has no brief
    counters (the same every time). A failed call closes the connection (the next one
    opens it again) and raises OSError, which the sampler logs and skips."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.client: nic_client.NicClient | None = None

    def __call__(self, brief: bool) -> dict:
        try:
            if self.client is None:
                self.client = nic_client.NicClient(self.path, timeout=10.0)
            return self.client.call("counters")
        except (OSError, nic_client.NicError) as exc:
            self.close()
            raise OSError(f"{self.path}: {exc}") from exc

    def close(self) -> None:
        """Close the connection, if open."""
        if self.client is not None:
            self.client.close()
            self.client = None


def sample_nics(sampler, socks: dict[str, str]) -> None:
    """The metrics sampler (emu.observe.metrics.Sampler) reads these NICs' counters too."""
    for gpu, sock in socks.items():
        sampler.kinds[gpu] = "nic"
        sampler.sources[gpu] = NicSource(sock)


def run(fnet, opts: RunOptions, w: dict, sampler=None, faults=None, phases=None) -> dict:
    """Start the NICs of the GPUs involved and run the workload; result and verdict.
    A fault schedule (emu.faults.inject.FaultRunner) starts its clock at the first data frame
    any of these NICs sends. The NICs' start is timed as `phases`' "nics" (emu.run.phases)."""
    if opts.workload == "bookexample":
        r = bookexample.run()
        return {"result": r, "ok": bookexample.check(r), "text": bookexample.describe(r)}
    with phases.timed("nics") if phases is not None else contextlib.nullcontext():
        socks = fnet.start_nics(dcqcn=opts.dcqcn, gpus=sorted(set(w["gpus"])),
                                **w.get("nic", {}))
    if faults is not None:
        faults.start(trigger=lambda: any(
            nic_client.request(p, {"cmd": "counters"}).get("tx_frames", 0)
            for p in socks.values()))
    if fnet.run_dir is not None:  # the effective congestion-control configuration
        prof = (dataclasses.asdict(DcqcnProfile.by_name(opts.dcqcn)) if opts.dcqcn != "off"
                else {"name": "off"})
        (fnet.run_dir / "dcqcn.json").write_text(json.dumps(prof, indent=1))
    if sampler is not None:  # sample the NICs' QPs too (rate, CNPs)
        sample_nics(sampler, socks)
    if opts.workload in TORCH_WORKLOADS:
        return run_torch_workload(fnet, opts, w, socks)
    if opts.workload == "write":
        r = rdma.write(fnet.fabric, socks, opts.src, opts.dst, w["size"],
                       write_only=opts.write_only, send=opts.send,
                       memory=fnet.memory())
        ok = r["status"] == "SUCCESS" and r["byte_exact"]
    else:
        r = rdma.incast(fnet.fabric, socks, w["gpus"][0], w["gpus"][1:], w["size"],
                        memory=fnet.memory())
        ok = set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values())
    return {"result": r, "ok": ok, "text": rdma.describe(r)}


@dataclass
class Outcome:
    """What the fabric did: the reachability verdicts and the workload's result."""

    reach: Verdicts
    workload: dict | None  # {"result", "ok", "text"}, None without a workload
    workload_lab_s: float
    faults: list | None = None  # emu.faults.inject.FaultRunner.applied, with --fault
    reach_after: dict | None = None  # the ping matrix with the faults in effect


def run_all(plan: RunPlan, live: Live, term: Terminal) -> Outcome:
    """Ping every GPU NIC pair, then run the workload (if any) over the fabric (timed as
    plan.phases' "reach", "nics" and "workload")."""
    opts, fab, phases = plan.options, plan.fabric, plan.phases
    n = len(fab.gpus)
    term.say(f"Checking reachability of all {n * (n - 1)} ordered GPU NIC pairs...", flush=True)
    with term.phase("pinging every GPU pair through the fabric"), phases.timed("reach"):
        slow = slowness()  # a slow machine (EMU_START_TIMEOUT) waits longer for replies
        results = reach.check_all(live.fnet, timeout_s=20.0 * slow, wait_s=2.0 * slow)
    wl = None
    t_work, nics_s = time.monotonic(), phases.seconds.get("nics", 0.0)
    faults = FaultRunner(live.fnet, plan.faults) if plan.faults else None
    if plan.workload is not None:
        term.say(f"Running workload {opts.workload} ...", flush=True)
        if faults is not None:
            term.say(f"  {len(plan.faults)} faults scheduled, in model time from the first "
                     f"data frame (x TDF {fab.tdf:g} in the lab)", flush=True)
        try:
            with term.phase(f"{opts.workload}: running over the fabric (TDF {fab.tdf:g})"):
                wl = run(live.fnet, opts, plan.workload, live.sampler, faults, phases)
        except Exception as exc:  # the job failed: a verdict, and the fabric torn down
            wl = {"result": {"error": f"{type(exc).__name__}: {exc}"}, "ok": False,
                  "text": f"{opts.workload} FAILED: {exc}"}
        finally:
            if faults is not None:
                faults.stop()
        print(wl["text"], flush=True)
    work_s = time.monotonic() - t_work
    after = None
    if faults is not None:
        with term.phase("pinging every GPU pair with the faults in effect"):
            after = faults.reach_after()
        term.say(f"Reach with the faults in effect: {after['reachable']}/{after['pairs']} "
                 f"ordered GPU pairs; the fabric without the failed links predicts "
                 f"{after['predicted']}" + (f"; {after['unexpected']} differ" if after["unexpected"]
                                           else ""), flush=True)
    # the workload's phase: since t_work, less its NICs' start (the faults' pings in it)
    phases.add("workload", time.monotonic() - t_work - (phases.seconds.get("nics", 0.0) - nics_s))
    return Outcome(reach.judge(fab, results), wl, work_s,
                   faults.applied if faults is not None else None, after)
