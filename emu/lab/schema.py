"""A lab file: the book's experiment as data (docs/LABS.md has the format).

A lab is a YAML mapping: id, title, figure (the book's), story, watch, steps (the book's
step list), topology (a preset plus RailSpec overrides), tdf, qos (a preset, a file -
relative to the lab file's folder - or off) with `qos_overrides` merged into its YAML
form, dcqcn (paper, nvidia, off), nic (NicConfig overrides), lldp_off, lb (load
balancing specs as `emu run --lb`, emu.realise.lbplan), flows (a flow's `via: spine1` pins it on
its first switch, to collide flows on purpose; or a torch `workload`), captures, checks and variants (each a mapping of the same top-level
keys, merged over the lab). `load` checks everything against the fabric before any
namespace exists; a ValueError names the field: `flows[2].start: ...`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import topologies
from collectives.jobresult import MODULES
from collectives.launch import MASTER_PORT
from collectives.launch import plan as job_plan
from collectives.ring import RING_KINDS
from emu.faults import plan as faultplan
from emu.realise import lbplan
from emu.lab.checks import parse_expect
from emu.realise.nics import uet_nic_options
from emu.faults.schedule import parse_schedule
from emucore.qos.qosconfig import QosConfig
from emucore.qos.load import load_qos
from emucore.timedil import parse_duration, parse_size
from topologies.model import Fabric
from traffic.dcqcn import DcqcnProfile
from traffic.workloads.flows import Flow

LAB_DIR = Path(__file__).resolve().parents[2] / "labs"
TOP_KEYS = {"id", "title", "figure", "story", "watch", "steps", "topology", "tdf", "qos",
            "qos_overrides", "dcqcn", "nic", "lldp_off", "flows", "workload", "captures", "checks",
            "variants", "estimate_s", "timeout_s", "calibrated", "lb", "faults"}
VARIANT_KEYS = {"topology", "tdf", "qos", "qos_overrides", "dcqcn", "nic", "lldp_off", "lb",
                "flows", "workload", "captures", "title", "faults"}
#: a torch job as a lab's traffic (the `emu run` options of the same names)
WORKLOAD_KEYS = {"name", "size", "dtype", "iters", "ring", "master_port"}
WORKLOADS = tuple(MODULES)  # allreduce, train, pipeline, tensor
FLOW_KEYS = {"name", "src", "dst", "size", "start", "qps", "write_only", "message", "gap",
             "dscp", "ecn", "via"}
CHECK_KINDS = ("first", "order", "count", "rate", "util", "ratio", "share", "max", "counter",
               "frames", "flows", "span", "curve", "result", "pct")
CHECK_KEYS = {"name", "source", "expect", "variant", "note", *CHECK_KINDS}
NIC_KEYS = {"cnp_dscp", "mtu", "window", "timeout_s", "retry_cnt", "transport", "uet"}
LINK_RE = re.compile(r"^([\w-]+)->([\w-]+)$")


@dataclass
class Variant:
    """One configuration a lab runs (the lab itself when it has no variants)."""

    name: str
    title: str
    fabric: Fabric
    qos: QosConfig | None
    dcqcn: str
    nic: dict
    lldp_off: list[str]  # links "A->B": A stops sending LLDP towards B
    flows: list[Flow]
    captures: list[str]  # links "A->B": a capture on A's port towards B; or "node:ifname"
    workload: dict | None = None  # a torch job instead of flows (WORKLOAD_KEYS)
    #: switch -> emucore.lbconfig.LoadBalance (`lb:` specs as `emu run --lb`, flows' `via` pins)
    lb: dict = field(default_factory=dict)
    #: the fault schedule (`faults:` as `emu run --fault`, times after the flows' t0),
    #: resolved against the fabric (emu.faults.plan.Step)
    faults: tuple = ()


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


def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{where}: {msg}")


def _str_list(v: Any, where: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    _need(isinstance(v, list) and all(isinstance(x, str) for x in v), where,
          f"a list of strings, got {v!r}")
    return list(v)


def merge(base: dict, over: dict) -> dict:
    """`over` merged into a copy of `base` (mappings recursively; keys compared as text)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        key = next((b for b in out if str(b) == str(k)), k)
        if isinstance(v, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], v)
        else:
            out[key] = copy.deepcopy(v)
    return out


