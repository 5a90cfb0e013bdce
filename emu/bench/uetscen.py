"""The scenarios of `emu bench uet` and the arithmetic of its table (issue 32; pure).

A scenarios file (`emu/bench/data/uet-scenarios.yaml`, its header says each field) lists
what the UEC's simulator uet-htsim ran - link rate, flow size, senders, payload,
trimming, buffer, ECN thresholds, load balancing - and what it measured (flow completion
times min / median / max, NACKs, retransmissions); each scenario says how emu runs it
(`emu: {ev: ...}`) or why emu cannot (`not_expressible`). `parse` checks every field and
an error names it (`scenarios[3].buffer: ...`); `fct_stats`, `ratios` and `row` are the
table's maths; `format_row` its text. Nothing here builds a namespace.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from emu.lab.fields import need
from emucore.timedil import parse_rate, parse_size
from traffic.uet.uetconfig import EV_MODES

DEFAULT_FILE = Path(__file__).parent / "data" / "uet-scenarios.yaml"
BAND = (0.8, 1.25)  #: emu / uet-htsim within this counts as agreeing (issue 32's aim)
KEYS = {"id", "title", "link", "size", "senders", "payload", "trimming", "buffer", "ecn",
        "lb", "emu", "not_expressible", "htsim"}
HTSIM_KEYS = {"fct_us", "per_flow_fct_us", "nacks", "rtx", "max_queue_bytes", "command"}


@dataclass(frozen=True)
class Scenario:
    """One scenario: as uet-htsim ran it, what it measured, how emu runs it."""

    id: str
    title: str
    link_bps: float
    size: int
    senders: int
    payload: int
    trimming: bool
    buffer: int
    ecn: tuple[int, int]
    lb: str
    htsim_fct_us: tuple[float, float, float]  # min, median, max
    htsim_nacks: int | None = None
    htsim_rtx: int | None = None
    htsim_max_queue: int | None = None
    command: str = ""
    ev: str | None = None  # emu's entropy mode; None: not expressible
    note: str = ""  # why that mode (a substitution), or why not expressible

    @property
    def expressible(self) -> bool:
        """Whether emu runs this scenario (else `note` says why not)."""
        return self.ev is not None


def _int(d: dict, key: str, where: str, lo: int = 1) -> int:
    v = d.get(key)
    try:
        n = parse_size(v) if isinstance(v, str) else v
    except ValueError as exc:
        raise ValueError(f"{where}.{key}: {exc}") from None
    need(isinstance(n, int) and not isinstance(n, bool) and n >= lo, f"{where}.{key}",
         f"an integer >= {lo}, got {v!r}")
    return n


def _opt_int(d: dict, key: str, where: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, where, 0)


def _htsim(h: Any, where: str) -> dict:
    need(isinstance(h, dict), where, f"a mapping, got {h!r}")
    for k in h:
        need(k in HTSIM_KEYS, f"{where}.{k}", f"unknown field (known: {', '.join(sorted(HTSIM_KEYS))})")
    f = h.get("fct_us")
    need(isinstance(f, list) and len(f) == 3
         and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in f)
         and f[0] <= f[1] <= f[2], f"{where}.fct_us",
         f"[min, median, max] microseconds, > 0 and ascending, got {f!r}")
    return {"htsim_fct_us": tuple(float(x) for x in f), "htsim_nacks": _opt_int(h, "nacks", where),
            "htsim_rtx": _opt_int(h, "rtx", where),
            "htsim_max_queue": _opt_int(h, "max_queue_bytes", where),
            "command": str(h.get("command", ""))}


def scenario_of(d: Any, where: str) -> Scenario:
    """One entry of `scenarios:`, every field checked."""
    need(isinstance(d, dict), where, f"a mapping, got {d!r}")
    for k in d:
        need(k in KEYS, f"{where}.{k}", f"unknown field (known: {', '.join(sorted(KEYS))})")
    for k in ("id", "title", "lb"):
        need(isinstance(d.get(k), str) and d[k].strip(), f"{where}.{k}", "a non-empty string")
    try:
        rate = parse_rate(d.get("link"))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}.link: a rate such as 400G ({exc})") from None
    need(rate > 0, f"{where}.link", f"must be > 0, got {d.get('link')!r}")
    need(isinstance(d.get("trimming"), bool), f"{where}.trimming", f"true or false, got {d.get('trimming')!r}")
    ecn = d.get("ecn")
    need(isinstance(ecn, list) and len(ecn) == 2, f"{where}.ecn", f"[low, high] bytes, got {ecn!r}")
    lo, hi = (_int({"ecn": x}, "ecn", where, 0) for x in ecn)
    buffer = _int(d, "buffer", where)
    need(lo < hi <= buffer, f"{where}.ecn", f"low < high <= buffer ({buffer}), got {ecn!r}")
    has_emu, why = "emu" in d, d.get("not_expressible")
    need(has_emu != (why is not None), f"{where}.emu",
         "exactly one of emu: {ev: ...} and not_expressible: WHY")
    ev, note = None, ""
    if has_emu:
        e = d["emu"]
        need(isinstance(e, dict) and set(e) <= {"ev", "note"}, f"{where}.emu",
             f"a mapping {{ev, note}}, got {e!r}")
        ev = e.get("ev")
        need(ev in EV_MODES, f"{where}.emu.ev", f"one of {', '.join(EV_MODES)}, got {ev!r}")
        note = str(e.get("note", ""))
    else:
        need(isinstance(why, str) and why.strip(), f"{where}.not_expressible", "a non-empty reason")
        note = why.strip()
    need("htsim" in d, f"{where}.htsim", "missing")
    return Scenario(d["id"], d["title"], rate, _int(d, "size", where), _int(d, "senders", where),
                    _int(d, "payload", where), d["trimming"], buffer, (lo, hi), d["lb"],
                    ev=ev, note=note, **_htsim(d["htsim"], f"{where}.htsim"))


def parse(data: Any) -> list[Scenario]:
    """A scenarios mapping ({scenarios: [...]}) -> Scenarios; ids unique."""
    need(isinstance(data, dict), "scenarios file", "a mapping with scenarios: [...]")
    items = data.get("scenarios")
    need(isinstance(items, list) and items, "scenarios", "a non-empty list")
    out = [scenario_of(d, f"scenarios[{i}]") for i, d in enumerate(items)]
    seen: set[str] = set()
    for i, s in enumerate(out):
        need(s.id not in seen, f"scenarios[{i}].id", f"{s.id!r} given twice")
        seen.add(s.id)
    return out


def load(path: str | Path = DEFAULT_FILE) -> list[Scenario]:
    """The scenarios of a YAML file; errors name the file and the field."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--scenarios: no such file {str(p)!r}")
    try:
        return parse(yaml.safe_load(p.read_text()))
    except yaml.YAMLError as exc:
        raise ValueError(f"{p.name}: not valid YAML: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{p.name}: {exc}") from None


