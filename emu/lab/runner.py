"""`emu lab run ID`: each variant of a lab built, its flows run, its evidence judged.

Per variant (docs/LABS.md "How a lab runs"): the fabric is built as `emu run` builds it
(emu.run.build: namespaces, agents with the variant's QoS, LLDP/DCBX, captures, the
metrics sampler), the NICs of the GPUs the flows use start with the variant's DCQCN
profile, the fidelity guard is reset, the flows run (traffic.workloads.flows), sampling
stops and the fabric is torn down - which closes every agent's and NIC's event log.
Then the evidence (emu.lab.checks.Evidence) is read from RUNDIR/<variant>/ and every
check of the variant judged (pass, differs, fail or shown: emu.lab.verdict); ratio
checks compare variants once all have run. A verdict counts only when the fidelity guard
says the lab kept up.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

from emu.faults import reconverge as faultreport
from emu.observe import guard
from collectives.jobresult import run_torch_workload
from emu.faults.inject import FaultRunner
from emu.lab import checks as C
from emu.lab import verdict as V
from emu.lab.evidence import Evidence
from emu.lab.schema import Lab
from emu.lab.variant import Variant
from emu.observe.metrics import read_rows
from emu.run import build, collect
from emu.run.autotdf import machine_cores
from emu.run.options import RunOptions
from emu.run.plan import RunPlan
from emu.run.terminal import Terminal
from emu.run.workload import sample_nics
from emucore import datapath, rtsched
from emucore.eventlog import EventLog, model_us, read_events
from emucore.timedil import TimeDilation
from traffic.nic import client as nic_client
from traffic.dcqcn import DcqcnProfile
from traffic.workloads import flows as flows_mod

INTERVAL_MODEL_S = 5e-6  # metrics sampling (never faster than 20 Hz of lab time)


def links_of(fab) -> tuple[dict, dict]:
    """'A->B' -> (A, A's ifname towards B) and -> model bit/s, for every link."""
    names, bps = {}, {}
    for node in fab.nodes:
        for local, remote, link in fab.node_links(node):
            key = f"{node}->{remote.node}"
            names.setdefault(key, (node, local.ifname))
            bps.setdefault(key, link.model_bps)
    return names, bps


def plan_of(v: Variant, run_dir: Path, pcap_limit_mb: float, seed: int = 1) -> RunPlan:
    """The RunPlan `emu run` would make for this variant (its torch workload's options,
    so that the build starts the job's zygote beside it as for `emu run`:
    collectives.launch.Prestart); `seed`: the switches' and the NICs' random draws
    (`emu lab run --seed`)."""
    names, _ = links_of(v.fabric)
    targets = [tuple(c.split(":", 1)) if c not in names else names[c] for c in v.captures]
    opts = RunOptions(v.fabric.name, pcap_limit=pcap_limit_mb, quiet=True, seed=seed,
                      **workload_options(v))
    plan = RunPlan(opts, v.fabric, v.qos, targets, None, INTERVAL_MODEL_S, run_dir,
                   run_dir.resolve(), {"mode": "given", "tdf": v.fabric.tdf}, lb=v.lb)
    if v.lldp_off:
        plan.lldp_off = {}
        for link in v.lldp_off:
            node, ifname = names[link]
            plan.lldp_off.setdefault(node, []).append(ifname)
    return plan


def tshark_rows(pcap_dir: Path, names: dict):
    """(capture 'A->B', display filter, fields) -> one dict per matching frame."""
    def rows(capture: str, flt: str, fields: list[str]) -> list[dict]:
        if capture in names:
            node, ifname = names[capture]
        elif ":" in capture:
            node, ifname = capture.split(":", 1)
        else:
            raise ValueError(f"frames.capture: no link {capture!r}")
        path = pcap_dir / f"{node}-{ifname}.pcap"
        if not path.is_file():
            raise ValueError(f"frames.capture: {capture} was not captured (add it to captures)")
        argv = ["tshark", "-r", str(path), "-Y", flt or "frame", "-T", "fields", "-E",
                "separator=\t"] + [a for f in fields or ["frame.number"] for a in ("-e", f)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            raise ValueError(f"tshark: {out.stderr.strip()[:300]}")
        return [dict(zip(fields or ["frame.number"], line.split("\t")))
                for line in out.stdout.splitlines()]
    return rows


def run_variant(lab: Lab, v: Variant, run_dir: Path, term: Terminal,
                pcap_limit_mb: float = 20.0, seed: int = 1) -> dict:
    """Build, run the flows, tear down; the evidence and the guard's judgement."""
    fab = v.fabric
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in (run_dir / "events").glob("*.jsonl"):  # a rerun into the same directory
        old.unlink()
    (run_dir / "topology.json").write_text(json.dumps(fab.to_dict(), indent=1))
    plan = plan_of(v, run_dir, pcap_limit_mb, seed)
    gpus = (sorted(fab.gpus) if v.workload
            else sorted({g for f in v.flows for g in (f.src, f.dst)}))
    asked = rtsched.mode()  # `emu lab run --sched` (auto: rr for flows, normal for a job)
    os.environ[rtsched.ENV] = rtsched.resolve(asked, bool(v.workload))
    try:
        return _run_built(lab, v, run_dir, term, plan, gpus, seed)
    finally:
        os.environ[rtsched.ENV] = asked


def _run_built(lab: Lab, v: Variant, run_dir: Path, term: Terminal, plan: RunPlan,
               gpus: list[str], seed: int) -> dict:
    """`run_variant`'s fabric built, run and torn down."""
    fab = v.fabric
    with build.build(plan, term) as live:
        fnet = live.fnet
        mtu = v.nic.get("mtu", 4096)
        socks = fnet.start_nics(dcqcn=v.dcqcn, gpus=gpus, mtu=mtu,
                                **{k: x for k, x in v.nic.items() if k != "mtu"})
        prof = ({"name": "off"} if v.dcqcn == "off"
                else dataclasses.asdict(DcqcnProfile.by_name(v.dcqcn)))
        (run_dir / "dcqcn.json").write_text(json.dumps(prof, indent=1))
        sample_nics(live.sampler, socks)
        for sock in socks.values():
            nic_client.request(sock, {"cmd": "fidelity_reset"})
        for s in fab.switches():
            fnet.agent_request(s.name, {"cmd": "fidelity_reset"})
        log = EventLog(str(run_dir / "events" / "lab.jsonl"), "lab", plan.td)
        t_lab = time.monotonic()
        faults = FaultRunner(fnet, v.faults) if v.faults else None
        try:
            if v.workload:
                if faults is not None:  # from the job's first data frame, as emu run
                    faults.start(trigger=lambda: any(
                        nic_client.request(p, {"cmd": "counters"}).get("tx_frames", 0)
                        for p in socks.values()))
                result = run_workload(lab, v, fnet, socks, term, log)
            else:
                term.say(f"  {len(v.flows)} flows over {len(gpus)} NICs (TDF {fab.tdf:g})"
                         + (f", {len(v.faults)} faults" if v.faults else "") + "...",
                         flush=True)
                with term.phase(f"{lab.id} {v.name}: flows running"):
                    result = flows_mod.run(fab, socks, v.flows, lab.timeout_s, log,
                                           on_t0=(lambda t0: faults.start(t0=t0))
                                           if faults is not None else None)
        finally:
            if faults is not None:
                faults.stop()
        wall = time.monotonic() - t_lab
        tables = mac_tables(fnet)
        if tables:
            result["mac_tables"] = tables
        if faults is not None:  # the reach matrix with the faults in effect (L10.2)
            term.say("  pinging every GPU pair with the faults in effect...", flush=True)
            result["faults"] = {"applied": faults.applied, "reach_after": faults.reach_after()}
        log.close(time.monotonic())
        counters = collect.stop_sampling(plan, live)
        pcaps = live.captures.stop()
        t0_sampler = live.sampler.t0
        cpu = {**live.procs.report(machine_cores()), "machine_cores": machine_cores()}
    judged = guard.judge(fab, counters, cpu, machine_cores())
    if "faults" in result:  # the agents' logs are closed now: when each FIB settled
        result["faults"]["reconvergence"] = faultreport.reconvergence(*faultreport.load(run_dir))
    (run_dir / "flows.json").write_text(json.dumps(result, indent=1))
    meta = {"lab_s": wall, "t0_sampler": t0_sampler, "fidelity": judged["fidelity"],
            "suggested_tdf": judged["suggested_tdf"], "pcaps": pcaps, "tdf": fab.tdf,
            "data_path": datapath.mode(),  # before issue 30 every run was "python"
            "sched": {"resolved": rtsched.mode(),  # emucore.rtsched: what each agent and NIC got
                      "got": {n: c.get("sched") for n, c in counters.items()}},
            "seed": seed}
    (run_dir / "variant.json").write_text(json.dumps(meta, indent=1))
    return {**meta, "result": result, "counters": counters, "run_dir": run_dir}


def mac_tables(fnet) -> dict:
    """switch -> VLAN -> the MACs in its table, sorted, for switches with rail VLANs (ch.13
    Fig 13-4; `show mac address-table`); a switch that does not answer is left out."""
    out: dict = {}
    for sw in fnet.fabric.switches():
        if not sw.svis:
            continue
        try:
            entries = fnet.agent_request(sw.name, {"cmd": "mac_table"}).get("entries", [])
        except OSError:
            continue
        for e in entries:
            out.setdefault(sw.name, {}).setdefault(str(e["vlan"]), []).append(e["mac"])
    return {sw: {v: sorted(m) for v, m in t.items()} for sw, t in out.items()}


def workload_options(v: Variant) -> dict:
    """The RunOptions fields of the variant's torch workload ({} for flows): one source for
    the plan the build sees and the job run_workload starts, so a prestarted zygote's
    environment is the job's."""
    w = v.workload
    if not w:
        return {}
    return {"workload": w["name"], "size": w["size"], "dtype": w["dtype"],
            "iters": w["iters"], "ring": w["ring"], "master_port": w["master_port"]}


def run_workload(lab: Lab, v: Variant, fnet, socks: dict, term: Terminal, log) -> dict:
    """The lab's torch job (collectives.jobresult, as `emu run --workload`), its result
    where flows put theirs: {"t0_model_us", "flows": {}, "workload": result + ok}."""
    w = v.workload
    opts = RunOptions(v.fabric.name, **workload_options(v))
    td = TimeDilation(v.fabric.tdf)
    t0 = model_us(time.monotonic(), td)
    log.emit("job_start", time.monotonic(), workload=w["name"])
    term.say(f"  {w['name']} on {len(socks)} GPUs (TDF {v.fabric.tdf:g})...", flush=True)
    with term.phase(f"{lab.id} {v.name}: {w['name']} running"):
        out = run_torch_workload(fnet, opts, {"gpus": sorted(socks)}, socks)
    log.emit("job_done", time.monotonic(), ok=out["ok"])
    print(out["text"], flush=True)
    return {"t0_model_us": t0, "flows": {}, "workload": {**out["result"], "ok": out["ok"]}}


def load_run(run_dir: Path) -> dict:
    """What run_variant returned, from the files it left in `run_dir`."""
    try:
        meta = json.loads((run_dir / "variant.json").read_text())
        return {**meta, "result": json.loads((run_dir / "flows.json").read_text()),
                "counters": json.loads((run_dir / "last_counters.json").read_text()),
                "run_dir": run_dir}
    except FileNotFoundError as exc:
        raise ValueError(f"{run_dir}: not a lab run directory ({exc.filename} missing)") from None


def evidence(v: Variant, run: dict) -> Evidence:
    """The variant's evidence on the lab's axis (model µs after the flows' t0)."""
    rd: Path = run["run_dir"]
    t0 = run["result"]["t0_model_us"]
    evs = read_events(sorted((rd / "events").glob("*.jsonl")))
    for e in evs:
        e["t"] = round(e["t"] - t0, 2)
    rows = read_rows(rd / "metrics.csv") if (rd / "metrics.csv").is_file() else []
    shift = model_us(run["t0_sampler"], TimeDilation(run["tdf"])) - t0
    for r in rows:
        r["t_us"] = r["t_model_s"] * 1e6 + shift
    names, bps = links_of(v.fabric)
    return Evidence(evs, rows, run["counters"], run["result"]["flows"], names, bps,
                      tshark_rows(rd / "pcaps", names),
                      {**run["result"].get("workload", {}),
                       **({"mac_tables": run["result"]["mac_tables"]}
                          if "mac_tables" in run["result"] else {}),
                       **({"faults": run["result"]["faults"]} if "faults" in run["result"]
                          else {})})


def applies(check: dict, variant: str) -> bool:
    """Whether a check's `variant` (a name, a list, or all) takes in `variant`."""
    which = check.get("variant", "all")
    which = [which] if isinstance(which, str) else which
    return "all" in which or variant in which


def judge_variant(lab: Lab, v: Variant, ev: Evidence, many: bool) -> list[dict]:
    """Every per-variant check of `lab` that applies to `v`."""
    out = []
    for c in lab.checks:
        if c["kind"] in ("ratio", "share"):
            continue
        if not applies(c, v.name):
            continue
        try:
            measured, held = C.measure(ev, c)
            ok, expected = C.judge(measured, held, c)
        except (ValueError, KeyError, TypeError) as exc:
            measured, ok, expected = f"error: {exc}", False, str(c.get("expect", ""))
        out.append(entry(c, c["name"] + (f" [{v.name}]" if many else ""), v.name, measured,
                         ok, expected))
    return out


def entry(c: dict, name: str, variant: str, measured, ok: bool, expected: str,
          values: dict | None = None) -> dict:
    """One judged check as lab.json keeps it: the value, the bound and its source, the
    outcome (emu.lab.verdict: pass, differs, fail, shown); `pass` is "not fail".
    `values` (every variant's, "variant.check" -> measured) settle a `differs.when`."""
    result, emu_bound = V.outcome(ok, measured, c, values)
    d = c.get("differs") or {}
    return {"name": name, "check": c["name"], "variant": variant, "kind": c["kind"],
            "measured": measured, "expected": expected, "source": V.cite_text(c.get("source")),
            "outcome": result, "pass": result != "fail", "note": c.get("note", ""),
            **({"differs": {"expected": emu_bound or V.differs_text(d), "why": d["why"],
                            "source": V.cite_text(d["source"])}} if d else {})}


def settle_premises(lab: Lab, results: list[dict], values: dict) -> None:
    """Per-variant checks whose `differs` rests on a premise (`when`) measured in some
    variant: judged again now that every variant ran."""
    by_name = {c["name"]: c for c in lab.checks}
    for i, r in enumerate(results):
        c = by_name.get(r["check"], {})
        if (c.get("differs") or {}).get("when"):
            results[i] = entry(c, r["name"], r["variant"], r["measured"],
                               r["outcome"] == "pass", r["expected"], values)


def judge_ratios(lab: Lab, results: list[dict]) -> list[dict]:
    """The ratio and share checks, over the measured values of every variant that ran
    (first settling the per-variant checks whose `differs` has a premise)."""
    values = {f"{r['variant']}.{r['check']}": r["measured"] for r in results}
    settle_premises(lab, results, values)
    out = []
    for c in lab.checks:
        if c["kind"] not in ("ratio", "share"):
            continue
        try:
            measured = (C.ratio if c["kind"] == "ratio" else C.share)(values, c[c["kind"]])
            ok, expected = C.judge(measured, None, c)
        except ValueError as exc:
            measured, ok, expected = f"not measured: {exc}", False, str(c.get("expect", ""))
        out.append(entry(c, c["name"], "", measured, ok, expected, values))
    return out


def timeline(ev: Evidence, limit: int = 400) -> list[dict]:
    """The events worth a timeline row (firsts and state changes, not every frame)."""
    keep = {"wred_min", "wred_max", "ce_first", "xoff", "xon", "pause_start", "pause_end",
            "wd_storm", "wd_restore", "pfc_oper", "link", "flow_start", "flow_done", "job_start",
            "job_done", "retransmit", "nak_tx", "suppressed", "fault", "fib", "switch_admin",
            "storm_start", "storm_end", "pfc_inject"}
    firsts = {"cnp_tx", "cnp_rx", "pfc_tx", "pfc_rx", "rate", "drop", "spray"}
    seen: set = set()
    out = []
    for e in ev.events:
        k = e["ev"]
        if k in firsts:
            key = (k, e.get("node"), e.get("port"), e.get("qp"), e.get("queue"),
                   e.get("why"), e.get("quanta") == 0)
            if key in seen:
                continue
            seen.add(key)
        elif k not in keep:
            continue
        out.append(e)
        if len(out) >= limit:
            break
    return out


def write_json(path: Path, lab: Lab, results: list[dict], runs: dict,
               run: dict | None = None) -> dict:
    """RUNDIR/lab.json: id, verdict, kept_up, checks (and per variant its figures); `run`:
    where the result came from (emu.lab.publish.provenance)."""
    kept = [r["fidelity"].get("kept_up") for r in runs.values()]
    kept_up = all(k is True for k in kept) if kept else None
    outcomes = [r["outcome"] for r in results]
    passed = "fail" not in outcomes and bool(results)
    keys = ("name", "check", "variant", "measured", "expected", "source", "outcome", "pass",
            "note", "differs")
    doc = {"id": lab.id, "title": lab.title, "verdict": V.lab_verdict(outcomes, kept_up),
           "checks_passed": passed, "kept_up": kept_up, "outcomes": V.tally(outcomes),
           "checks": [{k: r[k] for k in keys if k in r} for r in results],
           "seed": next((r.get("seed", 1) for r in runs.values()), None),
           "variants": {n: {"tdf": r["tdf"], "lab_s": round(r["lab_s"], 1),
                            "data_path": r.get("data_path", "python"),
                            "seed": r.get("seed", 1),  # (before --seed: always 1)
                            "kept_up": r["fidelity"].get("kept_up"),
                            "p99_lag_us": r["fidelity"].get("p99_lag_model_us"),
                            "suggested_tdf": r.get("suggested_tdf"),
                            "flows": r["result"]["flows"]} for n, r in runs.items()},
           "run": run}
    path.write_text(json.dumps(doc, indent=1, default=str))
    return doc
