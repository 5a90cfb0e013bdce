"""Step 4 of `emu run`: stop sampling and keep every agent's and NIC's last counters
(last_counters.json), then, after teardown, the run's summary.json (emu.observe.summary's
schema: verdict, reachability, totals per switch and class, NIC totals, the workload's
result and completion time in lab and model time, where the balanced flows' bytes went
per switch and egress port ("paths", emu.observe.paths), the fidelity guard's judgement
(emu.observe.guard) with the TDF and how it was chosen, CPU and peak memory per process kind).

The verdict is "fidelity_lost" when the lab did not keep up with the model during a
workload, whatever the checks say (their figures are model-time results of a lab that
fell behind); "checks_passed" keeps what the checks said. A run without a workload
checks reachability and paths only, which no lag changes: its lag is reported with
"binding": false and does not decide the verdict.
"""

from __future__ import annotations

import json

from emu.faults import reconverge as faultreport
from emu.observe import guard, paths, reach
from emu.observe.summary import SCHEMA_VERSION, class_totals, nic_totals
from emu.run.build import Live
from emu.run.options import has_workers
from emu.run.autotdf import machine_cores
from emu.run.plan import RunPlan
from emu.run.workload import Outcome
from emucore import datapath, rtsched
from emucore.fidelity import suggest_tdf


def stop_sampling(plan: RunPlan, live: Live) -> dict:
    """Stop the sampler; write and return the last counters of every agent and NIC
    (timed as plan.phases' "collect")."""
    with plan.phases.timed("collect"):
        all_counters = live.sampler.stop()
        (plan.run_dir / "last_counters.json").write_text(json.dumps(all_counters))
    return all_counters


def switch_totals(counters: dict) -> dict[str, dict]:
    """Packets in and out and drops per switch, summed over its ports."""
    return {sw: {"rx_packets": sum(p["rx_packets"] for p in c["ports"].values()),
                 "tx_packets": sum(p["tx_packets"] for p in c["ports"].values()),
                 "drops": sum(sum(p["drops"].values()) for p in c["ports"].values()),
                 "trimmed": sum(p.get("trimmed", 0) for p in c["ports"].values())}
            for sw, c in counters.items()}


def worker_fidelity(wl: dict | None) -> dict:
    """The workers as guard entries: their compute-model hold points ("h1g1 compute": a
    worker whose CPU took longer than the GPU it models lagged like a late frame) and
    their wake-ups in the collectives ("h1g1 comm": a worker resuming late after a
    completion or a peer's note, collectives.channel)."""
    res = (wl or {}).get("result") or {}
    return {f"{gpu} {kind}": {"fidelity": snap} for kind in ("compute", "comm")
            for gpu, snap in (res.get(f"{kind}_fidelity") or {}).items()}


def summarise(plan: RunPlan, live: Live, out: Outcome, all_counters: dict,
              pcaps: dict) -> dict:
    """summary.json of the run (written, and returned)."""
    fab, v, wl = plan.fabric, out.reach, out.workload
    counters = {k: c for k, c in all_counters.items() if "ports" in c}
    fault_errors = [a for a in out.faults or () if a.get("error")]
    unexpected = (out.reach_after or {}).get("unexpected", 0)
    checks = v.passed and (wl is None or wl["ok"]) and not fault_errors and not unexpected
    cores = machine_cores()
    cpu = {**live.procs.report(cores), "machine_cores": cores}
    judged = guard.judge(fab, {**all_counters, **worker_fidelity(wl)}, cpu, cores)
    if plan.servers is not None:  # a verdict per server, combined (emu.cluster.net)
        judged["fidelity"] = guard.combine(judged["fidelity"], guard.by_server(
            fab, {**all_counters, **worker_fidelity(wl)}, live.fnet.node_servers()))
        if judged["fidelity"]["kept_up"] is False and judged["suggested_tdf"] is None:
            judged["suggested_tdf"] = judged["fidelity"]["suggested_tdf"] = suggest_tdf(
                fab.tdf, 0.0, cores)  # (one server behind: the local CPU says nothing)
    judged["fidelity"]["binding"] = wl is not None
    lost = judged["fidelity"]["kept_up"] is False and wl is not None
    summary = {
        "topology": fab.name, "tdf": fab.tdf, "build_s": round(live.build_s, 2),
        "pairs": len(v.results), "reachable": len(v.ok), "wrong_path": len(v.wrong_path),
        "min_rtt_ms": {"intra_rail": reach.min_rtt_ms(fab, v.ok, same_rail=True),
                       "cross_rail": reach.min_rtt_ms(fab, v.ok, same_rail=False)},
        "switches": switch_totals(counters),
        "pcaps": pcaps,
        "unreachable_by_design": len(v.by_design),
        "verdict": "fidelity_lost" if lost else "pass" if checks else "fail",
        "checks_passed": checks,
        "fidelity": judged["fidelity"], "suggested_tdf": judged["suggested_tdf"],
        "tdf_choice": plan.tdf_choice, "cpu": cpu, "seed": plan.options.seed,
        "data_path": {**datapath.describe(plan.options.datapath),  # and what each agent ran
                      "agents": {n: c.get("datapath", "python") for n, c in counters.items()},
                      # emucore.rtsched: what each agent and NIC got (its counters' "sched")
                      "sched": {"asked": plan.options.sched,
                                "resolved": rtsched.resolve(plan.options.sched,
                                                            has_workers(plan.options)),
                                "got": {n: c.get("sched") for n, c in all_counters.items()}}},
        "version": SCHEMA_VERSION, "qos": plan.qos.name if plan.qos is not None else "off",
        "transport": plan.options.transport,
        "trim": plan.qos.trim.describe() if plan.qos is not None and plan.qos.trim else None,
        "workload_lab_s": round(out.workload_lab_s, 3),
        "workload_model_s": plan.td.model_time(out.workload_lab_s),
        "metrics_rows": live.sampler.rows,
        "classes": class_totals(counters),
        "nics": nic_totals(all_counters),
        "paths": paths.summarise(counters, fab.to_dict()),
        "phases": plan.phases.to_dict(), "phases_detail": plan.phases.detail_dict(),
    }
    if plan.servers is not None:
        summary["servers"] = live.fnet.describe_servers()
    if out.faults is not None:
        summary["faults"] = {**faultreport.summarise(plan.run_dir, out.faults),
                             "reach_after": out.reach_after}
    if wl is not None:
        summary["workload"] = {k: x for k, x in wl["result"].items()
                               if k not in ("rate_samples", "steps")}
        if wl["result"].get("steps"):
            summary["steps"] = wl["result"]["steps"]
    (plan.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
