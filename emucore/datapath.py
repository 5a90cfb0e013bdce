"""Which data path a run's processes use: the compiled one (C, issue 30) or the Python
reference (docs/DATAPATH.md "Keeping Python the reference").

`emu run --datapath` / `emu lab run --datapath` set `EMU_DATAPATH` for every process of
the run (switch agents, NICs, and the parts on other servers), which read it here:

* `python`: the Python reference everywhere;
* `fast`: the compiled path for every stage that has one; a process whose configuration
  the compiled path does not implement refuses to start, naming the field;
* `auto` (the default): the compiled path wherever the configuration is supported, the
  Python path elsewhere, and the process says which it took: a switch agent whose
  configuration the C pipeline does not implement (trimming, LLR, CBFC, flowlet or spray
  load balancing) runs the Python agent, and the run's summary.json names each agent's
  path (`data_path.agents`). Its `counters` and `show` answers and its event log are the
  Python agent's, record for record (tests/unit/test_fastagent.py,
  tests/unit/test_fast_pipeline.py).

`fast` and `auto` need the C modules built from today's sources (`./setup.sh` builds
them, emucore/cbuild.py); a missing build is an error that says so, never a silent
fallback to Python. `COMPILED` lists what the compiled path covers today under `auto`
and `fast`, `FAST_ONLY` what only `fast` runs compiled (nothing, today).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from emucore import cbuild

ENV = "EMU_DATAPATH"
MODES = ("auto", "python", "fast")
DEFAULT = "auto"
#: the stages with a compiled path, as a run header names them
COMPILED = ("switch agents (per-frame pipeline and poll loop)",
            "NIC RoCEv2 framing (build, parse, ICRC)",
            "NIC DCQCN (reaction and notification points)",
            "NIC RC WRITE packets (the requester's next WRITE packet and in-order ACK, the "
            "responder's in-order WRITE and SEND packets)",
            "NIC transmit loop (round robin, pacer, PFC pause checks, per-frame accounting)",
            "NIC receive loop (reads, arrival stamps to the fidelity meter; data, ACK and CNP "
            "frames of a known QP: CE -> CNP, the RC endpoint's C, its replies sent)",
            "NIC loop (the lock, the clock, the wait in select without the GIL; each iteration: "
            "receive and transmit called C to C, the RC timers' checks, the CQ waiters' notify, "
            "the next wake-up)")
#: the stages compiled only under `fast` (switch_agent.fastagent)
FAST_ONLY: tuple[str, ...] = ()
#: the stages that run Python on every path, for now
PYTHON_ONLY = ("RC transport's new WRs, SEND packets sent, NAK/RNR NAK, stale ACKs, timers, "
               "go-back-N and write-only spraying", "NIC frames other than data, ACK and CNP "
               "of a known QP (PFC, malformed, bad checksum, unknown QP)", "UET")


class NotBuilt(ImportError):
    """The compiled path was asked for and is not built from today's sources."""


def mode(value: str | None = None) -> str:
    """`value`, else $EMU_DATAPATH, else auto; ValueError naming the variable if unknown."""
    m = value if value is not None else (os.environ.get(ENV) or DEFAULT)
    if m not in MODES:
        raise ValueError(f"{ENV}: must be one of {', '.join(MODES)}, got {m!r}")
    return m


def stale() -> list[str]:
    """The compiled modules not built from today's sources."""
    return [n for n in cbuild.EXTENSIONS if not cbuild.is_current(n)]


def require_built(module: str | None = None) -> None:
    """NotBuilt unless `module` (else every compiled module) is built and current."""
    missing = [module] if module and not cbuild.is_current(module) else ([] if module else stale())
    if missing:
        raise NotBuilt(f"the compiled data path ({', '.join(missing)}) is not built from "
                       f"today's sources (or gcc / python3-dev, which check that, are "
                       f"missing): run ./setup.sh, or choose the Python data path "
                       f"(--datapath python, {ENV}=python)")


def compiled(module: str, name: str | None = None) -> ModuleType | None:
    """The C extension `module` when data path `name` (default $EMU_DATAPATH) chooses C, or
    None (Python). Imported only when chosen, so the Python path runs unbuilt; chosen and
    not built from today's sources: NotBuilt."""
    if mode(name) == "python":
        return None
    require_built(module)
    return importlib.import_module(module)


def describe(m: str) -> dict:
    """summary.json's "data_path": the mode, and which stages ran compiled or Python."""
    compiled = ([] if m == "python" else list(COMPILED)) + (list(FAST_ONLY) if m == "fast" else [])
    python = list(PYTHON_ONLY) + (list(COMPILED) if m == "python" else []) + \
        ([] if m == "fast" else list(FAST_ONLY))
    return {"mode": m, "compiled": compiled, "python": python}


def header(m: str) -> str:
    """The run header's line."""
    d = describe(m)
    if not d["compiled"]:
        return f"Data path: {m} - everything in Python (the reference)"
    return (f"Data path: {m} - compiled (C): {'; '.join(d['compiled'])}; "
            f"Python: {', '.join(d['python'])}")
