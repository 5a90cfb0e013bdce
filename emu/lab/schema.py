"""A lab file: the book's experiment as data (docs/LABS.md has the format).

A lab is a YAML mapping: id, title, figure (the book's), story, watch, steps (the book's
step list), topology (a preset plus RailSpec overrides), tdf, qos (a preset, a file -
relative to the lab file's folder - or off) with `qos_overrides` merged into its YAML
form, dcqcn (paper, nvidia, off), nic (NicConfig overrides), lldp_off, lb (load
balancing specs as `emu run --lb`, emu.realise.lbplan), flows (a flow's `via: spine1` pins it on
its first switch, to collide flows on purpose; or a torch `workload`), captures, checks and variants (each a mapping of the same top-level
keys, merged over the lab); every judged check names its bound's source (emu.lab.verdict).
`load` checks everything against the fabric before any
namespace exists; a ValueError names the field: `flows[2].start: ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from emu.lab.expect import parse_expect
from emu.lab.fields import merge, need, str_list
from emu.lab.variant import Variant, variant_of
from emu.lab.verdict import check_source
from emucore import yamlcache

LAB_DIR = Path(__file__).resolve().parents[2] / "labs"
TOP_KEYS = {"id", "title", "figure", "story", "watch", "steps", "topology", "tdf", "qos",
            "qos_overrides", "dcqcn", "nic", "lldp_off", "flows", "workload", "captures", "checks",
            "variants", "estimate_s", "timeout_s", "calibrated", "lb", "faults"}
VARIANT_KEYS = {"topology", "tdf", "qos", "qos_overrides", "dcqcn", "nic", "lldp_off", "lb",
                "flows", "workload", "captures", "title", "faults"}
CHECK_KINDS = ("first", "order", "count", "rate", "util", "ratio", "share", "max", "counter",
               "frames", "flows", "span", "curve", "result", "pct")
CHECK_KEYS = {"name", "source", "expect", "variant", "note", "differs", *CHECK_KINDS}


@dataclass
class Lab:
    """A validated lab."""

    id: str
    title: str
    figure: str
    story: str
    watch: list[str]
    steps: list[str]
    checks: list[dict]
    variants: list[Variant]
    estimate_s: float
    timeout_s: float
    calibrated: str
    path: Path | None = None
    raw: dict = field(default_factory=dict)

    @property
    def topology(self) -> str:
        """The first variant's fabric name and size, for `lab list`."""
        f = self.variants[0].fabric
        return f"{f.name} ({len(f.gpus)} GPUs)"


