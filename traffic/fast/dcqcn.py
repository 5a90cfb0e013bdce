"""Which DCQCN the NIC runs: the C of traffic/fast/dcqcn.c or the Python reference (issue 30).

traffic/fast/dcqcn.c, built by emucore/cbuild.py as `traffic.fast._dcqcn`, mirrors
traffic.dcqcn's `ReactionPoint` and `NotificationPoint` under the same names and with
the same float operations in the same order (Zhu et al., SIGCOMM 2015; book ch.11;
docs/DCQCN_PARAMS.md), so its rates, alpha and timers are bit-identical:
tests/unit/test_fast_dcqcn.py holds them so, also under ASan + UBSan. `DcqcnProfile`
stays the Python's (the C reads its fields once per reaction point).

`EMU_DATAPATH` chooses (emucore.datapath), read once at import: `auto` and `fast` are the
C (it implements every profile, so auto refuses nothing), `python` the reference. With
auto or fast and the C not built from today's sources, importing this module is
emucore.datapath.NotBuilt, which says to run ./setup.sh; nothing falls back silently.
"""

from __future__ import annotations

from emucore import datapath
from traffic import dcqcn

__all__ = ["MODULE", "DATAPATH", "classes", "NotificationPoint", "ReactionPoint"]

MODULE = "traffic.fast._dcqcn"


def classes(name: str | None = None) -> tuple[type, type]:
    """(NotificationPoint, ReactionPoint) of data path `name` (default $EMU_DATAPATH)."""
    c = datapath.compiled(MODULE, name) or dcqcn
    return c.NotificationPoint, c.ReactionPoint


NotificationPoint, ReactionPoint = classes()
DATAPATH = "python" if ReactionPoint is dcqcn.ReactionPoint else "fast"
