"""Run results without root: metrics sampling, plots from a synthetic run directory,
summary schema, the report command."""

import csv
import io
import json

import pytest

from emu.observe.metrics import Sampler, nic_rows, read_rows, switch_rows
from emu.observe.summary import class_totals, nic_totals, report, table_text, validate_summary
from emucore.timedil import TimeDilation
from emucore.qos.qosconfig import QosConfig
import topologies

TD = TimeDilation(1000)


def port(tx=0, rx=0, drops=None, q3=None, pause_tx=0, pause_rx=0, paused=False):
    return {"tx_bytes": tx, "rx_bytes": rx, "rx_packets": 0, "tx_packets": 0,
            "drops": drops or {},
            "queues": {"3": q3 or {"depth_bytes": 0, "ecn_marks": 0, "drops": {}, "enqueued": 0,
                                   "dequeued": 0, "dequeued_bytes": 0}},
            "pfc": {"pause_tx": [0, 0, 0, pause_tx, 0, 0, 0, 0],
                    "pause_rx": [0, 0, 0, pause_rx, 0, 0, 0, 0],
                    "paused": [False] * 3 + [paused] + [False] * 4}}


def snap(t, **ports):
    return {"switch": "rail1", "t_lab": t, "ports": ports}


def test_switch_rows_rates_in_model_units():
    a = snap(10.0, eth1=port(tx=0))
    b = snap(12.0, eth1=port(tx=250_000, rx=50_000, drops={"queue_full": 3},
                            q3={"depth_bytes": 160_000, "ecn_marks": 7, "drops": {}, "enqueued": 9,
                                "dequeued": 2, "dequeued_bytes": 1}, pause_tx=2, paused=True))
    rows = {(r[2], r[3], r[4]): r[5] for r in switch_rows(a, b, TD, t0_lab=10.0)}
    # 250 kB in 2 s lab = 1 Mbit/s lab = 1 Gbit/s model at TDF 1000
    assert rows[("eth1", "", "tx_bps")] == pytest.approx(1e9)
    assert rows[("eth1", "", "rx_bps")] == pytest.approx(0.2e9)
    assert rows[("eth1", "", "drops")] == 3
    assert rows[("eth1", "3", "depth_bytes")] == 160_000 and rows[("eth1", "3", "ecn_marks")] == 7
    assert rows[("eth1", 3, "pause_tx")] == 2 and rows[("eth1", 3, "paused")] == 1
    t = switch_rows(a, b, TD, 10.0)[0][0]
    assert t == pytest.approx(2e-3)  # 2 s lab = 2 ms model


def test_nic_rows():
    a = {"gpu": "h1g1", "t_lab": 0.0, "qps": {"7": {"tx_wire_bytes": 0, "cnps_rx": 0,
                                                     "cnps_sent": 0, "rate_model_bps": 2e11}}}
    b = {"gpu": "h1g1", "t_lab": 1.0, "qps": {"7": {"tx_wire_bytes": 125_000, "cnps_rx": 2,
                                                     "cnps_sent": 0, "rate_model_bps": 1e11}}}
    rows = {r[4]: r[5] for r in nic_rows(a, b, TD, 0.0)}
    assert rows == {"rate_bps": 1e11, "tx_bps": pytest.approx(1e9), "cnps_rx": 2, "cnps_sent": 0}


def test_sampler_writes_csv(tmp_path):
    clock = iter([1.0, 2.0, 3.0, 4.0])
    src = {"rail1": lambda brief: snap(next(clock), eth1=port(tx=1000))}
    s = Sampler(tmp_path / "m.csv", TD, 1.0, src, {"rail1": "switch"})
    s.start()
    last = s.stop()
    rows = read_rows(tmp_path / "m.csv")
    assert last["rail1"]["switch"] == "rail1"
    assert rows and set(rows[0]) == {"t_model_s", "node", "port", "queue", "metric", "value"}
    assert s.rows == len(rows)


