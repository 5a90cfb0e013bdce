"""The topology arguments of `emu show` and `emu run`: TOPOLOGY, --spines, --tdf."""

from __future__ import annotations

import argparse

from emu.run.options import RunOptions
from emucore.timedil import DEFAULT_TDF


def tdf_arg(text: str) -> float | str:
    """`--tdf` value: "auto" or a number > 0."""
    if text == "auto":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'auto' or a number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def topo_args(p: argparse.ArgumentParser, auto: bool = False) -> None:
    """TOPOLOGY, --spines and --tdf (`auto`: `emu run`'s, default auto)."""
    p.add_argument("topology", help="a preset (see `emu list`), rail{R}x{H}, or a YAML file")
    p.add_argument("--spines", type=int, default=None, metavar="N",
                   help="number of spines for generated rail fabrics (default 2)")
    if auto:
        p.add_argument("--tdf", type=tdf_arg, default=RunOptions.tdf,
                       help="time-dilation factor: lab rate = model rate / TDF. auto "
                            "(default): sized from the fabric, the workload's offered load "
                            "and a 0.3 s calibration of this machine, never below the "
                            "topology's TDF (its tdf:, else %g); a number is used as given. "
                            "Either way the fidelity guard judges whether the lab kept up "
                            "(exit 3 if not)" % DEFAULT_TDF)
    else:
        p.add_argument("--tdf", type=tdf_arg, default=None,
                       help="time-dilation factor: lab rate = model rate / TDF (default from "
                            "the topology, else %g)" % DEFAULT_TDF)
