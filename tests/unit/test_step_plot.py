"""emu.observe.plots.step_timeline: a bar per collective step at its model time, one bar
collection per rank and phase, labelled with its step when the bars are wide enough."""

from pathlib import Path

import pytest

from emu.observe import plots


def steps(ranks: int, n: int, dt: float = 1e-6) -> list[dict]:
    """`n` back-to-back steps of `dt` s per rank, the first half reduce-scatter."""
    return [{"rank": r, "step": k, "phase": "reduce-scatter" if k < n // 2 else "all-gather",
             "t_start_s": k * dt, "t_end_s": (k + 1) * dt} for r in range(ranks) for k in range(n)]


def drawn(monkeypatch, st):
    got = {}

    def save(fig, ax, path, title, ylabel=None, legend=False):
        got.update(ax=ax, title=title)
        return True
    monkeypatch.setattr(plots, "_save", save)
    assert plots.step_timeline(st, Path("/nonexistent/steps.png"))
    ax = got.pop("ax")
    bars = sorted((round(v[0][0], 9), round(v[2][0], 9), round(v[0][1], 9))
                  for c in ax.collections for v in (p.vertices for p in c.get_paths()))
    got.update(collections=len(ax.collections), bars=bars, labels=[t.get_text() for t in ax.texts])
    plots.pyplot().close(ax.figure)
    return got


def test_wide_bars_are_labelled_with_their_step(monkeypatch):
    got = drawn(monkeypatch, steps(2, 4))
    assert got["collections"] == 4  # 2 ranks x 2 phases
    # bars in model ms: step k of rank r spans [k, k + 1) us, rows r -/+ 0.4
    assert got["bars"] == sorted((k / 1e3, (k + 1) / 1e3, r - 0.4)
                                 for r in range(2) for k in range(4))
    assert sorted(got["labels"]) == sorted(str(k) for _ in range(2) for k in range(4))
    assert got["title"] == "Collective steps per rank (bar label: step)"


def test_too_narrow_bars_carry_no_labels(monkeypatch):
    n = 62  # rail8x4's ring: 2 x 31 steps, each 1/62 of the axis, under LABEL_MIN_FRACTION
    assert 1 / n < plots.LABEL_MIN_FRACTION == pytest.approx(1 / 60)
    got = drawn(monkeypatch, steps(32, n))
    assert got["collections"] == 64 and len(got["bars"]) == 32 * n and got["labels"] == []
    assert got["title"].endswith("(steps left to right; too narrow to label)")


def test_no_steps_no_plot(tmp_path):
    assert plots.step_timeline([], tmp_path / "x.png") is False and not list(tmp_path.iterdir())
