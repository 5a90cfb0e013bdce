"""Where a check's bound comes from, and the outcome of a check and of a lab (pure;
tests/unit/test_lab_verdict.py; docs/LABS.md "Checks" and "Verdicts").

Every judged check states its bound's `source`: `book` (a chapter, figure or example of
the book), `catalogue` (the lab catalogue's figure, tagged B, D or P - a proposal made
before any run), `theory` (a formula: C/N fair share, 2 x BDP, ...) or `spec` (a
standard: IBTA RoCEv2, IEEE 802.1Qbb, Ultra Ethernet). Written "book: ch.11 Fig 11-7" or
{kind: book, cite: "ch.11 Fig 11-7"}. A bound is never fitted to a measurement: a source
that says it was (calibrated, measured, from the first run) is refused - such a figure is
shown (`expect: any`), not judged.

A check may also say where emu knowingly differs from the book because the book
simplifies: `differs: {expect: BOUND, why: TEXT, source: SOURCE}`. A value that misses
the book's bound but meets that one is the outcome `differs` - neither pass nor fail -
printed with its reason and both bounds. Outcomes: pass, differs, fail, shown.

A `differs` may instead (or as well) name the book's premise it rests on: `when: {check:
"variant.check", expect: BOUND}` - another per-variant check whose measured value shows the
premise does not hold here (L12.2: no flowlet moved, so the book's "after adaptive routing
engages" has nothing to compare). While the premise check meets `when` the book's
question is not asked: the outcome is `differs` whatever the value (a value that happens
to meet the book's bound proves nothing), or fail if it misses `expect` (then optional:
any measured value). When the premise holds, the book's bound alone judges it: pass or
fail. Premises are settled once every variant has run.
"""

from __future__ import annotations

import re
from typing import Any

from emu.lab.expect import parse_expect
from emu.lab.fields import need

SOURCE_KINDS = ("book", "catalogue", "theory", "spec")
OUTCOMES = ("pass", "differs", "fail", "shown")
#: words that say a bound came from a run rather than from a source
FITTED_RE = re.compile(r"calibrat|\bfitted\b|\bmeasured\b|\bfirst runs?\b|\bfrom (?:the|that|"
                       r"this|its|a) runs?\b|\bset from\b", re.I)
DIFFERS_KEYS = {"expect", "why", "source", "when"}
WHEN_KEYS = {"check", "expect"}


def _fitted(where: str, text: str) -> None:
    m = FITTED_RE.search(text)
    need(m is None, where, f"{text!r} says the bound came from a run ({m.group(0) if m else ''!r})"
         " - a bound is never fitted to a measurement: cite the book, the catalogue, a "
         "theory or a spec, or show the figure without judging it (expect: any)")


def source_of(raw: Any, where: str, name: str = "") -> dict | None:
    """`source:` -> {"kind", "cite"}; None if not given. ValueError naming `where`."""
    if raw is None:
        return None
    hint = (f" ({name!r})" if name else "")
    kinds = " | ".join(SOURCE_KINDS)
    if isinstance(raw, str):
        kind, sep, cite = raw.partition(":")
        need(bool(sep) and kind.strip() in SOURCE_KINDS, where,
             f"{raw!r}{hint}: 'KIND: citation' with KIND one of {kinds} "
             "(e.g. 'book: ch.11 Fig 11-7', 'theory: C/N fair share')")
        raw = {"kind": kind.strip(), "cite": cite.strip()}
    need(isinstance(raw, dict) and set(raw) <= {"kind", "cite"}, where,
         f"'KIND: citation' or {{kind, cite}}{hint}, got {raw!r}")
    need(raw.get("kind") in SOURCE_KINDS, f"{where}.kind", f"one of {kinds}{hint}, got "
         f"{raw.get('kind')!r} (a bound is never set from a run)")
    cite = raw.get("cite")
    need(isinstance(cite, str) and cite.strip() != "", f"{where}.cite",
         f"the citation{hint}: a chapter and figure, a catalogue id, a formula, a spec")
    _fitted(f"{where}.cite", cite)
    return {"kind": raw["kind"], "cite": cite.strip()}


def shown(check: dict) -> bool:
    """A check only shows its value (expect: any; an order with expect: any)."""
    return str(check.get("expect", "in order" if check.get("kind") == "order" else "any")
               ).strip().lower() == "any"


