"""The fidelity guard of a run (issue 11): every switch agent and RDMA NIC reports how
far its scheduled actions lagged behind the model schedule (`counters["fidelity"]`, a
emucore.fidelity.LagMeter snapshot plus the process's CPU seconds); this module judges
them for summary.json, says it in one terminal line and names the TDF that would have
kept up. Pure: counters in, dicts and text out.

The workers report too (emu.run.collect.worker_fidelity): "h1g1 compute", the compute
model's hold points, and "h1g1 comm", a worker resuming late in its collectives
(collectives.channel). They are judged apart from the agents and NICs (`WORKER_KINDS`),
against the same bound: a worker wakes a few hundred times in a run whose frames make
hundreds of thousands of actions, so in one p99 they would never count, and yet each
late wake-up moves the collective's model time by its lag (rail2x4 AllReduce 16 MB, TDF
1000, agents and NICs on SCHED_RR: the fabric's p99 0.56 us kept up, the workers' 75 us
from their NICs' completions, and the AllReduce took 1.919 ms against 1.145 ms at TDF
4000, where the workers' p99 is 0.75-1.0 us).

Processes that do not report (agents or NICs older than the guard) are listed as
unmeasured; a run where none reports has `"kept_up": null`, which is said, not judged.
"""

from __future__ import annotations

from collections.abc import Mapping

from emucore.fidelity import lag_bound_model_s, suggest_tdf, verdict
from topologies.model import Fabric

KEY = "fidelity"  # the counters field
#: a guard entry named "<gpu> <kind>" with one of these kinds is a worker's
WORKER_KINDS = ("compute", "comm")


def bound_model_s(fab: Fabric) -> float:
    """The kept-up bound of a fabric, model seconds: the larger of one MTU-sized frame's
    serialisation time on its fastest fabric link and its shortest cable's propagation
    delay (frontend links excluded). rail2x4: max(0.18 us at 400 Gbps, 1 us) = 1 us.

    Why: a frame that leaves late by less than one cable's propagation delay is, to
    every port downstream, a frame that crossed a slightly longer cable - the order and
    spacing of events are ones the modelled fabric allows, and the RTT-driven mechanisms
    (ACK clocking, CNPs, PFC reaction, which all take at least two cable delays) see
    delays within the physical ones. Without cable delays the bound falls back to one
    MTU's frame time on the fastest link, the finest thing the model resolves on a wire.
    Measured (rail2x4 AllReduce 16 MB, `emu run`): TDF 20000 p99 0.13 us, 1.146 ms;
    10000 p99 1.0 us, 1.184 ms (+3 %); 5000 p99 1.3-2.4 us, 1.98-2.07 ms (+75 %);
    2000 p99 13 us, 4.52 ms. One MTU at 400 Gbps (0.18 us) rejected the faithful 10000.
    """
    fabric_links = [lk for lk in fab.links if lk.kind != "frontend"]
    mtu_time = lag_bound_model_s(fab.mtu, max(lk.model_bps for lk in fabric_links))
    cable = min((lk.delay_s for lk in fabric_links if lk.delay_s > 0), default=0.0)
    return max(mtu_time, cable)


def snapshots(counters: Mapping[str, Mapping]) -> tuple[dict[str, dict], list[str]]:
    """(name -> fidelity snapshot of every process that reported one, names that
    did not)."""
    got, missing = {}, []
    for name, c in counters.items():
        snap = c.get(KEY) if isinstance(c, Mapping) else None
        if isinstance(snap, Mapping) and "hist" in snap and "count" in snap:
            got[name] = dict(snap)
        else:
            missing.append(name)
    return got, sorted(missing)


def judge(fab: Fabric, counters: Mapping[str, Mapping], cpu: Mapping | None = None,
          cores: int = 1) -> dict:
    """summary.json's "fidelity" object, plus "suggested_tdf" when the run did not
    keep up: {"fidelity": {...}, "suggested_tdf": float | None}.

    `cpu` is emu.observe.procstat's report (its "cores_used", the cores the run's processes
    kept busy on average, sizes the suggestion: emucore.fidelity.suggest_tdf)."""
    bound = bound_model_s(fab)
    per, missing = snapshots(counters)
    if not per:
        fid = {"kept_up": None, "bound_model_us": bound * 1e6, "measured": 0,
               "unmeasured": missing,
               "note": "no agent or NIC reported its lag (they predate the fidelity guard)"}
        return {"fidelity": fid, "suggested_tdf": None}
    fid = {**judged(per, bound), "unmeasured": missing,
           "process_cpu_s": round(sum(s.get("cpu_s", 0.0) or 0.0 for s in per.values()), 2)}
    suggested = None
    if not fid["kept_up"]:
        used = (cpu or {}).get("cores_used", 0.0)
        suggested = suggest_tdf(fab.tdf, used, cores)
        fid["suggested_tdf"] = suggested
    return {"fidelity": fid, "suggested_tdf": suggested}