def fabric_of(spec: Any, tdf: Any, where: str) -> Fabric:
    """topology: {preset: NAME, <RailSpec fields>} -> Fabric."""
    _need(isinstance(spec, dict) and isinstance(spec.get("preset"), str), where,
          f"a mapping with preset: NAME, got {spec!r}")
    over = {k: v for k, v in spec.items() if k != "preset"}
    if tdf is not None:
        _need(isinstance(tdf, (int, float)) and tdf > 0, "tdf", f"a number > 0, got {tdf!r}")
        over["tdf"] = float(tdf)
    try:
        data = merge(topologies.spec_of(spec["preset"]), over)
        return topologies.from_dict(data, source=f"{where} ({spec['preset']})")
    except topologies.TopologyError as exc:
        raise ValueError(f"{where}: {exc}") from None


def qos_of(name: Any, overrides: Any, where: str) -> QosConfig | None:
    """qos: preset/file/off plus qos_overrides (YAML form of emucore.qos.dicts)."""
    if name in ("off", None, False):
        _need(not overrides, f"{where}qos_overrides", "given while qos is off")
        return None
    _need(isinstance(name, str), f"{where}qos", f"a preset, a file or off, got {name!r}")
    try:
        base = load_qos(name)
        if not overrides:
            return base
        _need(isinstance(overrides, dict), f"{where}qos_overrides", "a mapping")
        d = merge(base.to_dict(), overrides)
        d.setdefault("name", base.name)
        return QosConfig.from_dict(d)
    except ValueError as exc:
        raise ValueError(f"{where}qos: {exc}") from None


def flow_of(d: Any, i: int, fab: Fabric, where: str) -> Flow:
    """One flows[] entry -> Flow, its GPUs checked against the fabric."""
    w = f"{where}flows[{i}]"
    _need(isinstance(d, dict), w, f"a mapping, got {d!r}")
    for k in d:
        _need(k in FLOW_KEYS, f"{w}.{k}", f"unknown field (known: {', '.join(sorted(FLOW_KEYS))})")
    for k in ("name", "src", "dst", "size"):
        _need(k in d, f"{w}.{k}", "missing")
    for k in ("src", "dst"):
        _need(d[k] in fab.gpus, f"{w}.{k}", f"no GPU {d[k]!r} in {fab.name}")
    _need(d["src"] != d["dst"], f"{w}.dst", "the same GPU as src")

    def conv(key, fn, default):
        if key not in d:
            return default
        try:
            return fn(d[key])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{w}.{key}: {exc}") from None

    size = conv("size", parse_size, None)
    _need(size > 0, f"{w}.size", f"must be > 0, got {d['size']!r}")
    qps = d.get("qps", 1)
    _need(isinstance(qps, int) and 1 <= qps <= 64, f"{w}.qps", f"an integer 1..64, got {qps!r}")
    msg = conv("message", parse_size, None)
    _need(msg is None or msg > 0, f"{w}.message", "must be > 0")
    start, gap = conv("start", parse_duration, 0.0), conv("gap", parse_duration, 0.0)
    _need(start >= 0, f"{w}.start", "must be >= 0")
    _need(gap >= 0, f"{w}.gap", "must be >= 0")
    for k, hi in (("dscp", 63), ("ecn", 3)):
        v = d.get(k)
        _need(v is None or isinstance(v, int) and 0 <= v <= hi, f"{w}.{k}",
              f"an integer 0..{hi}, got {v!r}")
    _need(isinstance(d.get("write_only", False), bool), f"{w}.write_only", "true or false")
    _need(isinstance(d["name"], str) and d["name"], f"{w}.name", "a non-empty string")
    return Flow(d["name"], d["src"], d["dst"], size, start, qps, d.get("write_only", False),
                msg, gap, d.get("dscp"), d.get("ecn"))


def link_ok(fab: Fabric, text: str, where: str) -> str:
    """'A->B' naming a link of the fabric (A's port towards B)."""
    m = LINK_RE.match(text) if isinstance(text, str) else None
    _need(m is not None, where, f"a link 'A->B', got {text!r}")
    a, b = m.groups()
    _need(any(r.node == b for _, r, _ in fab.node_links(a)) if a in fab.nodes else False,
          where, f"no link from {a} to {b} in {fab.name}")
    return text


def capture_ok(fab: Fabric, text: str, where: str) -> str:
    """A capture: a link 'A->B' or an interface 'node:ifname' (a host's lo too)."""
    if isinstance(text, str) and ":" in text and "->" not in text:
        node, _, ifname = text.partition(":")
        ok = (node, ifname) in fab.ports or (
            ifname == "lo" and node in fab.nodes and fab.nodes[node].kind == "host")
        _need(ok, where, f"no interface {text!r} in {fab.name} (node:ifname, e.g. h1:fe0, h1:lo)")
        return text
    return link_ok(fab, text, where)


