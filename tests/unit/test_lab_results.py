"""emu.lab.results: docs/LAB_RESULTS.md from the labs' lab.json documents (pure, from a
fabricated result)."""

from emu.lab.results import results_md

DOC = {"id": "L11.6", "title": "DCQCN timeline t1..t8", "verdict": "differs",
       "kept_up": True, "outcomes": {"pass": 1, "differs": 1, "fail": 0, "shown": 1},
       "checks": [
           {"name": "no drops", "check": "no drops", "variant": "", "measured": 0.0,
            "expected": "== 0", "source": "book: ch.11 L2499", "outcome": "pass",
            "pass": True},
           {"name": "t7 <= t8", "check": "t7 <= t8", "variant": "", "measured": -671.1,
            "expected": ">= 0", "source": "book: ch.11 Fig 11-7", "outcome": "differs",
            "pass": True, "differs": {"expected": "< 0", "why": "a shared buffer | egress",
                                      "source": "theory: shared-buffer accounting"}},
           {"name": "t1", "check": "t1", "variant": "", "measured": 6.98,
            "expected": "(shown)", "source": "", "outcome": "shown", "pass": True}],
       "variants": {"main": {"tdf": 10000.0, "lab_s": 42.3, "data_path": "python",
                             "kept_up": True, "p99_lag_us": 0.75}}}

FELL = {"id": "L12.5", "title": "shoot-out", "verdict": "fail", "kept_up": False,
        "outcomes": {"pass": 0, "differs": 0, "fail": 1, "shown": 0},
        "checks": [{"name": "spray [s1]", "check": "spray", "variant": "s1", "measured": 800.0,
                    "expected": "<= 717", "source": "catalogue: L12.5 (P)", "outcome": "fail",
                    "pass": False}],
        "variants": {"s1": {"tdf": 20000.0, "lab_s": 9.0, "data_path": "python",
                            "kept_up": False, "p99_lag_us": 1.33, "suggested_tdf": 40000}}}


def test_the_results_file_names_commit_tdf_data_path_guard_and_every_check():
    md = results_md([DOC, FELL], "abc1234+dirty", "2026-11-25")
    lines = md.splitlines()
    assert lines[0] == "# Lab results"
    assert "at commit abc1234+dirty on 2026-11-25" in md
    assert "| [L11.6](#l116-dcqcn-timeline-t1t8) | DCQCN timeline t1..t8 | differs | 1 / 1 / 0 / 1 |" in lines
    assert "| [L12.5](#l125-shoot-out) | shoot-out | fail | 0 / 0 / 1 / 0 |" in lines
    assert "## L11.6: DCQCN timeline t1..t8" in lines
    assert "Verdict: **differs** (1 pass, 1 differs, 1 shown)." in lines
    assert "| main | abc1234+dirty | 10000 | python | 42.3 s | kept up (p99 lag 0.75 µs model) |" in lines
    assert "| no drops | all | 0 | == 0 | book: ch.11 L2499 | pass |" in lines
    assert ("| t7 <= t8 | all | -671.1 | >= 0 (emu: < 0) | book: ch.11 Fig 11-7; emu: theory: "
            "shared-buffer accounting | **differs** |") in lines
    assert "* t7 <= t8: a shared buffer | egress" in lines  # the reason, under the table
    assert "| t1 | all | 6.98 | (shown) | - | shown |" in lines
    assert ("| s1 | abc1234+dirty | 20000 | python | 9 s | fell behind (p99 lag 1.33 µs "
            "model), rerun at TDF 40000 |") in lines
    assert "| spray | s1 | 800 | <= 717 | catalogue: L12.5 (P) | **FAIL** |" in lines
