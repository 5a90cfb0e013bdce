"""`emu bench --datapath`: the fabric benches measured on the Python data path and on the
compiled one in the same invocation (issue 30: "every ratio measured side by side in one
run"), and the pure parts of their tables.

Which paths a bench runs (`modes`), in which order (`alternate`: python, fast, python,
fast ... per measurement, so whatever else loads the machine meets both alike), the
environment each measurement runs in (`use`: `EMU_DATAPATH`, which every process of a
fabric inherits, emucore.datapath), the ratio fast / python and the fidelity rule (a
figure from a run the guard judged lost is printed, marked, and never enters a ratio:
docs/PERFORMANCE.md's rule for model-time figures), and the tables' rendering.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from emucore import datapath

#: `emu bench --datapath`: one of emucore.datapath's modes, or both python and fast
CHOICES = ("python", "fast", "auto", "both")
#: the benches that measure each figure on both paths unless told otherwise
COMPARED = ("forward", "tdf", "speed", "fidelity")
#: the benches that build no fabric: --datapath does not apply (the Python pipeline alone)
NO_FABRIC = ("switch",)
BOTH = ("python", "fast")


def modes(what: str, choice: str | None) -> tuple[str, ...]:
    """The data paths bench `what` runs under `--datapath choice` (None: not given), in
    order. Compared benches: both unless one path is named. The other fabric benches:
    the one named (default $EMU_DATAPATH, else auto, as `emu run`); `both` is a
    ValueError. No-fabric benches: ()."""
    if choice is not None and choice not in CHOICES:
        raise ValueError(f"--datapath: must be one of {', '.join(CHOICES)}, got {choice!r}")
    if what in NO_FABRIC:
        return ()
    if what in COMPARED:
        return BOTH if choice in (None, "both") else (choice,)
    if choice == "both":
        raise ValueError(f"--datapath both: only {', '.join(COMPARED)} compare the data paths "
                         f"(bench {what} runs on one: python, fast or auto)")
    return (choice or datapath.mode(),)


def alternate(paths: Sequence[str], points: Iterable) -> list[tuple]:
    """(point, path) in measuring order: every path at each point before the next point."""
    return [(p, m) for p in points for m in paths]


@contextmanager
def use(mode: str) -> Iterator[str]:
    """`EMU_DATAPATH=mode` for what starts inside (agents, NICs, `emu run`), restored after."""
    old = os.environ.get(datapath.ENV)
    os.environ[datapath.ENV] = datapath.mode(mode)
    try:
        yield mode
    finally:
        if old is None:
            os.environ.pop(datapath.ENV, None)
        else:
            os.environ[datapath.ENV] = old


@dataclass(frozen=True)
class Figure:
    """One measured figure on one path; `kept_up` the guard's verdict on its run (None:
    not judged, e.g. an unshaped fabric); `value` None when the run gave none."""

    mode: str
    value: float | None
    kept_up: bool | None = None

    @property
    def usable(self) -> bool:
        """May enter a ratio: measured, and not from a run that lost fidelity."""
        return self.value is not None and self.kept_up is not False


def ratio(num: Figure | None, den: Figure | None) -> float | None:
    """num / den (fast / python), or None if either is missing or unusable, or den is 0."""
    if num is None or den is None or not (num.usable and den.usable) or not den.value:
        return None
    return num.value / den.value


def ratio_cell(fast: Figure | None, python: Figure | None, fmt: str = ".2f") -> str:
    """The ratio as a table prints it; why not, when there is none."""
    r = ratio(fast, python)
    if r is not None:
        return format(r, fmt)
    lost = [f.mode for f in (python, fast) if f is not None and f.kept_up is False]
    if lost:
        return f"- ({' and '.join(lost)} lost fidelity)"
    return "-"


def verdict(kept_up: bool | None) -> str:
    """A row's fidelity column."""
    return {True: "kept up", False: "LOST", None: "not judged"}[kept_up]


def legend(paths: Sequence[str]) -> list[str]:
    """The lines above a table naming what each path in its rows ran compiled or Python."""
    return [f"  {m}: {datapath.header(m)}" for m in paths]


def agents_path(counters: dict[str, dict]) -> str:
    """What the switch agents reported running (counters "datapath": c / python), e.g.
    "c", or "c+python" if they differ; "-" without agents."""
    return "+".join(sorted({c.get("datapath", "?") for c in counters.values()})) or "-"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A table: columns as wide as their widest cell, the first `left` left-aligned, the
    rest right-aligned, one space between."""
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return " ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(header), *(line(r) for r in rows)]


def tdfs(text: str) -> list[float]:
    """`--tdfs 1000,2000`: the TDFs in the order given; ValueError unless each is >= 1."""
    try:
        out = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--tdfs: comma-separated numbers, got {text!r}") from None
    if not out or any(not t >= 1 for t in out):
        raise ValueError(f"--tdfs: each TDF must be >= 1, got {text!r}")
    return out
