"""`emu bench fidelity`: issue 11's workloads at TDF T and 4T through `emu run`, as a user
would, on each data path `--datapath` names (default the Python and the compiled one,
alternating: emu.bench.paths): model results side by side, their ratio T / 4T (a result
the lab's speed does not change has ratio 1; issue 11 aims within 5 %), fast / python at
each TDF (issue 30 aims within 5 %), and each run's fidelity verdict (emu.observe.guard);
a figure from a run that lost fidelity enters no ratio.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from emu.bench import paths as paths_
from emu.bench.benchrun import emu_run
from emu.observe import guard

#: (name, `emu run` arguments, T): issue 11's workloads at the TDF it aims to keep up at
FIDELITY_CASES = (
    ("rail2x4 AllReduce 16 MB", ["rail2x4", "--workload", "allreduce", "--size", "16MB",
                                 "--iters", "2"], 2000.0),
    ("rail8x4 AllReduce 4 MB (32 ranks)", ["rail8x4", "--workload", "allreduce", "--size",
                                           "4MB", "--iters", "2"], 5000.0),
    ("rail2x4 3:1 incast 16 MB", ["rail2x4", "--workload", "incast", "--size", "16MB"],
     2000.0),
)


def model_results(summary: dict) -> dict[str, float]:
    """The model-time figures of a run that should not depend on the TDF: AllReduce time
    and busbw of the first size, incast per-sender steady rates."""
    wl = summary.get("workload") or {}
    rows = (wl.get("rank0") or {}).get("rows") or []
    if rows:
        return {"time_model_ms": rows[0]["seconds_model"] * 1e3,
                "busbw_gbps": rows[0]["busbw_model_bps"] / 1e9}
    rates = wl.get("steady_rate_model_bps") or {}
    return {f"{g}_gbps": (r or 0.0) / 1e9 for g, r in rates.items()}


def kept_up(code: int, summary: dict) -> bool | None:
    """A run's verdict: the guard's, else False for exit 3 (fidelity lost), else None."""
    fid = summary.get(guard.KEY)
    if isinstance(fid, dict) and fid.get("kept_up") is not None:
        return bool(fid["kept_up"])
    return False if code == 3 else None


def fidelity(factor: float = 4.0, paths: tuple[str, ...] = paths_.BOTH,
             topos: tuple[str, ...] | None = None, tdf: float | None = None) -> int:
    """The cases of FIDELITY_CASES (those on `topos`, if given) at TDF T (`tdf` for every
    case if given, else the case's own) and factor x T on each of `paths`; prints a table
    per case. Exit 0 if every run exited 0."""
    print(f"bench fidelity: each workload at TDF T and {factor:g}T on each data path, model "
          "results and the guard's verdict (emu run, --pcap none)", flush=True)
    print("\n".join(paths_.legend(paths)))
    ok = True
    with tempfile.TemporaryDirectory(prefix="emu-bench-fidelity-") as tmp:
        for name, argv, t in FIDELITY_CASES:
            if topos is not None and argv[0] not in topos:
                continue
            t = tdf or t
            tdfs = (t, factor * t)
            runs = {}
            for at, m in paths_.alternate(paths, tdfs):
                out = Path(tmp) / f"{argv[0]}-{argv[2]}-{at:g}-{m}"
                print(f"  {name} at TDF {at:g}, {m} ...", flush=True)
                code = emu_run([*argv, "--tdf", str(at), "--datapath", m, "--pcap", "none",
                                "--quiet", "--out", str(out)])
                path = out / "summary.json"
                summary = json.loads(path.read_text()) if path.is_file() else {}
                runs[(at, m)] = (code, summary, model_results(summary))
                ok &= code == 0
            print(f"\n{name}")
            print("\n".join(case_table(runs, tdfs, paths)))
            for (at, m), (code, s, _) in runs.items():
                print(f"  TDF {at:g} {m}: exit {code}, verdict {s.get('verdict', '?')}; "
                      f"{guard.line(s) if s else 'no summary.json'}")
    return 0 if ok else 1


def case_table(runs: dict, tdfs: tuple[float, float], paths: tuple[str, ...]) -> list[str]:
    """One case's table: per figure and path the results at both TDFs and T / 4T, then
    fast / python at each TDF. `runs`: (tdf, path) -> (exit code, summary, results)."""
    t, t4 = tdfs
    figs = {k: None for r in runs.values() for k in r[2]}  # every figure, in order

    def fig(tdf: float, m: str, k: str) -> paths_.Figure:
        code, s, res = runs[(tdf, m)]
        return paths_.Figure(m, res.get(k), kept_up(code, s))
    rows = []
    for k in figs:
        for m in paths:
            a, b = fig(t, m, k), fig(t4, m, k)
            rows.append([k, m, _cell(a), _cell(b), _ratio(a, b)])
        if len(paths) == 2:
            rows.append([k, "fast/python", *(paths_.ratio_cell(fig(x, "fast", k),
                                                               fig(x, "python", k), ".3f")
                                             for x in tdfs), ""])
    return paths_.render(["figure", "path", f"TDF {t:g}", f"TDF {t4:g}", "T/4T"], rows, 2)


def _cell(f: paths_.Figure) -> str:
    """A figure as the table prints it, "(LOST)" after one from a run that lost fidelity."""
    if f.value is None:
        return "-"
    return f"{f.value:.3f}" + (" (LOST)" if f.kept_up is False else "")


def _ratio(a: paths_.Figure, b: paths_.Figure) -> str:
    """T / 4T on one path, under the same fidelity rule as fast / python."""
    r = paths_.ratio(a, b)
    return "-" if r is None else f"{r:.3f}"
