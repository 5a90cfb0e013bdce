"""The fidelity guard of a run (emu.observe.guard, emu.observe.metrics.fidelity_rows, emu.observe.procstat,
summary.json and the terminal), with fake counters as the agents and NICs will report
them: counters["fidelity"] = LagMeter.snapshot() + {"cpu_s"}."""

import dataclasses
import json
import os
from types import SimpleNamespace

import pytest

import topologies
from emu.observe import guard
from emu.cli import build_parser
from emu.commands.run import run_options
from emu.observe.metrics import fidelity_rows
from emu.observe.procstat import CpuTracker, parse_hwm_kb, parse_pss_kb, parse_stat
from emu.observe.reach import PairResult, judge as reach_judge
from emu.observe.summary import report, validate_summary
from emu.run import collect
from emu.run.plan import make_plan
from emu.run.report import EXIT_FIDELITY_LOST, EXIT_PASS, print_report
from emu.run.workload import Outcome
from emucore.fidelity import LagMeter, lag_bound_model_s
from emucore.timedil import TimeDilation

FAB = topologies.load("rail2x4")  # 9216 B MTU; host links 200G, uplinks 400G
TD = TimeDilation(FAB.tdf)


def snap(lags_model_s, what="eth3 tx", cpu_s=1.5):
    """A process's fidelity counters after actions late by `lags_model_s`."""
    m = LagMeter(TD)
    for lag in lags_model_s:
        m.record(0.0, TD.lab_time(lag), what)
    return {**m.snapshot(), "cpu_s": cpu_s}


def counters(rail1_lags, nic_lags=(0.0,) * 100, nic_reports=True):
    c = {"rail1": {"switch": "rail1", "ports": {}, "fidelity": snap(rail1_lags)},
         "rail2": {"switch": "rail2", "ports": {}, "fidelity": snap([0.0] * 100)},
         "h1g1": {"gpu": "h1g1", "qps": {}}}
    if nic_reports:
        c["h1g1"]["fidelity"] = snap(nic_lags, "pacer")
    return c


def test_bound_is_the_shortest_cable_or_one_mtu_on_the_fastest_link():
    assert guard.bound_model_s(FAB) == pytest.approx(1e-6)  # rail2x4's 1 us cables
    no_cable = dataclasses.replace(FAB, links=[dataclasses.replace(lk, delay_s=0.0)
                                               for lk in FAB.links])
    assert guard.bound_model_s(no_cable) == pytest.approx(lag_bound_model_s(9216, 400e9))
    assert guard.bound_model_s(no_cable) == pytest.approx(9216 * 8 / 400e9)  # 0.184 us


def test_kept_up():
    out = guard.judge(FAB, counters([0.0] * 98 + [1e-8, 2.1e-6]), {"cores_used": 1.0}, 2)
    fid = out["fidelity"]
    assert fid["kept_up"] is True and out["suggested_tdf"] is None
    assert fid["worst"] == "rail1 (eth3 tx)" and fid["actions"] == 300
    assert fid["max_lag_model_us"] == pytest.approx(2.1) and fid["measured"] == 3
    assert fid["unmeasured"] == [] and fid["process_cpu_s"] == 4.5


def test_lost_suggests_a_tdf_from_the_cpu_the_run_used():
    # every action of rail1 3 us late: the merged p99 (300 actions, 100 late) is 3 us
    out = guard.judge(FAB, counters([3e-6] * 100, [3e-6] * 100), {"cores_used": 1.96}, 2)
    fid = out["fidelity"]
    assert fid["kept_up"] is False and fid["p99_lag_model_us"] > fid["bound_model_us"]
    # 1.96 cores of 2 at TARGET_LOAD 0.7 -> 1.4 x 5000 = 7000, but never below 2 x TDF
    assert out["suggested_tdf"] == fid["suggested_tdf"] == 10000.0


def test_processes_without_lag_counters_are_named_and_none_is_not_a_verdict():
    out = guard.judge(FAB, counters([0.0] * 10, nic_reports=False))
    assert out["fidelity"]["unmeasured"] == ["h1g1"] and out["fidelity"]["kept_up"] is True
    none = guard.judge(FAB, {"rail1": {"ports": {}}, "h1g1": {"qps": {}}})
    assert none["fidelity"]["kept_up"] is None and none["fidelity"]["measured"] == 0
    line = guard.line({"tdf": 5000.0, **none})
    assert line.startswith("Fidelity: NOT MEASURED") and "predate" in line


