"""emu bench transport's figures from a run directory (pure: synthetic summaries)."""

import json

import pytest

from emu.bench.transport import allreduce_row, incast_row


def test_incast_row_reads_completion_queue_pauses_trims(tmp_path):
    (tmp_path / "last_counters.json").write_text(json.dumps({"rail1": {"ports": {
        "eth4": {"peer": "h4:nic1", "max_queue_bytes": 123_000},
        "eth5": {"peer": "spine1:eth1", "max_queue_bytes": 999_000}}}}))
    s = {"tdf": 10000, "switches": {"rail1": {"trimmed": 7}, "spine1": {"trimmed": 0}},
         "classes": {"rail1": {"3": {"pause_tx": 2}, "0": {"pause_tx": 0}},
                     "spine1": {"3": {"pause_tx": 1}}},
         "workload": {"seconds_lab": {"h1g1": 3.6, "h2g1": 2.9}, "status": {"h1g1": "SUCCESS", "h2g1": "SUCCESS"},
                      "byte_exact": {"h1g1": True, "h2g1": True},
                      "retransmits": {"h1g1": 4, "h2g1": 3}, "cnps_rx": {"h1g1": 0}}}
    r = incast_row(tmp_path, s, 4 << 20)
    assert r["completion_us"] == pytest.approx(360.0)
    assert r["ideal_us"] == pytest.approx(3 * (4 << 20) * 8 / 200e9 * 1e6)
    assert (r["max_queue_kb"], r["pauses"], r["trimmed"], r["retransmits"]) == (123.0, 3, 7, 7)
    assert r["exact"] and r["cnps"] == 0
    s["workload"]["byte_exact"]["h2g1"] = False
    assert not incast_row(tmp_path, s, 4 << 20)["exact"]


def test_allreduce_row_and_a_missing_summary():
    s = {"workload": {"rank0": {"rows": [{"seconds_model": 5.7e-4, "busbw_model_bps": 2.6e11,
                                          "correct": True}]}},
         "nics": {"h1g1": {"retransmits": 2, "cnps_rx": 1}, "h2g1": {"retransmits": 0}}}
    r = allreduce_row(s)
    assert (r["time_us"], r["busbw_gbps"], r["retransmits"], r["cnps"], r["exact"]) == \
        (pytest.approx(570.0), pytest.approx(260.0), 2, 1, True)
    assert not allreduce_row({})["exact"]
