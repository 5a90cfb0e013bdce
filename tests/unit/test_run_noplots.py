"""`emu run --no-plots` (issue 30: the fabric tests that never look at a run's plots skip
their 0.6-3.2 s): the option reaches RunOptions, the report then draws nothing, times no
"plots" phase and says how to draw them later; without it the plots are drawn as before."""

from dataclasses import replace
from pathlib import Path

import pytest

from emu.cli import build_parser
from emu.commands.run_args import run_options
from emu.run import report
from tests.unit.test_guard import fake_run


@pytest.mark.parametrize("extra, drawn", [([], True), (["--no-plots"], False)])
def test_no_plots_skips_the_plots_and_the_default_draws_them(tmp_path, capsys, monkeypatch,
                                                              extra, drawn):
    opts = run_options(build_parser().parse_args(["run", "rail2x4", *extra]))
    assert opts.no_plots is not drawn
    calls = []

    def make_all(run_dir):
        calls.append(run_dir)
        return [run_dir / "plots" / "utilisation.png"]

    monkeypatch.setattr(report.plots, "make_all", make_all)
    plan, out, summary = fake_run(tmp_path, [0.0] * 100)
    plan.options = replace(plan.options, no_plots=opts.no_plots)
    assert report.print_report(plan, summary, out, {}) == report.EXIT_PASS
    text = capsys.readouterr().out
    assert calls == ([plan.run_dir] if drawn else [])
    assert ("plots" in plan.phases.seconds) is drawn
    shown = Path(plan.shown_dir)
    assert (f"  plots: utilisation.png in {shown / 'plots'}" in text) is drawn
    assert (f"  plots: none (--no-plots; `python -m emu report {shown}` draws them)"
            in text) is not drawn