def test_terminal_lines():
    up = {"tdf": 5000.0, **guard.judge(FAB, counters([0.0] * 98 + [1e-8, 2.1e-6]))}
    assert guard.line(up) == ("Fidelity: kept up (p99 lag 0 us model <= 1 us bound; max "
                              "2.1 us at rail1 (eth3 tx); 300 actions)")
    lost = {"tdf": 5000.0, **guard.judge(FAB, counters([3e-6] * 100, [3e-6] * 100),
                                         {"cores_used": 1.96}, 2)}
    text = guard.line(lost)
    assert text.startswith("Fidelity: LOST - p99 lag 3 us model > 1 us bound (worst ")
    assert text.endswith("rerun with --tdf 10000")
    assert guard.line({"tdf": 5000.0}) is None  # a run from before the guard


def test_the_workers_are_judged_apart_from_the_agents_and_nics():
    """A worker wakes a few hundred times in a run of many thousand frame actions: 5 of its
    20 wake-ups 5 us late are 0.5 % of all actions (inside one p99) but a quarter of its
    own, so the run did not keep up, and the line says it was the workers."""
    c = counters([0.0] * 1000)
    c["h1g1 comm"] = {"fidelity": snap([0.0] * 15 + [5e-6] * 5, "data")}
    c["h1g1 compute"] = {"fidelity": snap([0.0] * 10, "compute")}
    out = guard.judge(FAB, c, {"cores_used": 1.9}, 2)
    fid = out["fidelity"]
    assert fid["p99_lag_model_us"] == 0.0 and fid["actions"] == 1200  # the agents, the NIC
    w = fid["workers"]
    assert (w["kept_up"], w["measured"], w["actions"]) == (False, 2, 30)
    assert w["p99_lag_model_us"] == pytest.approx(5.0, rel=0.3) and w["worst"] == "h1g1 comm (data)"
    assert fid["kept_up"] is False and out["suggested_tdf"] == 10000
    text = guard.line({"tdf": 5000.0, **out})
    assert text.startswith("Fidelity: LOST - the workers' wake-ups: p99 lag 5")
    assert "(worst h1g1 comm (data), max 5" in text and "30 wake-ups" in text
    del c["h1g1 comm"]
    up = {"tdf": 5000.0, **guard.judge(FAB, c)}
    assert up["fidelity"]["kept_up"] is True
    assert guard.line(up) == ("Fidelity: kept up (p99 lag 0 us model <= 1 us bound; max 0 us "
                              "at rail1; 1,200 actions; workers p99 0 us, max 0 us at "
                              "h1g1 compute)")
    both = {**c, "h1g1": {"qps": {}, "fidelity": snap([3e-6] * 100, "pacer")},
            "h1g1 comm": {"fidelity": snap([5e-6] * 20, "data")}}
    text = guard.line({"tdf": 5000.0, **guard.judge(FAB, both)})
    assert text.startswith("Fidelity: LOST - p99 lag 3")  # the fabric's figures come first


def test_the_run_counts_the_workers_compute_and_collectives():
    wl = {"result": {"compute_fidelity": {"h1g1": {"count": 1}},
                     "comm_fidelity": {"h1g1": {"count": 2}, "h2g1": {"count": 3}}}}
    assert collect.worker_fidelity(wl) == {
        "h1g1 compute": {"fidelity": {"count": 1}}, "h1g1 comm": {"fidelity": {"count": 2}},
        "h2g1 comm": {"fidelity": {"count": 3}}}
    assert collect.worker_fidelity(None) == {} == collect.worker_fidelity({"result": None})


def test_interval_lag_rows_from_histogram_deltas():
    m = LagMeter(TD)
    for _ in range(100):
        m.record(0.0, 0.0)
    a = {"t_lab": 1.0, "fidelity": m.snapshot()}
    for _ in range(200):  # p99 of 201 actions: the 199th, one of these
        m.record(0.0, TD.lab_time(1e-7))
    m.record(0.0, TD.lab_time(5e-6), "eth1 tx")
    b = {"t_lab": 2.0, "fidelity": m.snapshot()}
    rows = fidelity_rows(a, b, TD, 0.0, "rail1")
    got = {r[4]: r[5] for r in rows}
    assert rows[0][:4] == (TD.model_time(2.0), "rail1", "", "")
    assert 1e-7 <= got["lag_p99_s"] <= 1e-7 * 10 ** (1 / 8) + 1e-15  # bucket upper edge
    assert got["lag_max_s"] == pytest.approx(5e-6)  # the maximum rose: exact
    for _ in range(10):
        m.record(0.0, TD.lab_time(1e-7))
    c = {"t_lab": 3.0, "fidelity": m.snapshot()}
    got = {r[4]: r[5] for r in fidelity_rows(b, c, TD, 0.0, "rail1")}
    assert 1e-7 <= got["lag_max_s"] <= 1.34e-7  # the upper edge of the top bucket that grew
    assert fidelity_rows(c, c, TD, 0.0, "rail1") == []  # nothing happened
    assert fidelity_rows({"t_lab": 1.0}, c, TD, 0.0, "rail1") == []  # older agent


