"""`emu lab results docs/LAB_RESULTS.md RUNDIR`: one lab's entry updated, the other labs'
entries kept as the earlier file has them (emu.lab.results.entries, results_md's `kept`).
Exact output from the fixed lab.json documents of test_lab_results (no root, no fabric)."""

from emu.lab import publish
from emu.lab.results import entries, recorded, results_md
from tests.unit.test_lab_results import (DOCS, EXPECTED, HEAD, L116, L125, LABS, REASONS,
                                         _current, _rundir, emu)

#: L11.6 run again: another measured value, wall time and commit
NEW116 = dict(L116, checks=[dict(L116["checks"][0], measured=3.0)] + L116["checks"][1:],
              run=dict(L116["run"], commit="bcd2345", wall_s=30.2))


def test_an_entry_reads_back_whole():
    got = entries(EXPECTED)
    assert sorted(got) == ["L11.6", "L12.5"]  # the labs with a result
    assert (got["L12.5"]["verdict"], got["L12.5"]["lab_sha"]) == \
        ("**fell behind** (does not count)", "bbbb")
    assert got["L11.6"]["row"].startswith("| [L11.6](#l116-dcqcn-timeline-t1t8) | ")
    assert got["L11.6"]["section"][0] == "## L11.6: DCQCN timeline t1..t8"
    assert got["L11.6"]["section"][-2:] == ["* t7 <= t8: a shared buffer | egress", ""]
    assert got["L12.5"]["section"][-1] == ""  # the file's last line
    assert entries("# Lab results\n\nnothing yet\n") == {}


def test_kept_entries_and_one_new_result_make_the_file_all_the_results_make():
    """Keeping is regenerating: the earlier file's entries of the current lab files plus
    L11.6's new result give exactly the file both results give."""
    assert results_md(LABS, DOCS, HEAD, REASONS, kept=entries(EXPECTED)) == EXPECTED
    assert results_md(LABS, {"L11.6": NEW116}, HEAD, REASONS, kept=entries(EXPECTED)) == \
        results_md(LABS, {"L11.6": NEW116, "L12.5": L125}, HEAD, REASONS)
    assert "| no drops | all | 3 | == 0 |" in results_md(LABS, {"L11.6": NEW116}, HEAD,
                                                         kept=entries(EXPECTED))


def test_an_entry_of_another_lab_file_is_not_kept():
    labs = [dict(lab, sha="b2b2") if lab["id"] == "L12.5" else lab for lab in LABS]
    text = results_md(labs, {}, HEAD, kept=entries(EXPECTED))
    assert "| L12.5 | shoot-out | no result: not run at this commit | | | | | | |" in text
    assert "## L12.5" not in text and "## L11.6" in text
    assert recorded(text)["L11.6"] == recorded(EXPECTED)["L11.6"]


def test_emu_lab_results_updates_one_lab_of_an_earlier_file(tmp_path, capsys):
    out = tmp_path / "R.md"
    first = _current("L11.3")
    assert emu(["lab", "results", str(_rundir(tmp_path / "a", first)), "--out", str(out)]) == 0
    again = dict(first, id="L11.4", title=next(x["title"] for x in publish.catalogue()
                                              if x["id"] == "L11.4"),
                 run=dict(_current("L11.4")["run"], commit="bcd2345"))
    b = _rundir(tmp_path / "b", again)
    capsys.readouterr()
    assert emu(["lab", "results", str(out), str(b), "--out", str(out)]) == 0
    assert capsys.readouterr().out == \
        f"Wrote {out} (1 lab results read; 1 entries of earlier results read)\n"
    got = recorded(out.read_text())
    assert sorted(got) == ["L11.3", "L11.4"]
    assert out.read_text().splitlines()[4].startswith("2 of ")
    empty = tmp_path / "empty.md"
    empty.write_text("# Lab results\n")
    assert emu(["lab", "results", str(empty), "--out", str(out)]) == 2
    assert capsys.readouterr().err == \
        f"emu lab results: {empty}: not a LAB_RESULTS.md (no lab result in it)\n"
