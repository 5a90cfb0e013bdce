"""Wall time per phase of one `emu run` (issue 30: where a fabric's start-up goes, the
fabric tests build rail2x4 ~45 times a suite): summary.json's "phases" {name: lab seconds}
in the order they ran, which sum to the run's wall time from the TDF choice to the end of
teardown, and the closing line "Wall time: start-up X s, workload Y s, collect Z s,
teardown T s, plots P s" (the plots are drawn after summary.json is written: the line
only has them). `FabricNet`'s own steps (namespaces, configure, agents ...) are kept
apart in "phases_detail" (emu.realise.net.FabricNet.steps_s).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

#: phase -> the group of the closing line; a name not here is a programming error
GROUP = {"calibrate": "start-up",     # --tdf auto's calibration (emu.run.autotdf)
         "build": "start-up",         # namespaces, links, kernels, switch agents up
         "lldp_dcbx": "start-up",     # until every fabric port negotiated PFC
         "observe": "start-up",       # captures and the sampler started
         "reach": "start-up",         # every GPU pair pinged
         "nics": "start-up",          # the workload's NIC processes up
         "workload": "workload",
         "collect": "collect",        # sampler stopped, last counters, captures closed
         "teardown": "teardown",      # processes stopped, namespaces removed
         "plots": "plots"}            # the run's plots drawn (emu.observe.plots)
GROUPS = ("start-up", "workload", "collect", "teardown", "plots")


class Phases:
    """Lab seconds per phase, in the order the phases first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        #: a step's own parts (e.g. "build": {"namespaces": s, ...}), where it keeps them
        self.detail: dict[str, dict[str, float]] = {}

    def add(self, name: str, seconds: float) -> None:
        """Add `seconds` to phase `name` (KeyError for a phase GROUP does not know)."""
        GROUP[name]  # noqa: B018 (the check)
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time the block as phase `name` (also when it raises)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0)

    def groups(self) -> dict[str, float]:
        """Seconds per group of GROUPS (0 for a group none of whose phases ran)."""
        out = dict.fromkeys(GROUPS, 0.0)
        for name, s in self.seconds.items():
            out[GROUP[name]] += s
        return out

    def to_dict(self) -> dict[str, float]:
        """summary.json's "phases": seconds per phase, to the millisecond."""
        return {k: round(s, 3) for k, s in self.seconds.items()}

    def detail_dict(self) -> dict[str, dict[str, float]]:
        """summary.json's "phases_detail"."""
        return {k: {n: round(s, 3) for n, s in d.items()} for k, d in self.detail.items()}

    def line(self) -> str:
        """The closing line of a run."""
        g = self.groups()
        return "Wall time: " + ", ".join(f"{name} {g[name]:.1f} s" for name in GROUPS)