def workload_of(d: Any, fab: Fabric, where: str) -> dict:
    """workload: {name, size, dtype, iters, ring, master_port} -> checked mapping."""
    w = f"{where}workload"
    _need(isinstance(d, dict), w, f"a mapping, got {d!r}")
    for k in d:
        _need(k in WORKLOAD_KEYS, f"{w}.{k}",
              f"unknown field (known: {', '.join(sorted(WORKLOAD_KEYS))})")
    _need(d.get("name") in WORKLOADS, f"{w}.name", f"one of {', '.join(WORKLOADS)}, got "
          f"{d.get('name')!r}")
    out = {"name": d["name"], "size": str(d.get("size", "64MB")),
           "dtype": d.get("dtype", "float32"),
           "iters": d.get("iters"), "ring": d.get("ring", "rail"),
           "master_port": d.get("master_port", MASTER_PORT)}
    try:
        _need(parse_size(out["size"]) > 0, f"{w}.size", "must be > 0")
    except ValueError as exc:
        raise ValueError(f"{w}.size: {exc}") from None
    _need(out["ring"] in RING_KINDS, f"{w}.ring",
          f"{' or '.join(RING_KINDS)}, got {out['ring']!r}")
    _need(out["iters"] is None or isinstance(out["iters"], int) and out["iters"] >= 1,
          f"{w}.iters", f"an integer >= 1, got {out['iters']!r}")
    mp = out["master_port"]
    _need(isinstance(mp, int) and 1 <= mp <= 65535, f"{w}.master_port",
          f"a port 1..65535, got {mp!r}")
    try:
        job_plan(fab)  # torchrun's rule: as many GPUs on every host
    except ValueError as exc:
        raise ValueError(f"{w}: {exc}") from None
    return out


def variant_of(name: str, d: dict, title: str, tdf: float | None = None) -> Variant:
    """A variant from the merged lab mapping `d` (`tdf` given: instead of the file's)."""
    where = "" if name == "main" else f"variants.{name}."
    fab = fabric_of(d.get("topology"), tdf or d.get("tdf"), f"{where}topology")
    qos = qos_of(d.get("qos", "book"), d.get("qos_overrides"), where)
    dcqcn = d.get("dcqcn", "paper")
    if dcqcn != "off":
        try:
            DcqcnProfile.by_name(dcqcn)
        except (ValueError, KeyError):
            raise ValueError(f"{where}dcqcn: paper, nvidia or off, got {dcqcn!r}") from None
    nic = d.get("nic") or {}
    _need(isinstance(nic, dict), f"{where}nic", "a mapping")
    for k in nic:
        _need(k in NIC_KEYS, f"{where}nic.{k}", f"unknown field (known: {', '.join(sorted(NIC_KEYS))})")
    if nic.get("transport", "roce") == "uet":  # its knobs checked, the switches' trim told
        nic = {**nic, **uet_nic_options(nic.get("uet") or {}, qos, f"{where}nic.uet")}
    else:
        _need(nic.get("transport", "roce") == "roce" and "uet" not in nic,
              f"{where}nic.transport", f"roce or uet (uet knobs need uet), got "
                                       f"{nic.get('transport')!r}")
    wl = workload_of(d["workload"], fab, where) if d.get("workload") is not None else None
    flows_raw = d.get("flows")
    _need(wl is None or not flows_raw, f"{where}flows",
          "a lab has flows or a workload, not both")
    _need(wl is not None or isinstance(flows_raw, list) and flows_raw, f"{where}flows",
          "a non-empty list (or a workload)")
    flows = [flow_of(f, i, fab, where) for i, f in enumerate(flows_raw or [])]
    names = [f.name for f in flows]
    dup = {n for n in names if names.count(n) > 1}
    _need(not dup, f"{where}flows", f"duplicate flow name {sorted(dup)[0]!r}" if dup else "")
    caps = [capture_ok(fab, c, f"{where}captures[{i}]")
            for i, c in enumerate(_str_list(d.get("captures"), f"{where}captures"))]
    off = [link_ok(fab, c, f"{where}lldp_off[{i}]")
           for i, c in enumerate(_str_list(d.get("lldp_off"), f"{where}lldp_off"))]
    lb = lbplan.resolve(fab, qos, _str_list(d.get("lb"), f"{where}lb"), f"{where}lb")
    for i, f in enumerate(flows_raw or []):
        if isinstance(f, dict) and "via" in f:
            _need(isinstance(f["via"], str), f"{where}flows[{i}].via", "a switch name")
            lbplan.pin_via(fab, lb, f["src"], f["dst"], f["via"], f"{where}flows[{i}].via")
    try:
        faults = faultplan.resolve(fab, parse_schedule(
            _str_list(d.get("faults"), f"{where}faults")), f"{where}faults")
    except ValueError as exc:
        raise ValueError(str(exc) if str(exc).startswith(f"{where}faults")
                         else f"{where}faults: {exc}") from None
    return Variant(name, title, fab, qos, dcqcn, dict(nic), off, flows, caps, wl, lb, faults)


