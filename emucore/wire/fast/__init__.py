"""RoCEv2 frames in C (issue 30): the NIC's per-frame build and parse, byte for byte the Python's.

`emucore/wire/fast/roce.c`, built by `python -m emucore.cbuild` (./setup.sh runs it) as
`_roce`, mirrors under the same names `emucore.wire.templates` (`FrameTemplate.build`,
`parse`, `malformed`) and `emucore.wire.roce` (`icrc_reference`, `icrc_of`); formats from
the InfiniBand Architecture Specification Vol. 1 ch.9 and annex A17 (the ICRC,
A17.3.3), as the Python modules. The Python stays the reference:
tests/unit/test_fast_roce.py holds the two byte-equal, also under ASan + UBSan.

Importing this package when `_roce` is not built is an ImportError that says to run
./setup.sh; nothing falls back to Python here. Which path the NIC uses, and the check
that the build is today's, is `emucore.framing`.
"""

from __future__ import annotations

import importlib.util

from emucore.wire import templates as _py

MODULE = "emucore.wire.fast._roce"

if importlib.util.find_spec(MODULE) is None:
    raise ImportError(f"{MODULE} is not built: run ./setup.sh (or python -m emucore.cbuild), "
                      "or choose the Python data path with EMU_DATAPATH=python")
from emucore.wire.fast import _roce  # noqa: E402 - only once it is known to be built

__all__ = ["FrameTemplate", "parse", "malformed", "icrc_reference", "icrc_of", "CLMUL"]

parse = _roce.parse
malformed = _roce.malformed
icrc_reference = _roce.icrc_reference
icrc_of = _roce.icrc_of
CLMUL = bool(_roce.CLMUL)  #: the ICRC folds with PCLMULQDQ (else slicing-by-8 tables)


class FrameTemplate(_py.FrameTemplate):
    """`emucore.wire.templates.FrameTemplate` whose `build` (and so `build_cnp`) runs in C."""

    __slots__ = ()


FrameTemplate.build = _roce.method_of(FrameTemplate)