def check_source(c: dict, where: str) -> dict:
    """The source and `differs` of one check (shape checked): {"source", "differs"}."""
    name = c.get("name", "")
    src = source_of(c.get("source"), f"{where}.source", name)
    need(src is not None or shown(c), f"{where}.source",
         f"missing for the judged check {name!r}: every bound states where it comes from "
         f"({' | '.join(SOURCE_KINDS)}: citation); a figure without one is shown, not "
         "judged (expect: any)")
    if "note" in c:
        need(isinstance(c["note"], str), f"{where}.note", "text")
    d = c.get("differs")
    if d is None:
        return {"source": src, "differs": None}
    need(isinstance(d, dict), f"{where}.differs", "a mapping {expect, why, source}")
    for k in d:
        need(k in DIFFERS_KEYS, f"{where}.differs.{k}",
             f"unknown field (known: {', '.join(sorted(DIFFERS_KEYS))})")
    need(not shown(c), f"{where}.differs", "a shown check (expect: any) cannot differ")
    need(isinstance(d.get("why"), str) and d["why"].strip() != "", f"{where}.differs.why",
         "why emu differs from the book (what the book simplifies)")
    when = _when(d.get("when"), f"{where}.differs.when")
    need("expect" in d or when is not None, f"{where}.differs.expect",
         "emu's own bound where the book simplifies (or `when`: the premise that fails here)")
    try:
        parse_expect(d.get("expect", "any"))
    except ValueError as exc:
        raise ValueError(f"{where}.differs.expect: {exc}") from None
    dsrc = source_of(d.get("source"), f"{where}.differs.source", name)
    need(dsrc is not None, f"{where}.differs.source", "where emu's bound comes from")
    return {"source": src, "differs": {"expect": d.get("expect", "any"), "why": d["why"].strip(),
                                       "source": dsrc, **({"when": when} if when else {})}}


def _when(w: Any, where: str) -> dict | None:
    """`differs.when` -> {"check": "variant.check", "expect"} (shape checked; that the
    check exists is emu.lab.schema's to say)."""
    if w is None:
        return None
    need(isinstance(w, dict) and set(w) == WHEN_KEYS, where,
         f"{{check: VARIANT.CHECK, expect: BOUND}} - the premise check, got {w!r}")
    need(isinstance(w["check"], str) and "." in w["check"], f"{where}.check",
         f"'variant.check name' of a per-variant check, got {w['check']!r}")
    try:
        parse_expect(w["expect"])
    except ValueError as exc:
        raise ValueError(f"{where}.expect: {exc}") from None
    return {"check": w["check"], "expect": w["expect"]}


_UNKNOWN = object()


def premise_absent(when: dict, values: dict | None) -> tuple[bool, str]:
    """Whether the premise check's measured value (in `values`, "variant.check" ->
    measured) meets `when.expect` - the book's premise does not hold here; the text."""
    pred, text = parse_expect(when["expect"])
    got = (values or {}).get(when["check"], _UNKNOWN)
    return (got is not _UNKNOWN and pred(got)), f"not asked: {when['check']} {text}"


def cite_text(src: dict | None) -> str:
    """'book: ch.11 Fig 11-7' (empty when there is none)."""
    return f"{src['kind']}: {src['cite']}" if src else ""


def outcome(ok: bool, measured: Any, check: dict,
            values: dict | None = None) -> tuple[str, str]:
    """The outcome of a judged value - pass, differs, fail or shown - and emu's bound's
    text when it differs (else ""). `values` ("variant.check" -> measured) settle a
    `differs.when` premise; without them such a check is judged by the book's bound."""
    if shown(check):  # judged True unless it could not be measured at all
        return ("shown" if ok else "fail"), ""
    d = check.get("differs") or {}
    if d.get("when") and not _not_measured(measured) and premise_absent(d["when"], values)[0]:
        pred, _ = parse_expect(d["expect"])  # the book's question is not asked here
        return ("differs", differs_text(d)) if pred(measured) else ("fail", "")
    if ok:
        return "pass", ""
    if d and not d.get("when"):
        pred, text = parse_expect(d["expect"])
        if pred(measured):
            return "differs", text
    return "fail", ""


def differs_text(d: dict) -> str:
    """emu's bound of a `differs`, as printed: its expect, and its premise if it has one."""
    if not d.get("when"):
        return str(d["expect"])
    text = parse_expect(d["expect"])[1]
    wtext = premise_absent(d["when"], None)[1]
    return wtext if text == "(shown)" else f"{text}, {wtext}"


def _not_measured(m: Any) -> bool:
    """A check that could not measure at all (runner: 'error: ...', 'not measured: ...')."""
    return isinstance(m, str) and m.startswith(("error:", "not measured:"))


def lab_verdict(outcomes: list[str], kept_up: bool | None) -> str:
    """A lab's verdict: fail if a check failed or the lab fell behind the model; differs
    if a check differs from the book (for its stated reason); else pass."""
    if not outcomes or "fail" in outcomes or kept_up is not True:
        return "fail"
    return "differs" if "differs" in outcomes else "pass"


def tally(outcomes: list[str]) -> dict:
    """How many checks had each outcome."""
    return {k: outcomes.count(k) for k in OUTCOMES}