def test_proc_parsing():
    text = "4242 (python -m (x)) S 17 4242 4242 0 -1 4194560 1 0 0 0 250 50 3 4 20 0 1 0"
    ppid, cpu = parse_stat(text)
    import os
    assert ppid == 17 and cpu == pytest.approx(300 / os.sysconf("SC_CLK_TCK"))
    assert parse_hwm_kb("Name:\tx\nVmHWM:\t  20480 kB\nVmRSS:\t1 kB\n") == 20480
    assert parse_hwm_kb("Name:\tkthread\n") == 0
    rollup = "55d0-7ff [rollup]\nRss:\t  300000 kB\nPss:\t   41234 kB\nPss_Anon: 1 kB\n"
    assert parse_pss_kb(rollup) == 41234 and parse_pss_kb("") == 0


def fake_proc(root, procs, pss=None):
    """procs: pid -> (ppid, ticks, hwm_kb, cmdline); pss: pid -> Pss kB (default hwm / 2)."""
    import os
    tick = os.sysconf("SC_CLK_TCK")
    for pid, (ppid, ticks, hwm, cmd) in procs.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        d.joinpath("stat").write_text(f"{pid} (p) S {ppid} 0 0 0 -1 0 0 0 0 0 {ticks} 0 0 0")
        d.joinpath("status").write_text(f"VmHWM:\t{hwm} kB\n")
        d.joinpath("smaps_rollup").write_text(
            f"0-0 [rollup]\nRss:\t{hwm} kB\nPss:\t{(pss or {}).get(pid, hwm // 2)} kB\n")
        d.joinpath("cmdline").write_bytes(cmd)
    return tick


def test_cpu_per_process_kind(tmp_path):
    tick = os.sysconf("SC_CLK_TCK")
    fake_proc(tmp_path, {
        100: (1, 1, 50_000, b"python\0-m\0emu\0run"),
        200: (100, 0, 1000, b"mnexec"),                    # a namespace's shell
        201: (200, 7 * tick, 30_000, b"python\0-m\0switch_agent"),  # 7 s of start-up
        300: (100, 0, 30_000, b"python\0-m\0traffic.nic"),   # a NIC (known)
        400: (200, 0, 200_000, b"python\0-m\0collectives.worker\0--module\0x"),
        999: (1, 0, 10, b"unrelated")})
    clock = iter([0.0, 10.0, 10.0])
    t = CpuTracker(100, lambda: {201: "agents", 300: "nics"}, proc=tmp_path,
                   clock=lambda: next(clock))
    t.start()  # what emu and the agent used before the run (imports, set-up) is not counted
    fake_proc(tmp_path, {100: (1, 1 + 2 * tick, 50_000, b"emu"),
                         201: (200, 10 * tick, 30_000, b"x"), 300: (100, 5 * tick, 30_000, b"x"),
                         400: (200, 6 * tick, 200_000, b"python\0-m\0collectives.worker")})
    t.sample()
    r = t.report(cores=2)
    assert r["wall_s"] == 10.0 and r["cores_used"] == pytest.approx(1.6)
    assert r["agents"] == {"cpu_s": 3.0, "cores": 0.3, "share": 0.15, "processes": 1,
                           "rss_peak_mb": 29.3, "rss_peak_max_mb": 29.3, "pss_peak_mb": 14.6}
    assert r["nics"]["cpu_s"] == 5.0 and r["workers"]["cpu_s"] == 6.0
    assert r["workers"]["rss_peak_mb"] == 195.3
    assert r["other"]["cpu_s"] == 2.0 and r["other"]["processes"] == 2  # emu + its shell


