"""Which loop and loop iteration the NIC runs: the C of traffic/fast/nicstep.c or the Python
reference (issue 30).

traffic/fast/nicstep.c, built by emucore/cbuild.py as `traffic.fast._nicstep`, mirrors
traffic/nic/datapath.py's `Nic.step` stage by stage under the same names: receive (the C of
traffic.fast.nicrx called directly, C to C), the RC timers (their `on_timer` stays Python),
transmit (traffic.fast.nictx's C likewise), the CQ waiters' notify, and the timeout to the
next wake-up, with the Python's own number protocol and comparisons (exact by construction).
A call it cannot do exactly answers NotImplemented having changed nothing, and the Python
runs. tests/unit/test_fast_nicstep.py holds the two equal, also under ASan + UBSan.

The same module's `run` mirrors `Nic.run`, the loop around the step: with the lock, the
monotonic clock, the step (the C one directly), the wake-up count, `next_wake` and select
with the GIL released, until `running` is false. It answers NotImplemented before its first
iteration when the loop would not be the Python's exactly (no raw socket, a patched select,
clock or next_wake, a lock that is not a threading.Lock); tests/unit/test_fast_nicrun.py.

`EMU_DATAPATH` chooses (emucore.datapath), read once at import: `STEP` and `RUN` are the
C functions under auto and fast, None under python; with auto or fast and the C not built from today's
sources, importing this module is emucore.datapath.NotBuilt.
"""

from __future__ import annotations

from typing import Callable

from emucore import datapath

__all__ = ["MODULE", "step", "STEP", "run", "RUN"]

MODULE = "traffic.fast._nicstep"


def step(name: str | None = None) -> Callable | None:
    """The C Nic.step on data path `name` (default $EMU_DATAPATH); None: Python."""
    c = datapath.compiled(MODULE, name)
    return c and c.step


def run(name: str | None = None) -> Callable | None:
    """The C Nic.run on data path `name` (default $EMU_DATAPATH); None: Python."""
    c = datapath.compiled(MODULE, name)
    return c and c.run


STEP = step()
RUN = run()