def _no_bool_keys(x: Any, where: str) -> None:
    """YAML 1.1 reads an unquoted on/off/yes/no key as a boolean: name it, once."""
    if isinstance(x, dict):
        for k, v in x.items():
            _need(not isinstance(k, bool), where, f"a key read as {k} - YAML turns an unquoted "
                  "on/off/yes/no into a boolean; quote it (\"on\": true)")
            _no_bool_keys(v, f"{where}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _no_bool_keys(v, f"{where}[{i}]")


def check_of(c: Any, i: int, variants: list[str]) -> dict:
    """One checks[] entry, its shape checked (emu.lab.checks judges it)."""
    w = f"checks[{i}]"
    _need(isinstance(c, dict), w, f"a mapping, got {c!r}")
    for k in c:
        _need(k in CHECK_KEYS, f"{w}.{k}", f"unknown field (known: {', '.join(sorted(CHECK_KEYS))})")
    _need(isinstance(c.get("name"), str) and c["name"], f"{w}.name", "missing")
    kinds = [k for k in CHECK_KINDS if k in c]
    _need(len(kinds) == 1, w, f"exactly one of {', '.join(CHECK_KINDS)}, got {kinds or 'none'}")
    v = c.get("variant", "all")
    for name in _str_list(v, f"{w}.variant"):
        _need(name == "all" or name in variants, f"{w}.variant",
              f"no variant {name!r} (the lab has: {', '.join(variants)})")
    _no_bool_keys(c[kinds[0]], f"{w}.{kinds[0]}")
    if kinds[0] == "pct":
        spec = c["pct"]
        _need(isinstance(spec, dict) and isinstance(spec.get("field"), str), f"{w}.pct.field",
              "the event field to take the percentile of, e.g. sojourn")
        p = spec.get("p", 50)
        _need(isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 100,
              f"{w}.pct.p", f"a percentile in (0, 100], got {p!r}")
    if kinds[0] == "share":
        spec = c["share"]
        _need(isinstance(spec, dict) and isinstance(spec.get("check"), str), f"{w}.share.check",
              "the name of a per-variant check")
        for name in _str_list(spec.get("variants"), f"{w}.share.variants"):
            _need(name in variants, f"{w}.share.variants", f"no variant {name!r}")
        try:
            parse_expect(spec.get("where"))
        except ValueError as exc:
            raise ValueError(f"{w}.share.where: {exc}") from None
    if "expect" in c:
        try:
            parse_expect(c["expect"])
        except ValueError as exc:
            raise ValueError(f"{w}.expect: {exc}") from None
    return dict(c, kind=kinds[0])


def parse(data: Any, path: Path | None = None, tdf: float | None = None) -> Lab:
    """A lab mapping -> Lab; ValueError naming the field."""
    _need(isinstance(data, dict), "lab", f"a mapping at top level, got {type(data).__name__}")
    for k in data:
        _need(k in TOP_KEYS, k, f"unknown field (known: {', '.join(sorted(TOP_KEYS))})")
    for k in ("id", "title", "topology", "checks"):
        _need(k in data, k, "missing")
    base = {k: v for k, v in data.items() if k in VARIANT_KEYS}
    vraw = data.get("variants") or {}
    _need(isinstance(vraw, dict), "variants", "a mapping name -> overrides")
    variants = []
    for name, over in (vraw.items() if vraw else [("main", {})]):
        _need(isinstance(over, dict), f"variants.{name}", "a mapping of overrides")
        for k in over:
            _need(k in VARIANT_KEYS, f"variants.{name}.{k}",
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
    _need(isinstance(checks_raw, list) and checks_raw, "checks", "a non-empty list")
    checks = [check_of(c, i, vnames) for i, c in enumerate(checks_raw)]
    names = [c["name"] for c in checks]
    dup = {n for n in names if names.count(n) > 1}
    _need(not dup, "checks", f"duplicate check name {sorted(dup)[0]!r}" if dup else "")
    for k in ("estimate_s", "timeout_s"):
        _need(isinstance(data.get(k, 1), (int, float)) and data.get(k, 1) > 0, k, "a number > 0")
    return Lab(str(data["id"]), str(data["title"]), str(data.get("figure", "")),
               str(data.get("story", "")).strip(), _str_list(data.get("watch"), "watch"),
               _str_list(data.get("steps"), "steps"), checks, variants,
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
        data = yaml.safe_load(path.read_text())
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