def is_worker(name: str) -> bool:
    """Whether a guard entry is a worker's ("h1g1 comm", "h1g1 compute")."""
    return name.rpartition(" ")[2] in WORKER_KINDS


def judged(per: Mapping[str, Mapping], bound: float) -> dict:
    """The verdict over `per` (name -> snapshot): the agents' and NICs' figures, and the
    workers' apart under "workers"; kept up when both groups are within `bound`."""
    workers = {n: s for n, s in per.items() if is_worker(n)}
    fabric = {n: s for n, s in per.items() if n not in workers}
    out = {**verdict(fabric, bound).to_dict(), "measured": len(per)}
    if workers:
        w = verdict(workers, bound)
        out["workers"] = {**w.to_dict(), "measured": len(workers)}
        out["kept_up"] = out["kept_up"] and w.kept_up
    return out


def by_server(fab: Fabric, counters: Mapping[str, Mapping],
              server_of: Mapping[str, str]) -> dict[str, dict]:
    """A fabric spread over servers (emu.cluster.net): the guard's verdict per server, over
    the processes that run there (a switch's agent on its node's server; a GPU's NIC,
    or "<gpu> compute", on its host's). Server -> {"kept_up", "p99_lag_model_us", ...,
    "measured"}; servers where nothing reported are left out."""
    bound = bound_model_s(fab)
    per, _missing = snapshots(counters)
    groups: dict[str, dict[str, dict]] = {}
    for name, snap in per.items():
        node = name.split(" ")[0]
        node = fab.gpus[node].host if node in fab.gpus else node
        if node in server_of:
            groups.setdefault(server_of[node], {})[name] = snap
    return {s: judged(g, bound) for s, g in sorted(groups.items())}


def combine(fid: dict, servers: Mapping[str, Mapping]) -> dict:
    """The run's fidelity with its servers' verdicts: kept up only where every server
    kept up (a run-wide p99 could hide one server's lag behind another's many actions)."""
    out = {**fid, "by_server": dict(servers)}
    behind = [s for s, v in servers.items() if v.get("kept_up") is False]
    if behind and out.get("kept_up"):
        out["kept_up"] = False
        out["worst"] = f"server {behind[0]}: " + str(lagging(servers[behind[0]]).get("worst", ""))
    return out


def lagging(fid: Mapping) -> Mapping:
    """The part of a verdict that lost it: the agents' and NICs' figures, or the workers'
    when only theirs are over the bound."""
    w = fid.get("workers")
    if w and not w.get("kept_up") and fid["p99_lag_model_us"] <= fid["bound_model_us"]:
        return w
    return fid


def _us(x: float) -> str:
    return f"{x:.2g} us" if x < 10 else f"{x:,.0f} us"


def line(summary: Mapping) -> str | None:
    """The one terminal line about fidelity of a summary.json (None for runs from
    before the guard)."""
    fid = summary.get(KEY)
    if not isinstance(fid, Mapping):
        return None
    unmeasured = fid.get("unmeasured") or []
    if fid.get("kept_up") is None:
        return (f"Fidelity: NOT MEASURED - {fid.get('note', 'no process reported its lag')}"
                f" ({len(unmeasured)} processes without lag counters)")
    tail = (f"; {len(unmeasured)} processes did not report ({', '.join(unmeasured[:3])}"
            + (", ..." if len(unmeasured) > 3 else "") + ")" if unmeasured else "")
    bound, w = fid["bound_model_us"], fid.get("workers")
    if fid["kept_up"]:
        p99, mx = fid["p99_lag_model_us"], fid["max_lag_model_us"]
        workers = (f"; workers p99 {_us(w['p99_lag_model_us'])}, max "
                   f"{_us(w['max_lag_model_us'])} at {w['worst'] or '-'}" if w else "")
        return (f"Fidelity: kept up (p99 lag {_us(p99)} model <= {_us(bound)} bound; max "
                f"{_us(mx)} at {fid['worst'] or '-'}; {fid['actions']:,} actions{workers}){tail}")
    lag = lagging(fid)
    p99, mx = lag["p99_lag_model_us"], lag["max_lag_model_us"]
    who = "the workers' wake-ups: " if lag is w else ""
    what = "wake-ups" if lag is w else "actions"
    sug = fid.get("suggested_tdf") or summary.get("suggested_tdf")
    if fid.get("binding") is False:
        return (f"Fidelity: behind ({who}p99 lag {_us(p99)} model > {_us(bound)} bound, worst "
                f"{lag['worst'] or '-'}; {lag['actions']:,} {what}) - not binding: "
                f"reachability and paths do not depend on it" + tail)
    return (f"Fidelity: LOST - {who}p99 lag {_us(p99)} model > {_us(bound)} bound (worst "
            f"{lag['worst'] or '-'}, max {_us(mx)}; {lag['actions']:,} {what}): the lab fell "
            f"behind the model at TDF {summary.get('tdf', 0):g}, so model-time results are "
            f"not trustworthy" + (f"; rerun with --tdf {sug:g}" if sug else "") + tail)
