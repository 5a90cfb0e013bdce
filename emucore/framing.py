"""Which RoCEv2 framing the NIC's data path uses: the C one or the Python reference (issue 30).

`EMU_DATAPATH` chooses (emucore.datapath), read once at import: `auto` (the default) and
`fast` are `emucore.wire.fast` (C, emucore/wire/fast/roce.c: it implements every frame the
NIC sends, so auto has nothing to refuse), `python` is `emucore.wire.templates`
(the reference the C is held byte-equal to; docs/DATAPATH.md "Keeping Python the
reference"). Nothing is chosen silently: with `fast` and the C module not built, or
built from older sources, importing this module is an ImportError that says to run
./setup.sh or to set EMU_DATAPATH=python; any other value is a ValueError. `DATAPATH`
names the choice; `emu run --datapath` sets the variable for the NIC processes.
"""

from __future__ import annotations

from types import ModuleType

from emucore import datapath
from emucore.wire import templates

__all__ = ["DATAPATHS", "ENV", "DATAPATH", "select", "FrameTemplate", "parse", "malformed"]

DATAPATHS = datapath.MODES
ENV = datapath.ENV
_FAST = "emucore.wire.fast._roce"


def select(name: str | None = None) -> ModuleType:
    """The framing module of data path `name` (default: $EMU_DATAPATH, else auto)."""
    if datapath.mode(name) == "python":
        return templates
    datapath.require_built(_FAST)
    from emucore.wire import fast  # only when chosen: the Python path runs unbuilt
    return fast


_chosen = select()
DATAPATH = "python" if _chosen is templates else "fast"
FrameTemplate = _chosen.FrameTemplate
parse = _chosen.parse
malformed = _chosen.malformed
