"""The fidelity-lag plot (emu.observe.plots.fidelity_lag): its bound's label sits at the
plot's left edge whatever the model times are. At x = 0 in data coordinates, a run whose
samples start later (a two-server run: tests/netns/test_cluster.py) put the label far left
of the axes, and matplotlib warned "Tight layout not applied"."""

import warnings

from emu.observe import plots


def rows(t0: float) -> list[dict]:
    return [{"t_model_s": t0 + i * 1e-4, "node": node, "port": "", "queue": "",
             "metric": "lag_p99_s", "value": (1 + i) * 1e-8}
            for i in range(20) for node in ("rail1", "h1g1")]


def test_the_bounds_label_stays_inside_the_figure(tmp_path, monkeypatch):
    seen = {}
    real = plots._save

    def save(fig, ax, path, *a, **kw):
        seen["texts"] = [(t.get_text(), t.get_transform() == ax.get_yaxis_transform())
                         for t in ax.texts]
        return real(fig, ax, path, *a, **kw)

    monkeypatch.setattr(plots, "_save", save)
    with warnings.catch_warnings():
        # matplotlib's layout warnings only: an "error" for every category would also raise
        # the ResourceWarnings of other tests' sockets collected during this one
        warnings.simplefilter("error", UserWarning)
        for t0 in (0.0, 0.25):    # samples from 0, and from 250 ms model on
            assert plots.fidelity_lag(rows(t0), 1e-7, tmp_path / f"lag{t0}.png")
            assert (tmp_path / f"lag{t0}.png").stat().st_size > 0
            assert seen["texts"] == [(" bound (one MTU on the fastest link)", True)]
