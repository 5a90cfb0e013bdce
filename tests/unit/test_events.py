"""emucore.eventlog: one JSON line per event, model microseconds on one clock, a cap."""

import json

from emucore.eventlog import EventLog, model_us, read_events
from emucore.timedil import TimeDilation

TD = TimeDilation(5000.0)


def test_an_event_is_one_line_in_model_microseconds(tmp_path):
    log = EventLog(str(tmp_path / "ev" / "rail1.jsonl"), "rail1", TD)
    log.emit("xoff", 10.0, port="eth3", prio=3, bytes=3276800)
    log.close(10.0)
    [line] = (tmp_path / "ev" / "rail1.jsonl").read_text().splitlines()
    assert json.loads(line) == {"t": 2000.0, "node": "rail1", "ev": "xoff", "port": "eth3",
                                "prio": 3, "bytes": 3276800}


def test_model_us_rounds_to_a_hundredth():
    assert model_us(1.0 + 5000 * 1.234567e-6, TD) == 201.23  # 1 s lab = 200 us model


def test_the_cap_counts_what_it_left_out(tmp_path):
    p = tmp_path / "n.jsonl"
    log = EventLog(str(p), "h1g1", TD, cap=3)
    for i in range(5):
        log.emit("rate", 1.0 + i, qp=7, rate_bps=1e9)
    log.emit("cnp_rx", 9.0, qp=7)
    log.close(10.0)
    evs = read_events([p])
    assert [e["ev"] for e in evs] == ["rate"] * 3 + ["cnp_rx", "suppressed"]
    assert evs[-1]["counts"] == {"rate": 2}


def test_without_a_path_nothing_is_written():
    log = EventLog(None, "x", TD)
    log.emit("xoff", 1.0)
    log.close(1.0)
    assert not log.enabled


def test_read_events_merges_files_in_time_order_and_skips_a_torn_line(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"t": 3, "ev": "x"}\n{"t": 1, "ev": "y"}\n')
    b.write_text('{"t": 2, "ev": "z"}\n{"t": 4, "e')
    assert [e["ev"] for e in read_events([a, b])] == ["y", "z", "x"]
