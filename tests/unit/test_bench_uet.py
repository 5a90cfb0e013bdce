"""`emu bench uet`'s pure parts: the scenarios file (errors name the field) and the
table's maths (emu.bench.uetscen); the bench's own file parses."""

from __future__ import annotations

import copy
import re

import pytest

from emu.bench import uetscen

GOOD = {"scenarios": [{
    "id": "a", "title": "2:1 incast 1 MiB", "link": "400G", "size": 1048576, "senders": 2,
    "payload": 4096, "trimming": True, "buffer": 420160, "ecn": [87360, 336960], "lb": "reps",
    "emu": {"ev": "reps"},
    "htsim": {"fct_us": [50.2, 50.6, 51.0], "nacks": 102, "rtx": 102,
              "max_queue_bytes": 420352, "command": "htsim_uec ..."}}]}


def bad(path: str, value) -> dict:
    """GOOD with one field of the first scenario set (None: removed)."""
    d = copy.deepcopy(GOOD)
    node = d["scenarios"][0]
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    return d


def test_good_scenario_parses():
    [s] = uetscen.parse(GOOD)
    assert (s.id, s.link_bps, s.size, s.senders, s.buffer, s.ecn) == \
        ("a", 400e9, 1048576, 2, 420160, (87360, 336960))
    assert s.trimming and s.expressible and s.ev == "reps"
    assert s.htsim_fct_us == (50.2, 50.6, 51.0) and s.htsim_nacks == 102


@pytest.mark.parametrize("path,value,field", [
    ("link", "fast", "scenarios[0].link"),
    ("size", 0, "scenarios[0].size"),
    ("senders", "two", "scenarios[0].senders"),
    ("trimming", "yes", "scenarios[0].trimming"),
    ("ecn", [336960, 87360], "scenarios[0].ecn"),
    ("ecn", [87360, 500000], "scenarios[0].ecn"),
    ("emu.ev", "bitmap", "scenarios[0].emu.ev"),
    ("htsim.fct_us", [51.0, 50.0, 52.0], "scenarios[0].htsim.fct_us"),
    ("htsim.fct_us", [50.0, 51.0], "scenarios[0].htsim.fct_us"),
    ("htsim.speed", 1, "scenarios[0].htsim.speed"),
    ("colour", "red", "scenarios[0].colour"),
    ("title", None, "scenarios[0].title"),
    ("htsim", None, "scenarios[0].htsim"),
])
def test_errors_name_the_field(path, value, field):
    with pytest.raises(ValueError, match="^" + re.escape(field) + ":"):
        uetscen.parse(bad(path, value))


def test_emu_and_not_expressible_exclusive():
    both = bad("not_expressible", "no bitmap")
    with pytest.raises(ValueError, match=r"scenarios\[0\]\.emu: exactly one"):
        uetscen.parse(both)
    neither = bad("emu", None)
    with pytest.raises(ValueError, match=r"scenarios\[0\]\.emu: exactly one"):
        uetscen.parse(neither)
    d = bad("emu", None)
    d["scenarios"][0]["not_expressible"] = "emu has no bitmap"
    [s] = uetscen.parse(d)
    assert not s.expressible and s.note == "emu has no bitmap"
    assert "not expressible: emu has no bitmap" in uetscen.format_row(s, None)


def test_duplicate_ids_and_empty_lists():
    d = copy.deepcopy(GOOD)
    d["scenarios"].append(copy.deepcopy(d["scenarios"][0]))
    with pytest.raises(ValueError, match=r"scenarios\[1\]\.id: 'a' given twice"):
        uetscen.parse(d)
    with pytest.raises(ValueError, match="^scenarios: a non-empty list"):
        uetscen.parse({"scenarios": []})


def test_sizes_accept_units():
    d = bad("size", "1MiB")
    d["scenarios"][0]["buffer"] = "420160B"
    [s] = uetscen.parse(d)
    assert (s.size, s.buffer) == (1 << 20, 420160)


def test_load_names_the_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("scenarios: [{id: x}]\n")
    with pytest.raises(ValueError, match=r"^s\.yaml: scenarios\[0\]\.title"):
        uetscen.load(p)
    with pytest.raises(ValueError, match="--scenarios: no such file"):
        uetscen.load(tmp_path / "none.yaml")


def test_the_bench_file_parses():
    ss = uetscen.load()
    assert len({s.id for s in ss}) == len(ss) >= 10
    assert any(s.trimming for s in ss if s.expressible)
    assert any(not s.trimming for s in ss if s.expressible)
    assert all(s.note for s in ss if not s.expressible)


def test_stats_and_ratios():
    assert uetscen.fct_stats([]) is None
    assert uetscen.fct_stats([3.0, 1.0, 2.0, 10.0]) == (1.0, 2.5, 10.0)
    assert uetscen.ratios((40.0, 50.0, 60.0), (50.0, 40.0, 48.0)) == (1.25, 1.25)
    assert uetscen.in_band((0.8, 1.25)) and not uetscen.in_band((0.79, 1.0))
    assert not uetscen.in_band((1.0, 1.26))


def test_row_counts_only_kept_up_complete_runs():
    [s] = uetscen.parse(GOOD)
    r = uetscen.row(s, [50.6, 60.6], True)
    assert r["emu"] == (50.6, 55.6, 60.6)
    assert r["ratios"] == pytest.approx((55.6 / 50.6, 60.6 / 51.0))
    assert r["counts"] and r["in_band"]
    assert not uetscen.row(s, [50.6, 60.6], False)["counts"]  # the guard said behind
    assert not uetscen.row(s, [50.6, 60.6], None)["counts"]  # no verdict
    missing = uetscen.row(s, [50.6], True)  # one of two flows finished
    assert missing["ratios"] is None and not missing["counts"]
    far = uetscen.row(s, [80.0, 80.0], True)
    assert far["counts"] and not far["in_band"]
    assert "OUTSIDE 0.8-1.25" in uetscen.format_row(s, far)
    assert "within 0.8-1.25" in uetscen.format_row(s, r)
    assert "does not count" in uetscen.format_row(s, uetscen.row(s, [50.6, 60.6], False))
