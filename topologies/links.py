"""Per-link speed and delay overrides: the ``links:`` field of a topology.

``links: {rail1-spine2: {rate: 200G, delay: 5us}}`` sets the model rate and/or one-way
delay of the link(s) between two nodes, the pair named "a-b" in either order (every link
between the two when there are several, as between a host and a switch carrying two of
its rails). Use: 200 G uplinks on some links only (book Fig 10-5, lab L10.4), a longer
cable on one spine. Errors name the field and the value (``links.rail1-spine9: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from emucore.timedil import parse_duration, parse_rate
from topologies.model import Fabric

KEYS = ("rate", "delay")


@dataclass(frozen=True)
class LinkOverride:
    """The rate (bps) and/or delay (s) of the links between nodes a and b."""

    key: str  # as written, for messages
    a: str
    b: str
    model_bps: float | None = None
    delay_s: float | None = None


def parse_links(links: object) -> list[LinkOverride]:
    """Check the ``links:`` mapping's form and values (not yet that the nodes exist)."""
    if not isinstance(links, Mapping):
        raise ValueError(f"links: a mapping 'a-b: {{rate, delay}}', got {links!r}")
    out: list[LinkOverride] = []
    seen: dict[frozenset, str] = {}
    for key, val in links.items():
        where = f"links.{key}"
        parts = str(key).split("-")
        if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
            raise ValueError(f"{where}: not a node pair 'a-b'")
        pair = frozenset(parts)
        if pair in seen:
            raise ValueError(f"{where}: the same pair as links.{seen[pair]}")
        seen[pair] = str(key)
        if not isinstance(val, Mapping) or not val:
            raise ValueError(f"{where}: a mapping with rate and/or delay, got {val!r}")
        for k in val:
            if k not in KEYS:
                raise ValueError(f"{where}: unknown key {k!r} (known: {', '.join(KEYS)})")
        bps = delay = None
        if "rate" in val:
            try:
                bps = parse_rate(val["rate"])
            except (TypeError, ValueError):
                raise ValueError(f"{where}.rate: not a rate like '200G', got "
                                 f"{val['rate']!r}") from None
            if bps <= 0:
                raise ValueError(f"{where}.rate: must be > 0, got {val['rate']!r}")
        if "delay" in val:
            try:
                delay = parse_duration(val["delay"])
            except (TypeError, ValueError):
                raise ValueError(f"{where}.delay: not a duration like '5us', got "
                                 f"{val['delay']!r}") from None
            if delay < 0:
                raise ValueError(f"{where}.delay: must be >= 0, got {val['delay']!r}")
        out.append(LinkOverride(str(key), parts[0], parts[1], bps, delay))
    return out


def apply_links(fab: Fabric, overrides: list[LinkOverride]) -> None:
    """Set the overridden rates and delays on `fab`'s links, in place."""
    for o in overrides:
        missing = [n for n in (o.a, o.b) if n not in fab.nodes]
        idx = [i for i, lk in enumerate(fab.links) if {lk.a.node, lk.b.node} == {o.a, o.b}]
        if missing or not idx:
            why = f" (no node {', '.join(missing)})" if missing else ""
            raise ValueError(f"links.{o.key}: no link between {o.a} and {o.b}{why}")
        for i in idx:
            lk = fab.links[i]
            fab.links[i] = replace(
                lk, model_bps=lk.model_bps if o.model_bps is None else o.model_bps,
                delay_s=lk.delay_s if o.delay_s is None else o.delay_s)
