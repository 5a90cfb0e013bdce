"""The 2:1 and 3:1 matrix of the DCQCN discrete-event model (emu.bench.dcqcnsim): both
DCQCN profiles x both ECN presets, each run's steady state beside the fluid model's
fixed points (`table`, Markdown) and every sender's share of C/N over time (`matrix(png=)`,
matplotlib). `python -m emu.bench.dcqcnmatrix PNG --ms 200 --stagger-ms 5` prints and draws it.
"""

from __future__ import annotations

import argparse
import sys

from emu.bench.dcqcnsim import SPAN, TOLERANCE, Run, simulate, steady
from traffic.dcqcn import PROFILES


def matrix(duration: float = 0.2, stagger: float = 5e-3, seed: int = 1,
           png: str | None = None) -> list[tuple[Run, dict]]:
    """2:1 and 3:1, both DCQCN profiles, both ECN presets: runs, their steady state, and
    (with `png`) one picture of every sender's share of C/N over time."""
    out = []
    for n in (2, 3):
        for prof in PROFILES:
            for qos in ("paper", "book"):
                run = simulate(n, profile=prof, qos=qos, duration=duration, stagger=stagger,
                               seed=seed)
                out.append((run, steady(run)))
    if png:
        _figure(out, png)
    return out


def _figure(out: list[tuple[Run, dict]], png: str) -> None:
    import matplotlib  # deferred: only the picture needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True, sharey="row")
    for ax, (run, w) in zip(axes.flat, out):
        ks = range(0, len(run.delivered) - SPAN + 1, SPAN)
        t = [(k + SPAN / 2) * run.sample * 1e3 for k in ks]
        for i in range(run.senders):
            ax.plot(t, [run.shares(k, SPAN)[i] for k in ks], label=f"sender {i + 1}")
        tol = TOLERANCE[run.senders]
        ax.axhspan(1 - tol, 1 + tol, color="0.9")
        conv = w["converged_at"]
        ax.set_title(f"{run.senders}:1, DCQCN {run.profile}, ECN {run.qos}\n"
                     f"within ±{tol:.0%} from " + ("never" if conv is None else
                                                 f"{conv * 1e3:.0f} ms"), fontsize=9)
        ax.set_ylim(0, run.senders + 0.1)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("model time (ms)")
    for ax in axes[:, 0]:
        ax.set_ylabel("rate / (C/N), 5 ms averages")
    axes[1][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)


def table(out: list[tuple[Run, dict]]) -> str:
    """The steady states beside the fixed points, as a Markdown table."""
    rows = ["| N | DCQCN | ECN | within tol. from | shares (last 25 %) | CNPs/s per sender | "
            "CE fraction | fluid p* (closed / exact) | mean depth | fluid q* (closed / exact) "
            "| deepest |", "|---" * 11 + "|"]
    for run, w in out:
        c, e = w["closed"], w["exact"]
        q = "/".join("past Kmax" if x.queue_bytes is None else f"{x.queue_bytes / 1e3:.1f}"
                     for x in (c, e))
        conv = w["converged_at"]
        rows.append(f"| {run.senders} | {run.profile} | {run.qos} | "
                    + ("never" if conv is None else f"{conv * 1e3:.0f} ms") + " | "
                    + " ".join(f"{x:.2f}" for x in w["shares"]) + " | "
                    + " ".join(f"{x:.0f}" for x in w["cnp_per_s"]) + " | "
                    + f"{w['mark_fraction']:.2e} | {c.p:.2e} / {e.p:.2e} | "
                    + f"{w['mean_depth'] / 1e3:.1f} KB | {q} KB | {run.max_depth / 1e3:.0f} KB |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the matrix, print the table, draw the rates into PNG."""
    ap = argparse.ArgumentParser(prog="python -m emu.bench.dcqcnmatrix", description=__doc__)
    ap.add_argument("png", help="the picture of every sender's share over time")
    ap.add_argument("--ms", type=float, default=200.0, help="model milliseconds")
    ap.add_argument("--stagger-ms", type=float, default=5.0, help="flow i starts at i x this")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    print(table(matrix(a.ms / 1e3, a.stagger_ms / 1e3, a.seed, a.png)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