def _no_bool_keys(x: Any, where: str) -> None:
    """YAML 1.1 reads an unquoted on/off/yes/no key as a boolean: name it, once."""
    if isinstance(x, dict):
        for k, v in x.items():
            need(not isinstance(k, bool), where, f"a key read as {k} - YAML turns an unquoted "
                 "on/off/yes/no into a boolean; quote it (\"on\": true)")
            _no_bool_keys(v, f"{where}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _no_bool_keys(v, f"{where}[{i}]")


def check_of(c: Any, i: int, variants: list[str]) -> dict:
    """One checks[] entry, its shape checked (emu.lab.checks judges it)."""
    w = f"checks[{i}]"
    need(isinstance(c, dict), w, f"a mapping, got {c!r}")
    for k in c:
        need(k in CHECK_KEYS, f"{w}.{k}", f"unknown field (known: {', '.join(sorted(CHECK_KEYS))})")
    need(isinstance(c.get("name"), str) and c["name"], f"{w}.name", "missing")
    kinds = [k for k in CHECK_KINDS if k in c]
    need(len(kinds) == 1, w, f"exactly one of {', '.join(CHECK_KINDS)}, got {kinds or 'none'}")
    v = c.get("variant", "all")
    for name in str_list(v, f"{w}.variant"):
        need(name == "all" or name in variants, f"{w}.variant",
             f"no variant {name!r} (the lab has: {', '.join(variants)})")
    _no_bool_keys(c[kinds[0]], f"{w}.{kinds[0]}")
    if kinds[0] == "pct":
        spec = c["pct"]
        need(isinstance(spec, dict) and isinstance(spec.get("field"), str), f"{w}.pct.field",
             "the event field to take the percentile of, e.g. sojourn")
        p = spec.get("p", 50)
        need(isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 100,
             f"{w}.pct.p", f"a percentile in (0, 100], got {p!r}")
    if kinds[0] == "share":
        spec = c["share"]
        need(isinstance(spec, dict) and isinstance(spec.get("check"), str), f"{w}.share.check",
             "the name of a per-variant check")
        for name in str_list(spec.get("variants"), f"{w}.share.variants"):
            need(name in variants, f"{w}.share.variants", f"no variant {name!r}")
        try:
            parse_expect(spec.get("where"))
        except ValueError as exc:
            raise ValueError(f"{w}.share.where: {exc}") from None
    if "expect" in c:
        try:
            parse_expect(c["expect"])
        except ValueError as exc:
            raise ValueError(f"{w}.expect: {exc}") from None
    return {**c, "kind": kinds[0], **check_source({**c, "kind": kinds[0]}, w)}


def _premise_known(c: dict, i: int, checks: list[dict], vnames: list[str]) -> None:
    """A `differs.when` names a per-variant check of a variant it applies to."""
    when = (c.get("differs") or {}).get("when")
    if when is None:
        return
    variant, _, name = when["check"].partition(".")
    known = set()
    for o in checks:
        which = o.get("variant", "all")
        which = [which] if isinstance(which, str) else which
        if o["kind"] not in ("ratio", "share"):
            known |= {f"{v}.{o['name']}" for v in vnames if "all" in which or v in which}
    need(when["check"] in known, f"checks[{i}].differs.when.check",
         f"no per-variant check {name!r} in variant {variant!r} (known: "
         f"{', '.join(sorted(known)) or 'none'})")


def parse(data: Any, path: Path | None = None, tdf: float | None = None) -> Lab:
    """A lab mapping -> Lab; ValueError naming the field."""
    need(isinstance(data, dict), "lab", f"a mapping at top level, got {type(data).__name__}")
    for k in data:
        need(k in TOP_KEYS, k, f"unknown field (known: {', '.join(sorted(TOP_KEYS))})")
    for k in ("id", "title", "topology", "checks"):
        need(k in data, k, "missing")
    base = {k: v for k, v in data.items() if k in VARIANT_KEYS}
    vraw = data.get("variants") or {}
    need(isinstance(vraw, dict), "variants", "a mapping name -> overrides")
    variants = []
    for name, over in (vraw.items() if vraw else [("main", {})]):
        need(isinstance(over, dict), f"variants.{name}", "a mapping of overrides")
        for k in over:
            need(k in VARIANT_KEYS, f"variants.{name}.{k}",
                 f"not overridable (known: {', '.join(sorted(VARIANT_KEYS))})")
        merged = {**base, **over}
        if "qos_overrides" in over and "qos_overrides" in base:
            merged["qos_overrides"] = merge(base["qos_overrides"], over["qos_overrides"])
        if "topology" in over and "topology" in base:
            merged["topology"] = merge(base["topology"], over["topology"])
        q = merged.get("qos")
        if path is not None and isinstance(q, str) and (path.parent / q).is_file():
            merged["qos"] = str(path.parent / q)  # a QoS file beside the lab file
        variants.append(variant_of(str(name), merged, str(over.get("title", name)), tdf))
    vnames = [v.name for v in variants]
    checks_raw = data["checks"]
    need(isinstance(checks_raw, list) and checks_raw, "checks", "a non-empty list")
    checks = [check_of(c, i, vnames) for i, c in enumerate(checks_raw)]
    names = [c["name"] for c in checks]
    dup = {n for n in names if names.count(n) > 1}
    need(not dup, "checks", f"duplicate check name {sorted(dup)[0]!r}" if dup else "")
    for i, c in enumerate(checks):
        _premise_known(c, i, checks, vnames)
    for k in ("estimate_s", "timeout_s"):
        need(isinstance(data.get(k, 1), (int, float)) and data.get(k, 1) > 0, k, "a number > 0")
    return Lab(str(data["id"]), str(data["title"]), str(data.get("figure", "")),
               str(data.get("story", "")).strip(), str_list(data.get("watch"), "watch"),
               str_list(data.get("steps"), "steps"), checks, variants,
               float(data.get("estimate_s", 60)), float(data.get("timeout_s", 300)),
               str(data.get("calibrated", "")).strip(), path, data)


def load(ref: str, tdf: float | None = None) -> Lab:
    """A lab id of the catalogue (case-insensitive) or a path to a lab file; `tdf`
    replaces the file's for every variant."""
    path = Path(ref)
    if not path.is_file():
        found = {p.stem.lower(): p for p in LAB_DIR.glob("*.yaml")}
        path = found.get(ref.lower())
        if path is None:
            raise ValueError(f"no lab {ref!r}: not a file, not an id of `emu lab list`")
    try:
        data = yamlcache.load_file(path)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path.name}: not valid YAML: {exc}") from None
    try:
        return parse(data, path, tdf)
    except ValueError as exc:
        raise ValueError(f"{path.name}: {exc}") from None


def catalogue() -> list[Path]:
    """The lab files shipped in labs/, in id order (L8.2 < L9.1 < L11.1 < L11.10)."""
    def key(p: Path):
        return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p.stem)]
    return sorted(LAB_DIR.glob("*.yaml"), key=key)

