"""The expectation of a lab check (`expect:`, docs/LABS.md "Checks") as a predicate on
the measured value (pure; tests/unit/test_lab_checks.py).

`expect` is "OP value" (>=, <=, >, <, ==, !=), "a..b", "x ± y" or "x ± y%", "none",
"any" (informational; an order with "any" is shown, not judged), true/false, "is TEXT"
(the text), a mapping of fields or a list (equal). Values may carry units: KB/MB/B
(bytes), Gbps/Mbps (bit/s), ns/us/ms/s (microseconds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from emucore.timedil import parse_duration, parse_rate, parse_size

OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
       "<": lambda a, b: a < b, "==": lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9),
       "!=": lambda a, b: not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)}
EXPECT_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")
RANGE_RE = re.compile(r"^\s*(\S+)\s*\.\.\s*(\S+)\s*$")
TOL_RE = re.compile(r"^\s*(\S+)\s*(?:±|\+-)\s*([\d.]+)(%?)\s*$")


def value(text: Any) -> float:
    """A number, or text with a unit: bytes (KB), bit/s (Gbps), microseconds (us)."""
    if isinstance(text, bool):
        raise ValueError(f"a number, got {text!r}")
    if isinstance(text, (int, float)):
        return float(text)
    t = str(text).strip()
    try:
        return float(t)
    except ValueError:
        pass
    low = t.lower()
    if low.endswith("bps"):
        return parse_rate(t[:-3])
    if re.search(r"(ns|us|µs|ms|s)$", low):
        return parse_duration(t.replace("µs", "us")) * 1e6
    if low.endswith("b"):
        return float(parse_size(t))
    raise ValueError(f"a number or a value with a unit (150KB, 100Gbps, 10us), got {text!r}")


def parse_expect(exp: Any) -> tuple[Callable[[Any], bool], str]:
    """An expectation -> (predicate on the measured value, its text)."""
    if isinstance(exp, bool):
        return (lambda m: m is exp), str(exp).lower()
    if isinstance(exp, (int, float)):
        return (lambda m: isinstance(m, (int, float)) and OPS["=="](m, exp)), f"== {exp:g}"
    if isinstance(exp, list):
        return (lambda m: isinstance(m, list) and len(m) == len(exp) and all(
            _same(a, b) for a, b in zip(m, exp))), _list_text(exp)
    if isinstance(exp, dict):
        return (lambda m: _same(m, exp)), ", ".join(f"{k}={v}" for k, v in exp.items())
    if not isinstance(exp, str):
        raise ValueError(f"an expectation like '>= 0.9', got {exp!r}")
    low = exp.strip().lower()
    if low == "none":
        return (lambda m: m is None), "none"
    if low == "any":
        return (lambda m: True), "(shown)"
    if low == "all":
        return (lambda m: isinstance(m, str) and m.split("/")[0] == m.split("/")[-1]), "all"
    if low in ("true", "false"):
        return (lambda m: m is (low == "true")), low
    if low.startswith("is "):  # text equality: "is BCDA"
        want = exp.strip()[3:].strip()
        return (lambda m: str(m) == want), f"is {want}"
    m = EXPECT_RE.match(exp)
    if m:
        op, v = m.group(1), value(m.group(2))
        return (lambda x: isinstance(x, (int, float)) and OPS[op](x, v)), exp.strip()
    m = RANGE_RE.match(exp)
    if m:
        lo, hi = value(m.group(1)), value(m.group(2))
        return (lambda x: isinstance(x, (int, float)) and lo <= x <= hi), exp.strip()
    m = TOL_RE.match(exp)
    if m:
        c, tol = value(m.group(1)), float(m.group(2))
        tol = abs(c) * tol / 100 if m.group(3) else tol
        return (lambda x: isinstance(x, (int, float)) and abs(x - c) <= tol), exp.strip()
    try:
        v = value(exp)
    except ValueError:
        pass
    else:
        return (lambda x: isinstance(x, (int, float)) and OPS["=="](x, v)), f"== {exp.strip()}"
    raise ValueError(f"not an expectation: {exp!r} (try '>= 0.9', '0..150KB', '83.9us ± 2%', "
                     f"'none', 'any')")


def _same(m: Any, want: Any) -> bool:
    """`m` matches `want`: a mapping by the keys `want` names (keys compared as text, so
    JSON's "0" is YAML's 0), anything else as text, case-insensitive."""
    if isinstance(want, dict):
        if not isinstance(m, dict):
            return False
        got = {str(k): v for k, v in m.items()}
        return all(_same(got.get(str(k), ""), v) for k, v in want.items())
    return str(m).lower() == str(want).lower()


def _list_text(xs: list) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"