def fct_stats(fcts: list[float]) -> tuple[float, float, float] | None:
    """(min, median, max) of per-flow completion times; None without any."""
    if not fcts:
        return None
    return min(fcts), statistics.median(fcts), max(fcts)


def ratios(emu: tuple[float, float, float], htsim: tuple[float, float, float]) -> tuple[float, float]:
    """emu / uet-htsim of the median and of the max (the last flow's completion)."""
    return emu[1] / htsim[1], emu[2] / htsim[2]


def in_band(rs: tuple[float, ...], band: tuple[float, float] = BAND) -> bool:
    """Whether every ratio lies within the band (inclusive)."""
    return all(band[0] <= r <= band[1] for r in rs)


def row(s: Scenario, fcts: list[float] | None, kept_up: bool | None) -> dict:
    """One table row: uet-htsim's FCTs, emu's, the ratios and whether they count (a run
    counts only when its fidelity guard said it kept up) and agree."""
    stats = fct_stats(fcts or [])
    rs = ratios(stats, s.htsim_fct_us) if stats and len(fcts or []) == s.senders else None
    return {"id": s.id, "htsim": s.htsim_fct_us, "emu": stats, "ratios": rs,
            "counts": rs is not None and kept_up is True,
            "in_band": rs is not None and kept_up is True and in_band(rs)}


HEADER = (f"{'scenario':<32}{'lb (emu ev)':<22}{'trim':>5}  {'uet-htsim us min/med/max':<26}"
          f"{'emu us min/med/max':<26}{'med x':>6}{'max x':>6}  verdict")


def _triple(t: tuple[float, float, float] | None) -> str:
    return "-" if t is None else "/".join(f"{x:.1f}" for x in t)


def format_row(s: Scenario, r: dict | None, guard_line: str = "") -> str:
    """The table's line for a scenario (`r` from `row`; None: not run)."""
    lb = f"{s.lb} ({s.ev})" if s.ev else s.lb
    head = f"{s.id:<32}{lb:<22}{('on' if s.trimming else 'off'):>5}  {_triple(s.htsim_fct_us):<26}"
    if not s.expressible:
        return f"{head}not expressible: {s.note}"
    if r is None:
        return f"{head}{'not run':<26}"
    rs = r["ratios"]
    mx = f"{rs[0]:>6.2f}{rs[1]:>6.2f}" if rs else f"{'-':>6}{'-':>6}"
    verdict = ("within 0.8-1.25" if r["in_band"] else "OUTSIDE 0.8-1.25" if r["counts"]
               else "does not count")
    return f"{head}{_triple(r['emu']):<26}{mx}  {verdict}" + (f"; {guard_line}" if guard_line else "")
