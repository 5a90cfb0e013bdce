"""Per-flow path accounting without root (issue 13, book ch.12): paths.csv rows from two
agent snapshots, the "where the bytes went" summary and table, the paths plot, and that
a run without balanced flows shows neither."""

import csv
import io
import json

import pytest

import topologies
from emu.observe import paths
from emu.observe.metrics import PATH_FIELDS, Sampler, path_rows, read_paths
from emu.observe.plots import make_all, path_spans
from emu.observe.summary import report, table_text
from emucore.eventlog import model_us
from emucore.timedil import TimeDilation

TD = TimeDilation(1000)
F1 = "10.0.1.11:49152>10.0.2.14:4791/udp"  # h1g1 -> h4g2 (rail2x4)
F2 = "10.0.1.12:49153>10.0.2.13:4791/udp"  # h2g1 -> h3g2
PING = "10.0.1.11>10.0.2.14/icmp"


def lb(mode="flowlet", paths_=(), flowlets=(), untracked=0):
    return {"mode": mode, "describe": f"{mode} (test)", "untracked": untracked,
            "paths": [{"flow": f, "port": p, "packets": b // 1000, "bytes": b}
                      for f, p, b in paths_],
            "flowlets": [{"flow": f, "flowlets": n, "moves": m} for f, n, m in flowlets]}


def snap(t, sw="rail1", **kw):
    return {"switch": sw, "t_lab": t, "ports": {}, "lb": lb(**kw)}


# 250 kB in 2 s lab = 1 Mbit/s lab = 1 Gbit/s model at TDF 1000; rows at 2 ms model
@pytest.mark.parametrize("prev, cur, expected", [
    (snap(10.0, paths_=[(F1, "eth5", 125_000)]),
     snap(12.0, paths_=[(F1, "eth5", 375_000), (F1, "eth6", 50_000), (F2, "eth5", 7)]),
     [(F1, "eth5", 1e9), (F1, "eth6", 0.2e9), (F2, "eth5", 28_000)]),  # new flows count from 0
    (snap(10.0, paths_=[(F1, "eth5", 125_000), (F2, "eth6", 9)]),
     snap(12.0, paths_=[(F1, "eth5", 125_000), (F2, "eth6", 9)]), []),  # nothing grew: no rows
    (snap(10.0, paths_=[(F1, "eth5", 1)]), snap(10.0, paths_=[(F1, "eth5", 9)]), []),  # dt = 0
    ({"switch": "rail1", "t_lab": 10.0, "ports": {}},  # an agent without load balancing
     {"switch": "rail1", "t_lab": 12.0, "ports": {}}, []),
])
def test_path_rows(prev, cur, expected):
    rows = path_rows(prev, cur, TD, t0_lab=10.0)
    assert [(r[2], r[3], r[4]) for r in rows] == [(f, p, pytest.approx(b)) for f, p, b in expected]
    assert all(r[0] == pytest.approx(2e-3) and r[1] == "rail1" for r in rows)


def test_sampler_writes_paths_csv_only_when_a_switch_reports_paths(tmp_path):
    grow = iter([(1.0, 0), (2.0, 125_000), (3.0, 125_000), (4.0, 250_000)])

    def fetch(brief):
        t, b = next(grow)
        return snap(t, paths_=[(F1, "eth6", b)] if b else [])

    s = Sampler(tmp_path / "metrics.csv", TD, 1.0, {"rail1": fetch}, {"rail1": "switch"},
                max_rate_hz=1e-3)  # no background round: exactly start + stop
    s.start()
    s.sample()
    s.sample()
    s.stop()
    rows = read_paths(tmp_path / "paths.csv")
    with (tmp_path / "paths.csv").open() as fh:
        assert tuple(next(csv.reader(fh))) == PATH_FIELDS
    # 125 kB per 1 s lab = 1 Mbit/s lab = 1 Gbit/s model; the round without growth has no row
    assert [(r["node"], r["flow"], r["port"], r["bps"]) for r in rows] == [
        ("rail1", F1, "eth6", pytest.approx(1e9))] * 2
    assert s.paths_rows == 2
    # paths.csv's t = 0 on the event log's axis: model µs of the sampler's start
    origin = json.loads((tmp_path / "sampler.json").read_text())
    assert origin["t0_model_us"] == model_us(s.t0, TD)

    quiet = tmp_path / "quiet"
    quiet.mkdir()
    clock = iter([1.0, 2.0, 3.0])
    s = Sampler(quiet / "metrics.csv", TD, 1.0, {"rail1": lambda brief: snap(next(clock))},
                {"rail1": "switch"}, max_rate_hz=1e-3)
    s.start()
    s.stop()
    assert not (quiet / "paths.csv").exists() and read_paths(quiet / "paths.csv") == []


TOPO = topologies.load("rail2x4").to_dict()
COUNTERS = {
    "rail1": snap(5.0, paths_=[(F1, "eth5", 300), (F1, "eth6", 100), (F2, "eth5", 100),
                               (PING, "eth6", 0)],
                  flowlets=[(F1, 4, 1)], untracked=2),
    "rail2": snap(5.0, sw="rail2", mode="ecmp", paths_=[(F1, "eth6", 640)]),
    "spine1": snap(5.0, sw="spine1", paths_=[]),  # balances nothing
    "h1g1": {"gpu": "h1g1", "qps": {}},           # a NIC's snapshot
}


def test_summarise_shares_and_max_min():
    s = paths.summarise(COUNTERS, TOPO)
    assert list(s) == ["rail1", "rail2"]
    r1 = s["rail1"]
    assert r1["mode"] == "flowlet" and r1["describe"] == "flowlet (test)" and r1["untracked"] == 2
    assert r1["flows"] == [
        {"flow": F1, "label": "h1g1:49152>h4g2:4791", "bytes": 400,
         "ports": {"eth5": 300, "eth6": 100}, "flowlets": 4, "moves": 1},
        {"flow": F2, "label": "h2g1:49153>h3g2:4791", "bytes": 100,
         "ports": {"eth5": 100}, "flowlets": 0, "moves": 0}]
    assert r1["ports"] == {"eth5": 400, "eth6": 100}
    assert r1["peers"] == {"eth5": "spine1", "eth6": "spine2"}
    assert r1["max_min"] == 4.0
    r2 = s["rail2"]  # ECMP: one port, no ratio; flowlets are not counted
    assert r2["ports"] == {"eth6": 640} and r2["max_min"] is None
    assert r2["flows"][0]["flowlets"] is None and r2["flows"][0]["moves"] is None
    json.dumps(s)  # goes into summary.json as it is


@pytest.mark.parametrize("flow, label", [
    (F1, "h1g1:49152>h4g2:4791"),
    (PING, "h1g1>h4g2/icmp"),
    ("10.9.9.9:1>10.0.1.11:22/tcp", "10.9.9.9:1>h1g1:22/tcp"),  # unknown address kept
    ("garbage", "garbage"),
])
def test_short_flow(flow, label):
    assert paths.short_flow(flow, paths.gpu_names(TOPO)) == label


def summary_with(p):
    return {"version": 1, "topology": "rail2x4", "tdf": 1000.0, "verdict": "pass",
            "switches": {}, "paths": p}


def test_table_shows_shares_far_ends_and_imbalance():
    text = table_text(summary_with(paths.summarise(COUNTERS, TOPO)))
    assert "Where the bytes went: rail1, flowlet (test)" in text
    assert "eth5 → spine1" in text and "eth6 → spine2" in text
    f1 = next(ln for ln in text.splitlines() if "h1g1:49152>h4g2:4791" in ln)
    assert [c.strip() for c in f1.strip("│ ").split("│")] == ["h1g1:49152>h4g2:4791", "75%",
                                                              "25%", "400 B", "4", "1"]
    total = next(ln for ln in text.splitlines() if "all flows" in ln and "80%" in ln)
    assert "20%" in total and "500 B" in total
    assert "max/min bytes over eth5, eth6: 4.00" in text
    assert "every balanced flow left on eth6 → spine2" in text  # rail2's ECMP


def test_table_escapes_markup_in_flow_labels():
    odd = "[bold]x[/bold]:1>[red]y:2/udp"
    s = paths.summarise({"rail1": snap(1.0, mode="spray", paths_=[(odd, "eth5", 10)])})
    assert "[bold]x[/bold]:1>[red]y:2" in table_text(summary_with(s))


def test_no_paths_no_table_no_plot(tmp_path):
    assert paths.summarise({"rail1": snap(1.0, paths_=[(F1, "eth5", 0)]),
                            "rail2": {"switch": "rail2", "t_lab": 1.0, "ports": {}}}) == {}
    assert paths.tables({}) == []
    assert "Where the bytes went" not in table_text(summary_with({}))
    write_run(tmp_path, with_paths=False)
    assert "paths.png" not in {p.name for p in make_all(tmp_path)}


def write_run(d, with_paths=True):
    """A run directory: rail1 samples every 100 us model; F1 moves eth5 -> eth6 at
    1 ms (flowlets), F2 is sprayed over both."""
    (d / "topology.json").write_text(json.dumps(TOPO))
    with (d / "metrics.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("t_model_s", "node", "port", "queue", "metric", "value"))
        for i in range(1, 21):
            w.writerow((i * 1e-4, "rail1", "eth5", "", "tx_bps", 1e11))
    if with_paths:
        with (d / "paths.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(PATH_FIELDS)
            for i in range(1, 21):
                w.writerow((i * 1e-4, "rail1", F1, "eth5" if i <= 10 else "eth6", 1.5e11))
                if i % 3:
                    w.writerow((i * 1e-4, "rail1", F2, "eth5", 4e10))
                    w.writerow((i * 1e-4, "rail1", F2, "eth6", 4e10))
        (d / "events").mkdir()
        t0_us = 5_000_000.0
        with (d / "events" / "rail1.jsonl").open("w") as fh:
            for t, port, prev in ((t0_us + 5, "eth5", ""), (t0_us + 1005, "eth6", "eth5")):
                fh.write(json.dumps({"t": t, "node": "rail1", "ev": "flowlet", "flow": F1,
                                     "port": port, "prev": prev, "load": 1.2}) + "\n")
        counters = {"rail1": snap(5.0, paths_=[(F1, "eth5", 1875), (F1, "eth6", 1875),
                                               (F2, "eth5", 700), (F2, "eth6", 700)],
                                  flowlets=[(F1, 2, 1)])}
    else:
        t0_us, counters = 0.0, {"rail1": snap(5.0)}
    (d / "last_counters.json").write_text(json.dumps(counters))
    (d / "summary.json").write_text(json.dumps(summary_with(paths.summarise(counters, TOPO))))
    (d / "sampler.json").write_text(json.dumps({"t0_model_us": t0_us}))


def test_path_spans_cover_the_sampling_interval():
    rows = [{"t_model_s": t, "node": "rail1"} for t in (1e-4, 2e-4, 3e-4, 4e-4)]
    prows = [{"t_model_s": t, "node": "rail1", "flow": F1, "port": "eth5", "bps": 1.0}
             for t in (1e-4, 4e-4)]
    # the first row: one median step (100 us) before; the last: from the round before
    assert path_spans(prows, rows) == {"rail1": [(F1, "eth5", pytest.approx(0.0), 1e-4, 1.0),
                                                 (F1, "eth5", 3e-4, 4e-4, 1.0)]}


def test_paths_plot_and_report_round_trip(tmp_path):
    write_run(tmp_path)
    out = io.StringIO()
    summary = report(tmp_path, out=out)
    png = tmp_path / "plots" / "paths.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert f"plot: {png}" in out.getvalue()
    # emu report rebuilds "paths" from last_counters.json and topology.json
    counters = json.loads((tmp_path / "last_counters.json").read_text())
    assert summary["paths"] == paths.summarise(counters, TOPO)
    assert summary["paths"]["rail1"]["max_min"] == 1.0  # F1 half on each port, F2 sprayed
    assert "Where the bytes went: rail1" in out.getvalue()