def synthetic_run(tmp_path):
    fab = topologies.load("rail2x4")
    (tmp_path / "topology.json").write_text(json.dumps(fab.to_dict()))
    (tmp_path / "qos.json").write_text(json.dumps(QosConfig().to_dict()))
    with (tmp_path / "metrics.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("t_model_s", "node", "port", "queue", "metric", "value"))
        for i in range(20):
            t = i * 1e-4
            w.writerow((t, "rail1", "eth4", 3, "depth_bytes", 150_000 * i))
            w.writerow((t, "rail1", "eth4", "", "tx_bps", 2e11 * min(i, 10) / 10))
            w.writerow((t, "rail1", "eth1", "", "tx_bps", 1e11))
            w.writerow((t, "rail1", "eth1", 3, "pause_tx", 1 if i % 5 == 0 else 0))
            w.writerow((t, "h1g1", "qp7", "", "rate_bps", 2e11 / (1 + i)))
            w.writerow((t, "h1g1", "qp7", "", "tx_bps", 1e11))
            w.writerow((t, "h1g1", "qp7", "", "cnps_rx", 1 if i % 3 == 0 else 0))
    counters = {"rail1": {"switch": "rail1", "t_lab": 1.0, "ports": {
        "eth4": port(q3={"depth_bytes": 0, "ecn_marks": 5, "drops": {}, "enqueued": 10,
                         "dequeued": 10, "dequeued_bytes": 41700}, pause_rx=4)}},
        "h1g1": {"gpu": "h1g1", "qps": {"7": {"cnps_sent": 0, "cnps_rx": 3, "retransmits": 1,
                                               "tx_bytes": 10}}}}
    (tmp_path / "last_counters.json").write_text(json.dumps(counters))
    # ch.14: 4 ranks, 3 reduce-scatter + 3 all-gather steps
    steps = [{"rank": r, "step": s, "phase": "reduce-scatter" if s < 3 else "all-gather",
              "t_start_s": s * 1e-4, "t_end_s": (s + 0.9) * 1e-4} for r in range(4) for s in range(6)]
    summary = {"version": 1, "topology": "rail2x4", "tdf": 1000.0, "verdict": "pass",
               "switches": {"rail1": {}}, "steps": steps}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return counters


def test_plots_from_a_synthetic_run(tmp_path):
    from emu.observe.plots import make_all

    synthetic_run(tmp_path)
    made = make_all(tmp_path)
    assert {p.name for p in made} == {"queue_depth.png", "qp_rates.png", "pfc_pauses.png",
                                      "utilisation.png", "collective_steps.png"}
    for p in made:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plots_skipped_without_data(tmp_path):
    from emu.observe.plots import make_all

    assert make_all(tmp_path) == []


def test_class_totals_and_nics(tmp_path):
    counters = synthetic_run(tmp_path)
    t = class_totals(counters)
    assert t["rail1"]["3"] == {"packets": 10, "bytes": 41700, "ecn_marks": 5, "drops": 0,
                               "pause_tx": 0, "pause_rx": 4}
    assert nic_totals(counters) == {"h1g1": {"cnps_sent": 0, "cnps_rx": 3, "retransmits": 1,
                                             "tx_bytes": 10}}


@pytest.mark.parametrize("change, field", [({"version": 2}, "version"), ({"verdict": "ok"}, "verdict"),
                                           ({"tdf": "x"}, "tdf")])
def test_summary_schema(change, field):
    good = {"version": 1, "topology": "t", "tdf": 1.0, "verdict": "pass", "switches": {}}
    validate_summary(good)
    with pytest.raises(ValueError, match=field):
        validate_summary({**good, **change})
    bad = dict(good)
    del bad["switches"]
    with pytest.raises(ValueError, match="switches"):
        validate_summary(bad)


def test_report_round_trip(tmp_path):
    synthetic_run(tmp_path)
    out = io.StringIO()
    summary = report(tmp_path, out=out)
    text = out.getvalue()
    assert summary["classes"]["rail1"]["3"]["ecn_marks"] == 5
    assert "rail1" in text and "RoCE (3)" in text and "h1g1" in text and "PASS" in text
    assert (tmp_path / "plots" / "pfc_pauses.png").is_file()
    assert "RoCE (3)" in table_text(summary)


def test_report_cli_errors(tmp_path):
    from emu.cli import main

    assert main(["report", str(tmp_path)]) == 2
