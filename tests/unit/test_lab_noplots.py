"""`command.run_one(..., plots=False)` (issue 30: the lab tests that never look at lab.html's
plots skip their 0.6-3.2 s a lab): nothing is drawn, the page has no image, and the checks,
the verdict and the exit status are those of the run with plots. No root: the fabric run is
replaced by an empty one (every measured check then fails, the same way both times)."""

import pytest

from emu.lab import command, page, runner
from emu.lab import schema as S


def empty_run(lab, v, rd, term, seed=1):
    rd.mkdir(parents=True, exist_ok=True)
    return {"lab_s": 1.0, "t0_sampler": 0.0, "fidelity": {"kept_up": True},
            "suggested_tdf": None, "pcaps": {}, "tdf": v.fabric.tdf, "data_path": "python",
            "seed": seed, "result": {"t0_model_us": 0.0, "flows": {}}, "counters": {},
            "run_dir": rd}


@pytest.mark.parametrize("lab_id, n_variants", [("L11.4", 1), ("L12.2", 2)])
def test_no_plots_draws_nothing_and_judges_the_same(tmp_path, monkeypatch, lab_id, n_variants):
    drawn = []
    monkeypatch.setattr(runner, "run_variant", empty_run)
    monkeypatch.setattr(page, "timeline_png", lambda *a: drawn.append("timeline") or "data:t")
    monkeypatch.setattr(page, "depth_png", lambda *a: drawn.append("depth") or "data:d")
    lab = S.load(lab_id)
    assert len(lab.variants) == n_variants
    got = {}
    for plots in (True, False):
        drawn.clear()
        out = tmp_path / str(plots)
        code, doc = command.run_one(lab, out, None, quiet=True, plots=plots)
        got[plots] = (code, doc["verdict"], doc["checks"])
        html = (out / "lab.html").read_text()
        assert drawn == (["timeline", "depth"] * n_variants if plots else [])
        assert html.count("<img ") == (2 * n_variants if plots else 0)
    assert got[True] == got[False]
