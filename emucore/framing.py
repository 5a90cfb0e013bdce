"""Which RoCEv2 framing the NIC's data path uses: the C one or the Python reference (issue 30).

`EMU_DATAPATH` chooses, read once at import: `fast` (the default) is
`emucore.wire.fast` (C, emucore/wire/fast/roce.c), `python` is `emucore.wire.templates`
(the reference the C is held byte-equal to; docs/DATAPATH.md "Keeping Python the
reference"). Nothing is chosen silently: with `fast` and the C module not built, or
built from older sources, importing this module is an ImportError that says to run
./setup.sh or to set EMU_DATAPATH=python; any other value is a ValueError. `DATAPATH`
names the choice for run headers and summaries (a later `--datapath` flag sets the
variable for the NIC processes).
"""

from __future__ import annotations

import os
from types import ModuleType

from emucore import cbuild
from emucore.wire import templates

__all__ = ["DATAPATHS", "ENV", "DATAPATH", "select", "FrameTemplate", "parse", "malformed"]

DATAPATHS = ("fast", "python")
ENV = "EMU_DATAPATH"
_FAST = "emucore.wire.fast._roce"


def select(name: str | None = None) -> ModuleType:
    """The framing module of data path `name` (default: $EMU_DATAPATH, else fast)."""
    name = name if name is not None else os.environ.get(ENV, "fast")
    if name == "python":
        return templates
    if name != "fast":
        raise ValueError(f"{ENV}={name!r}: must be one of {', '.join(DATAPATHS)}")
    from emucore.wire import fast  # only when chosen: the Python path runs unbuilt
    if not cbuild.is_current(_FAST):
        raise ImportError(f"{_FAST} is not built from today's sources (or gcc / python3-dev, "
                          f"which check that, are missing): run ./setup.sh, or choose the "
                          f"Python data path with {ENV}=python")
    return fast


_chosen = select()
DATAPATH = "python" if _chosen is templates else "fast"
FrameTemplate = _chosen.FrameTemplate
parse = _chosen.parse
malformed = _chosen.malformed