def test_pss_peak_is_the_largest_sum_at_one_sample(tmp_path):
    # two workers forked from one: each resident 200 MB, of which they share most; the
    # kind's peak is the largest simultaneous sum of PSS, not the sum of each one's peak
    # (forked from the job's zygote, whose command line they keep)
    procs = {100: (1, 0, 1000, b"emu"), 400: (100, 0, 200_000, b"python\0-m\0collectives.zygote"),
             401: (100, 0, 200_000, b"python\0-m\0collectives.zygote")}
    fake_proc(tmp_path, procs, pss={100: 1024, 400: 102_400, 401: 10_240})
    t = CpuTracker(100, dict, proc=tmp_path, clock=iter([0.0, 1.0, 2.0]).__next__)
    t.start()
    fake_proc(tmp_path, procs, pss={100: 1024, 400: 51_200, 401: 51_200})
    t.sample()
    r = t.report(cores=2)
    assert r["workers"]["rss_peak_mb"] == 390.6  # 2 x 200,000 kB, shared pages twice
    assert r["workers"]["pss_peak_mb"] == 110.0  # max(100 + 10, 50 + 50) MiB
    assert r["other"]["pss_peak_mb"] == 1.0 and r["pss_peak_mb"] == 111.0


def test_pss_is_summed_at_most_once_per_period_and_cpu_at_every_sample(tmp_path):
    import os
    from emu.observe import procstat
    tick = os.sysconf("SC_CLK_TCK")
    procs = {100: (1, 0, 1000, b"emu"), 400: (100, 0, 200_000, b"python\0-m\0collectives.zygote")}
    fake_proc(tmp_path, procs, pss={100: 1024, 400: 10_240})
    clock = iter([0.0, 0.0, 0.5, 1.99, 2.0])
    t = CpuTracker(100, dict, proc=tmp_path, clock=clock.__next__)
    t.start()  # t = 0: the first sample sums PSS
    # a peak between two rounds is not seen; CPU is, at every sample
    fake_proc(tmp_path, {**procs, 400: (100, 3 * tick, 200_000, b"python\0-m\0collectives.zygote")},
              pss={100: 1024, 400: 204_800})
    t.sample()  # 0.5 s
    assert t.pss_peak_kb["workers"] == 10_240 and t.report(2)["workers"]["cpu_s"] == 3.0
    fake_proc(tmp_path, procs, pss={100: 1024, 400: 20_480})
    t.sample()  # 1.99 s: not yet
    assert t.pss_peak_kb["workers"] == 10_240
    t.sample()  # 2.0 s after the last round
    assert t.pss_peak_kb["workers"] == 20_480 and procstat.PSS_PERIOD_S == 2.0


WRITE = {"ok": True, "text": "write: 1 MB", "result": {"workload": "write", "bytes": 1 << 20}}


def fake_run(tmp_path, rail1_lags, checks_ok=True, workload=WRITE):
    args = build_parser().parse_args(["run", "rail2x4", "--out", str(tmp_path / "run")])
    plan = make_plan(run_options(args), FAB)
    plan.run_dir.mkdir(parents=True)
    plan.tdf_choice = {"mode": "auto", "tdf": 5000.0, "need": 3597.0, "reason": "..."}
    results = [PairResult("h1g1", "h2g1", 1, 1, 64, 1.0)] if checks_ok else [
        PairResult("h1g1", "h2g1", 1, 0, None, None)]
    out = Outcome(reach_judge(FAB, results), workload, 2.0)
    procs = SimpleNamespace(report=lambda cores: {"wall_s": 10.0, "cores_used": 1.96})
    live = SimpleNamespace(build_s=1.0, sampler=SimpleNamespace(rows=0), procs=procs)
    summary = collect.summarise(plan, live, out, counters(rail1_lags, [0.0] * 100), {})
    return plan, out, summary


def test_summary_and_exit_status_kept_up(tmp_path, capsys):
    plan, out, summary = fake_run(tmp_path, [0.0] * 98 + [1e-8, 2.1e-6])
    validate_summary(summary)
    assert summary["verdict"] == "pass" and summary["checks_passed"] is True
    assert summary["fidelity"]["kept_up"] is True and summary["suggested_tdf"] is None
    assert summary["tdf_choice"]["mode"] == "auto" and summary["cpu"]["cores_used"] == 1.96
    assert print_report(plan, summary, out, {}) == EXIT_PASS
    assert "Fidelity: kept up" in capsys.readouterr().out


