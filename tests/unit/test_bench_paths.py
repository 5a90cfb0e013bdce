"""`emu bench --datapath` (emu.bench.paths, emu.bench.fidelity.case_table, emu.cli): which
paths each bench runs, in which order, the ratio and its fidelity rule, the tables. No root."""

from __future__ import annotations

import os

import pytest

from emu import cli
from emu.bench import fidelity, paths
from emucore import datapath


def test_modes_of_each_kind_of_bench(monkeypatch):
    monkeypatch.delenv(datapath.ENV, raising=False)
    for what in ("forward", "tdf", "speed", "fidelity"):
        assert paths.modes(what, None) == ("python", "fast")
        assert paths.modes(what, "both") == ("python", "fast")
        assert paths.modes(what, "fast") == ("fast",)
        assert paths.modes(what, "auto") == ("auto",)
    assert paths.modes("switch", "both") == () and paths.modes("switch", None) == ()
    assert paths.modes("rnic", None) == ("auto",)
    monkeypatch.setenv(datapath.ENV, "python")
    assert paths.modes("allreduce", None) == ("python",)  # as `emu run`: the variable
    assert paths.modes("forward", None) == ("python", "fast")  # compared: both regardless
    assert paths.modes("lb", "fast") == ("fast",)
    with pytest.raises(ValueError, match=r"--datapath both: only forward, tdf, speed, "
                                         r"fidelity compare the data paths \(bench lb"):
        paths.modes("lb", "both")
    with pytest.raises(ValueError, match=r"--datapath: must be one of python, fast, auto, "
                                         r"both, got 'c'"):
        paths.modes("forward", "c")


def test_alternation_every_path_at_each_point_before_the_next():
    assert paths.alternate(("python", "fast"), (1000.0, 2000.0)) == [
        (1000.0, "python"), (1000.0, "fast"), (2000.0, "python"), (2000.0, "fast")]
    assert paths.alternate(("fast",), (1, 2, 3)) == [(1, "fast"), (2, "fast"), (3, "fast")]
    assert paths.alternate(("python", "fast", "bridge"), [9000]) == [
        (9000, "python"), (9000, "fast"), (9000, "bridge")]


def test_use_sets_and_restores_the_variable(monkeypatch):
    monkeypatch.setenv(datapath.ENV, "auto")
    with paths.use("fast"):
        assert os.environ[datapath.ENV] == "fast"
    assert os.environ[datapath.ENV] == "auto"
    monkeypatch.delenv(datapath.ENV)
    with pytest.raises(RuntimeError):
        with paths.use("python"):
            assert os.environ[datapath.ENV] == "python"
            raise RuntimeError
    assert datapath.ENV not in os.environ
    with pytest.raises(ValueError, match="EMU_DATAPATH: must be one of"):
        with paths.use("both"):
            pass


def test_ratio_and_the_fidelity_rule():
    F = paths.Figure
    assert paths.ratio(F("fast", 30.0, True), F("python", 120.0, True)) == 0.25
    assert paths.ratio(F("fast", 3.0), F("python", 2.0)) == 1.5  # not judged: used
    assert paths.ratio(F("fast", 30.0, True), F("python", 120.0, False)) is None
    assert paths.ratio(F("fast", 30.0, False), F("python", 120.0, True)) is None
    assert paths.ratio(F("fast", None), F("python", 2.0)) is None
    assert paths.ratio(F("fast", 1.0), F("python", 0.0)) is None
    assert paths.ratio(None, F("python", 2.0)) is None
    assert paths.ratio_cell(F("fast", 30.0, True), F("python", 120.0, True)) == "0.25"
    assert paths.ratio_cell(F("fast", 1.0), F("python", 3.0), ".3f") == "0.333"
    assert paths.ratio_cell(F("fast", 30.0, True), F("python", 120.0, False)) == \
        "- (python lost fidelity)"
    assert paths.ratio_cell(F("fast", 3.0, False), F("python", 1.0, False)) == \
        "- (python and fast lost fidelity)"
    assert paths.ratio_cell(F("fast", None), F("python", 1.0)) == "-"
    assert [paths.verdict(v) for v in (True, False, None)] == ["kept up", "LOST", "not judged"]


def test_render_aligns_columns():
    assert paths.render(["TDF", "path", "CPU us"], [["1000", "python", "110.5"],
                                                   ["1000", "fast/python", "0.25"]], 2) == [
        "TDF  path        CPU us",
        "1000 python       110.5",
        "1000 fast/python   0.25"]
    assert paths.render(["a", "b"], [["xyz", ""]]) == ["a   b", "xyz"]


def test_legend_and_agents_path():
    assert paths.legend(("python", "fast")) == [
        f"  python: {datapath.header('python')}", f"  fast: {datapath.header('fast')}"]
    assert paths.agents_path({"rail1": {"datapath": "c"}, "rail2": {"datapath": "c"}}) == "c"
    assert paths.agents_path({"rail1": {"datapath": "c"}, "s1": {"datapath": "python"}}) == \
        "c+python"
    assert paths.agents_path({}) == "-"


def test_tdfs_argument():
    assert paths.tdfs("1000,2000") == [1000.0, 2000.0]
    assert paths.tdfs("5e3") == [5000.0]
    with pytest.raises(ValueError, match="--tdfs: comma-separated numbers, got '1000,x'"):
        paths.tdfs("1000,x")
    with pytest.raises(ValueError, match="--tdfs: each TDF must be >= 1, got '0.5'"):
        paths.tdfs("0.5")


