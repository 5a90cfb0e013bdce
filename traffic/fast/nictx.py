"""Which transmit loop the NIC runs: the C of traffic/fast/nictx.c or the Python reference
(issue 30).

traffic/fast/nictx.c, built by emucore/cbuild.py as `traffic.fast._nictx`, mirrors
traffic/nic/datapath.py's `Nic.transmit` stage by stage under the same name: pauses, the
round robin, the pacer and pause checks, the next packet (the C `next_write` of
traffic.fast.rc where FastRequester would call it), the frame, the send, the fidelity
meter, the QP's counters, DCQCN and the two paces, with the same float operations in the
same order (book ch.11, docs/ARCHITECTURE.md "Time: model world and lab world").
A call it cannot do exactly answers NotImplemented having changed nothing, and the
Python runs. tests/unit/test_fast_nictx.py holds the two equal, also under ASan + UBSan.

`EMU_DATAPATH` chooses (emucore.datapath), read once at import: `TRANSMIT` is the C
function under auto and fast, None under python; with auto or fast and the C not built
from today's sources, importing this module is emucore.datapath.NotBuilt.
"""

from __future__ import annotations

from typing import Callable

from emucore import datapath

__all__ = ["MODULE", "transmit", "TRANSMIT"]

MODULE = "traffic.fast._nictx"


def transmit(name: str | None = None) -> Callable | None:
    """The C Nic.transmit on data path `name` (default $EMU_DATAPATH); None: Python."""
    c = datapath.compiled(MODULE, name)
    return c and c.transmit


TRANSMIT = transmit()
