"""What one variant's run left (`Evidence`) and the selectors that pick its events
(pure; tests/unit/test_lab_checks.py).

Evidence is the event log (emucore.eventlog, times made relative to the lab's t0, model
microseconds), the sampled metrics (emu.observe.metrics rows, same axis), the agents'
and NICs' last counters, the flows' results and, on request, decoded frames of a
capture (tshark); emu.lab.runner gathers it, emu.lab.checks measures it.

A selector SEL is a mapping of event fields (ev, node, port, prio, queue, qp, dir, why,
...; a list means any of) plus `port: "A->B"` (node A, its port towards B), `flow:` /
`flow_rx:` (the flow's sender / receiver NIC and QPs; a list: any of those flows),
`after:` / `before:` (µs or a duration, or `{first: SEL, plus: duration}`: relative to
another event).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.lab.expect import value

SEL_SPECIAL = {"port", "flow", "flow_rx", "after", "before", "node", "ev", "field", "distinct"}


@dataclass
class Evidence:
    """What one variant's run left, on the lab's time axis (model µs after t0)."""

    events: list[dict]
    metrics: list[dict] = field(default_factory=list)  # t_us, node, port, queue, metric, value
    counters: dict = field(default_factory=dict)  # node -> last counters
    flows: dict = field(default_factory=dict)  # flow -> result (src, dst, qps, rx_qps, ...)
    links: dict = field(default_factory=dict)  # "A->B" -> (A, ifname of A's port)
    link_bps: dict = field(default_factory=dict)  # "A->B" -> model bit/s
    frames: Callable[[str, str, list], list] | None = None  # (capture, filter, fields) -> rows
    result: dict = field(default_factory=dict)  # a torch workload's result (emu.run)


def wanted(want: Any) -> Callable[[Any], bool]:
    """A test of one field: equal, in a list, or matching a glob (rail*)."""
    if isinstance(want, list):
        return lambda x: x in want
    if isinstance(want, str) and any(ch in want for ch in "*?["):
        return lambda x: isinstance(x, str) and fnmatch.fnmatchcase(x, want)
    return lambda x: x == want


def matcher(ev: Evidence, sel: dict) -> Callable[[dict], bool]:
    """A predicate on events for the selector `sel`."""
    if not isinstance(sel, dict):
        raise ValueError(f"a selector mapping (ev: ..., node: ...), got {sel!r}")
    tests: list[Callable[[dict], bool]] = []

    def on(key: str, want: Any) -> None:
        f = wanted(want)
        tests.append(lambda e: f(e.get(key)))

    for k, v in sel.items():
        if k not in SEL_SPECIAL:
            on(k, v)
    if "ev" in sel:
        on("ev", sel["ev"])
    if "node" in sel:
        on("node", sel["node"])
    port = sel.get("port")
    if isinstance(port, str) and "->" in port:
        if port not in ev.links:
            raise ValueError(f"port: no link {port!r}")
        node, ifname = ev.links[port]
        on("node", node)
        on("port", ifname)
    elif port is not None:
        on("port", port)
    for key, side, qps in (("flow", "src", "qps"), ("flow_rx", "dst", "rx_qps")):
        if key in sel:
            names = sel[key] if isinstance(sel[key], list) else [sel[key]]
            pairs = set()
            for name in names:
                fr = ev.flows.get(name)
                if fr is None:
                    raise ValueError(f"{key}: no flow {name!r}")
                pairs |= {(fr[side], q) for q in fr[qps]}
            tests.append(lambda e, pairs=pairs: (e.get("node"), e.get("qp")) in pairs)
    lo = bound(ev, sel["after"], "after") if "after" in sel else -math.inf
    hi = bound(ev, sel["before"], "before") if "before" in sel else math.inf
    return lambda e: lo <= e["t"] <= hi and all(t(e) for t in tests)


def bound(ev: Evidence, b: Any, key: str) -> float:
    """A time bound of a selector or a window: µs (or a duration), or {first: SEL, plus:
    duration}: the first time of another selector, shifted (Figure 11-7's "t7 after t5").
    When that selector matches nothing, nothing is after it (inf) and everything before it."""
    if not isinstance(b, dict):
        return value(b)
    if set(b) - {"first", "plus"} or not isinstance(b.get("first"), dict):
        raise ValueError(f"{key}: a time or {{first: SELECTOR, plus: DURATION}}, got {b!r}")
    t = first(ev, b["first"])
    return math.inf if t is None else t + (value(b["plus"]) if "plus" in b else 0.0)


def select(ev: Evidence, sel: dict) -> list[dict]:
    """The events matching `sel`, in time order."""
    m = matcher(ev, sel)
    return [e for e in ev.events if m(e)]


def first(ev: Evidence, sel: dict) -> float | None:
    """Model µs of the first matching event."""
    hit = select(ev, sel)
    return hit[0]["t"] if hit else None


def order(ev: Evidence, groups: list) -> tuple[bool, list]:
    """Whether each group's first times all precede the next group's; the times."""
    times = [[first(ev, s) for s in (g if isinstance(g, list) else [g])] for g in groups]
    ok = all(t is not None for g in times for t in g) and all(
        max(a) < min(b) for a, b in zip(times, times[1:]))
    return ok, [t[0] if len(t) == 1 else t for t in times]