def test_cli_arguments():
    ap = cli.build_parser()
    a = ap.parse_args(["bench", "tdf", "--tdfs", "1000,10000", "--topo", "rail2x4"])
    assert (a.datapath, a.tdfs, a.topo) == (None, "1000,10000", "rail2x4")
    assert ap.parse_args(["bench", "forward", "--datapath", "fast"]).datapath == "fast"
    with pytest.raises(SystemExit):
        ap.parse_args(["bench", "forward", "--datapath", "c"])


def test_cli_refuses_both_where_one_path_runs(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the refusal comes before any fabric
    assert cli.main(["bench", "rnic", "--datapath", "both"]) == 2
    assert "emu bench: --datapath both: only forward" in capsys.readouterr().err
    assert cli.main(["bench", "tdf", "--datapath", "python", "--tdfs", "0"]) == 2
    assert "--tdfs: each TDF must be >= 1" in capsys.readouterr().err


def test_fidelity_case_table_keeps_lost_runs_out_of_ratios():
    def run(code, kept, t_ms, busbw):
        s = {"fidelity": {"kept_up": kept}}
        return code, s, {"time_model_ms": t_ms, "busbw_gbps": busbw}
    runs = {(2000.0, "python"): run(3, False, 2.0, 150.0),
            (2000.0, "fast"): run(0, True, 1.6, 190.0),
            (8000.0, "python"): run(0, True, 1.6, 188.0),
            (8000.0, "fast"): run(0, True, 1.6, 190.0)}
    assert fidelity.case_table(runs, (2000.0, 8000.0), ("python", "fast")) == [
        "figure        path                        TDF 2000 TDF 8000  T/4T",
        "time_model_ms python                  2.000 (LOST)    1.600     -",
        "time_model_ms fast                           1.600    1.600 1.000",
        "time_model_ms fast/python - (python lost fidelity)    1.000",
        "busbw_gbps    python                150.000 (LOST)  188.000     -",
        "busbw_gbps    fast                         190.000  190.000 1.000",
        "busbw_gbps    fast/python - (python lost fidelity)    1.011"]
    assert fidelity.kept_up(3, {}) is False and fidelity.kept_up(0, {}) is None
    assert fidelity.kept_up(0, {"fidelity": {"kept_up": True}}) is True


def test_bench_tdf_alternates_paths_and_prints_the_ratio_of_kept_up_rows(monkeypatch, capsys):
    from emu.bench import basic
    order = []

    def trial(topo, tdf, load, duration):  # a stand-in for the fabric: the path it was given
        m = os.environ[datapath.ENV]
        order.append((tdf, m))
        return {"tdf": tdf, "lab_link_bps": 2e11 / tdf, "offered_bps": 8e7,
                "delivered_bps": 7.9e7, "drops": 0.0, "kept_up": m == "fast" or tdf > 1000,
                "cpu_us_per_frame": {"python": 100.0, "fast": 60.0}[m],
                "frames_per_wakeup": {"python": 1.25, "fast": 3.5}[m],
                "p99_lag_model_us": 0.5, "agents": {"python": "python", "fast": "c"}[m]}
    monkeypatch.setattr(basic, "load_trial", trial)
    assert basic.fabric_load((1000.0, 10000.0)) == 0
    assert order == [(1000.0, "python"), (1000.0, "fast"), (10000.0, "python"),
                     (10000.0, "fast")]
    table = capsys.readouterr().out.splitlines()[-7:]
    assert table[0].split() == ["TDF", "path", "agents", "lab", "link", "offered", "Mbps",
                                "delivered", "Mbps", "delivered/offered", "agent", "drops",
                                "agent", "CPU", "us/frame", "frames/wake-up", "guard", "p99",
                                "lag", "fidelity"]
    assert [r.split() for r in table[1:]] == [
        ["1000", "python", "python", "200", "M", "80.0", "79.0", "0.988", "0", "100.0", "1.25",
         "0.50", "us", "LOST"],
        ["1000", "fast", "c", "200", "M", "80.0", "79.0", "0.988", "0", "60.0", "3.50", "0.50",
         "us", "kept", "up"],
        ["1000", "fast/python", "-", "(python", "lost", "fidelity)"],  # not used: LOST
        ["10000", "python", "python", "20", "M", "80.0", "79.0", "0.988", "0", "100.0", "1.25",
         "0.50", "us", "kept", "up"],
        ["10000", "fast", "c", "20", "M", "80.0", "79.0", "0.988", "0", "60.0", "3.50", "0.50",
         "us", "kept", "up"],
        ["10000", "fast/python", "0.60"]]


def test_bench_fidelity_runs_each_workload_at_t_and_4t(monkeypatch, capsys):
    """`emu bench fidelity --topo rail2x4 --tdf 1000 --datapath fast`: each rail2x4 case at
    TDF 1000 and 4000 (issue 30 asks T = 1000 there); without --tdf, the case's own T."""
    calls = []

    def run(argv):  # a stand-in for `emu run`: the topology, workload and TDF it was given
        calls.append((argv[0], argv[2], float(argv[argv.index("--tdf") + 1])))
        return 0
    monkeypatch.setattr(fidelity, "emu_run", run)
    assert fidelity.fidelity(paths=("fast",), topos=("rail2x4",), tdf=1000.0) == 0
    assert calls == [("rail2x4", "allreduce", 1000.0), ("rail2x4", "allreduce", 4000.0),
                     ("rail2x4", "incast", 1000.0), ("rail2x4", "incast", 4000.0)]
    calls.clear()
    assert fidelity.fidelity(paths=("fast",), topos=("rail8x4",)) == 0
    assert calls == [("rail8x4", "allreduce", 5000.0), ("rail8x4", "allreduce", 20000.0)]
    assert "rail8x4 AllReduce 4 MB (32 ranks)" in capsys.readouterr().out
