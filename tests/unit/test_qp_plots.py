"""The per-QP plots by transport (issue 32): the rate plot titled DCQCN or NSCC, NSCC's
window sampled from the NIC snapshot (emu.observe.metrics) and plotted beside it."""

import csv
import json

import pytest

from emu.observe import plotfork, plots
from emu.observe.metrics import nic_rows
from emucore.timedil import TimeDilation


def run_dir(tmp_path, transport):
    with (tmp_path / "metrics.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("t_model_s", "node", "port", "queue", "metric", "value"))
        for i in range(20):
            t = i * 1e-4
            w.writerow((t, "h1g1", "qp7", "", "rate_bps", 2e11 / (1 + i)))
            w.writerow((t, "h1g1", "qp7", "", "tx_bps", 1e11))
            if transport == "uet":
                w.writerow((t, "h1g1", "qp7", "", "cwnd_bytes", 150_000 / (1 + i)))
            w.writerow((t, "h1g2", "qp9", "", "cwnd_bytes", 9_000))   # sent nothing
            w.writerow((t, "h1g2", "qp9", "", "tx_bps", 0))
    (tmp_path / "summary.json").write_text(json.dumps({"transport": transport}))
    return tmp_path


@pytest.mark.parametrize("transport, title, files", [
    ("roce", "DCQCN rate per QP (triangles: CNPs received)", {"qp_rates.png"}),
    ("uet", "NSCC rate per QP (window / base RTT, at most the link)",
     {"qp_rates.png", "qp_windows.png"}),
])
def test_rate_title_and_window_plot_by_transport(tmp_path, monkeypatch, transport, title, files):
    titles = {}
    real = plots._save

    def save(fig, ax, path, t, *a, **kw):
        titles[path.name] = t
        return real(fig, ax, path, t, *a, **kw)

    monkeypatch.setattr(plots, "_save", save)
    monkeypatch.setattr(plotfork, "cores", lambda: 1)  # titles seen in this process
    made = plots.make_all(run_dir(tmp_path, transport))
    assert {p.name for p in made} == files
    assert titles["qp_rates.png"] == title
    if transport == "uet":
        assert titles["qp_windows.png"] == "NSCC window per QP"
        assert (tmp_path / "plots" / "qp_windows.png").read_bytes()[:4] == b"\x89PNG"


def test_the_nic_sample_carries_nsccs_window():
    td = TimeDilation(1000.0)
    q = {"tx_wire_bytes": 0, "cnps_rx": 0, "cnps_sent": 0, "rate_model_bps": 1e11,
         "nscc": {"cwnd": 123_456.0}}
    a = {"gpu": "h1g1", "t_lab": 0.0, "qps": {"7": q}}
    b = {"gpu": "h1g1", "t_lab": 1.0, "qps": {"7": {**q, "nscc": {"cwnd": 65_536.0}}}}
    rows = {r[4]: r[5] for r in nic_rows(a, b, td, 0.0)}
    assert rows["cwnd_bytes"] == 65_536.0 and rows["rate_bps"] == 1e11
    roce = {"gpu": "h1g1", "t_lab": 1.0, "qps": {"7": {**q, "nscc": None}}}
    assert "cwnd_bytes" not in {r[4] for r in nic_rows(a, roce, td, 0.0)}