def test_summary_and_exit_status_lost(tmp_path, capsys):
    plan, out, summary = fake_run(tmp_path, [3e-6] * 200)
    assert summary["verdict"] == "fidelity_lost" and summary["checks_passed"] is True
    assert summary["suggested_tdf"] == 10000.0
    on_disk = json.loads((plan.run_dir / "summary.json").read_text())
    assert on_disk["fidelity"] == summary["fidelity"]
    assert print_report(plan, summary, out, {}) == EXIT_FIDELITY_LOST == 3
    text = capsys.readouterr().out
    assert "Fidelity: LOST" in text and "rerun with --tdf 10000" in text
    assert "Verdict: FIDELITY LOST (the lab fell behind the model at TDF 5000; rerun with " \
           "--tdf 10000)." in text


def test_failed_checks_and_lost_fidelity_exit_3_and_say_both(tmp_path, capsys):
    plan, out, summary = fake_run(tmp_path, [3e-6] * 200, checks_ok=False)
    assert summary["verdict"] == "fidelity_lost" and summary["checks_passed"] is False
    assert print_report(plan, summary, out, {}) == 3
    assert "the checks failed too" in capsys.readouterr().out


def test_without_a_workload_the_lag_is_reported_not_binding(tmp_path, capsys):
    plan, out, summary = fake_run(tmp_path, [3e-6] * 200, workload=None)
    fid = summary["fidelity"]
    assert fid["kept_up"] is False and fid["binding"] is False
    assert summary["verdict"] == "pass" and summary["checks_passed"] is True
    assert print_report(plan, summary, out, {}) == EXIT_PASS
    assert " ".join(capsys.readouterr().out.split()).count(
        "Fidelity: behind (p99 lag 3 us model > 1 us bound, worst rail1 (eth3 tx); 400 "
        "actions) - not binding: reachability and paths do not depend on it") == 1
    assert guard.line(summary).startswith("Fidelity: behind")


def test_emu_report_shows_the_fidelity_line(tmp_path):
    import io
    plan, _, _ = fake_run(tmp_path, [3e-6] * 200)
    buf = io.StringIO()
    report(plan.run_dir, out=buf)
    assert "Fidelity: LOST" in buf.getvalue() and "FIDELITY LOST" in buf.getvalue()


def test_process_line_names_cores_and_memory_per_kind():
    from emu.observe import procstat
    cpu = {"wall_s": 10.0, "cores_used": 1.6, "pss_peak_mb": 1234.4,
           "agents": {"cores": 0.3, "processes": 4, "pss_peak_mb": 80.2},
           "nics": {"cores": 0.5, "processes": 8, "pss_peak_mb": 160.0},
           "workers": {"cores": 0.6, "processes": 8, "pss_peak_mb": 980.0},
           "other": {"cores": 0.2, "processes": 0, "pss_peak_mb": 0.0}}
    assert procstat.line(cpu) == (
        "Processes: cores busy on average (count): agents 0.30 (4), nics 0.50 (8), "
        "workers 0.60 (8); 1.60 in all. Memory peak (PSS): 1,234 MB (agents 80, nics 160, "
        "workers 980)")
    assert procstat.line(None) is None and procstat.line({}) is None


def test_a_fabric_spread_over_servers_is_judged_per_server_and_combined():
    """emu.cluster.net: rail1 and h1 on server a, rail2 on b. b's agent lags 5 us on 5 of its
    100 actions - past the 1 us bound at its p99 - while the run-wide p99 over a's 1000
    actions stays in; the combined verdict is 'behind', naming server b."""
    c = {"rail1": {"ports": {}, "fidelity": snap([0.0] * 1000)},
         "rail2": {"ports": {}, "fidelity": snap([0.0] * 95 + [5e-6] * 5)},
         "h1g1": {"qps": {}, "fidelity": snap([0.0] * 100, "pacer")},
         "h1g1 compute": {"fidelity": snap([0.0] * 10, "compute")}}
    where = {"rail1": "a", "h1": "a", "rail2": "b"}
    whole = guard.judge(FAB, c)["fidelity"]
    assert whole["kept_up"] is True
    per = guard.by_server(FAB, c, where)
    assert (per["a"]["kept_up"], per["a"]["measured"], per["a"]["actions"]) == (True, 3, 1100)
    assert (per["a"]["workers"]["actions"], per["a"]["workers"]["measured"]) == (10, 1)
    assert (per["b"]["kept_up"], per["b"]["measured"]) == (False, 1)
    assert per["b"]["p99_lag_model_us"] == pytest.approx(5.0, rel=0.3)
    got = guard.combine(whole, per)
    assert got["kept_up"] is False and got["worst"].startswith("server b: rail2")
    assert got["by_server"] == per
    fine = guard.combine(whole, {"a": per["a"]})
    assert fine["kept_up"] is True and fine["worst"] == whole["worst"]
