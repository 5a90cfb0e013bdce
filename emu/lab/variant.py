"""One variant of a lab: the configuration it runs - fabric, QoS, DCQCN, NIC, LLDP,
load balancing, faults - and its traffic (flows or a torch workload), each field
checked against the fabric before any namespace exists (docs/LABS.md has the format;
emu.lab.schema reads the whole file and merges each variant over the lab).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import topologies
from collectives.jobresult import MODULES
from collectives.launch import MASTER_PORT
from collectives.launch import plan as job_plan
from collectives.ring import RING_KINDS
from emu.faults import plan as faultplan
from emu.faults.schedule import parse_schedule
from emu.lab import flowkeys
from emu.lab.fields import merge, need, str_list
from emu.realise import lbplan
from emu.realise.nics import uet_nic_options
from emucore.qos.load import load_qos
from emucore.qos.qosconfig import QosConfig
from emucore.timedil import parse_duration, parse_size
from topologies.model import Fabric
from traffic.dcqcn import DcqcnProfile
from traffic.workloads.flows import Flow

#: a torch job as a lab's traffic (the `emu run` options of the same names)
WORKLOAD_KEYS = {"name", "size", "dtype", "iters", "ring", "master_port"}
WORKLOADS = tuple(MODULES)  # allreduce, train, pipeline, tensor
FLOW_KEYS = {"name", "src", "dst", "size", "start", "qps", "write_only", "message", "gap",
             "dscp", "ecn", "via", "sport"}
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


def fabric_of(spec: Any, tdf: Any, where: str) -> Fabric:
    """topology: {preset: NAME, <RailSpec fields>} -> Fabric."""
    need(isinstance(spec, dict) and isinstance(spec.get("preset"), str), where,
         f"a mapping with preset: NAME, got {spec!r}")
    over = {k: v for k, v in spec.items() if k != "preset"}
    if tdf is not None:
        need(isinstance(tdf, (int, float)) and tdf > 0, "tdf", f"a number > 0, got {tdf!r}")
        over["tdf"] = float(tdf)
    try:
        data = merge(topologies.spec_of(spec["preset"]), over)
        return topologies.from_dict(data, source=f"{where} ({spec['preset']})")
    except topologies.TopologyError as exc:
        raise ValueError(f"{where}: {exc}") from None


def qos_of(name: Any, overrides: Any, where: str) -> QosConfig | None:
    """qos: preset/file/off plus qos_overrides (YAML form of emucore.qos.dicts)."""
    if name in ("off", None, False):
        need(not overrides, f"{where}qos_overrides", "given while qos is off")
        return None
    need(isinstance(name, str), f"{where}qos", f"a preset, a file or off, got {name!r}")
    try:
        base = load_qos(name)
        if not overrides:
            return base
        need(isinstance(overrides, dict), f"{where}qos_overrides", "a mapping")
        d = merge(base.to_dict(), overrides)
        d.setdefault("name", base.name)
        return QosConfig.from_dict(d)
    except ValueError as exc:
        raise ValueError(f"{where}qos: {exc}") from None


def flow_of(d: Any, i: int, fab: Fabric, where: str) -> Flow:
    """One flows[] entry -> Flow, its GPUs checked against the fabric."""
    w = f"{where}flows[{i}]"
    need(isinstance(d, dict), w, f"a mapping, got {d!r}")
    for k in d:
        need(k in FLOW_KEYS, f"{w}.{k}", f"unknown field (known: {', '.join(sorted(FLOW_KEYS))})")
    for k in ("name", "src", "dst", "size"):
        need(k in d, f"{w}.{k}", "missing")
    for k in ("src", "dst"):
        need(d[k] in fab.gpus, f"{w}.{k}", f"no GPU {d[k]!r} in {fab.name}")
    need(d["src"] != d["dst"], f"{w}.dst", "the same GPU as src")

    def conv(key, fn, default):
        if key not in d:
            return default
        try:
            return fn(d[key])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{w}.{key}: {exc}") from None

    size = conv("size", parse_size, None)
    need(size > 0, f"{w}.size", f"must be > 0, got {d['size']!r}")
    qps = d.get("qps", 1)
    need(isinstance(qps, int) and 1 <= qps <= 64, f"{w}.qps", f"an integer 1..64, got {qps!r}")
    msg = conv("message", parse_size, None)
    need(msg is None or msg > 0, f"{w}.message", "must be > 0")
    start, gap = conv("start", parse_duration, 0.0), conv("gap", parse_duration, 0.0)
    need(start >= 0, f"{w}.start", "must be >= 0")
    need(gap >= 0, f"{w}.gap", "must be >= 0")
    for k, hi in (("dscp", 63), ("ecn", 3)):
        v = d.get(k)
        need(v is None or isinstance(v, int) and 0 <= v <= hi, f"{w}.{k}",
             f"an integer 0..{hi}, got {v!r}")
    need(isinstance(d.get("write_only", False), bool), f"{w}.write_only", "true or false")
    need(isinstance(d["name"], str) and d["name"], f"{w}.name", "a non-empty string")
    if "sport" in d:  # the flow's ECMP key (emu.lab.flowkeys), its QPNs pinned to give it
        sp = d["sport"]
        need(isinstance(sp, int) and not isinstance(sp, bool) and sp in flowkeys.SPORTS,
             f"{w}.sport", f"a RoCEv2 UDP source port {flowkeys.SPORTS.start}.."
                           f"{flowkeys.SPORTS.stop - 1} (0xC000..0xFFFF), got {sp!r}")
        need(qps == 1, f"{w}.sport", f"one source port is one QP's flow: qps must be 1, got {qps}")
        need("via" not in d, f"{w}.via", "given with sport: a flow is placed by its key or "
                                         "pinned, not both")
    return Flow(d["name"], d["src"], d["dst"], size, start, qps, d.get("write_only", False),
                msg, gap, d.get("dscp"), d.get("ecn"))


def link_ok(fab: Fabric, text: str, where: str) -> str:
    """'A->B' naming a link of the fabric (A's port towards B)."""
    m = LINK_RE.match(text) if isinstance(text, str) else None
    need(m is not None, where, f"a link 'A->B', got {text!r}")
    a, b = m.groups()
    need(any(r.node == b for _, r, _ in fab.node_links(a)) if a in fab.nodes else False,
         where, f"no link from {a} to {b} in {fab.name}")
    return text


def capture_ok(fab: Fabric, text: str, where: str) -> str:
    """A capture: a link 'A->B' or an interface 'node:ifname' (a host's lo too)."""
    if isinstance(text, str) and ":" in text and "->" not in text:
        node, _, ifname = text.partition(":")
        ok = (node, ifname) in fab.ports or (
            ifname == "lo" and node in fab.nodes and fab.nodes[node].kind == "host")
        need(ok, where, f"no interface {text!r} in {fab.name} (node:ifname, e.g. h1:fe0, h1:lo)")
        return text
    return link_ok(fab, text, where)


def workload_of(d: Any, fab: Fabric, where: str) -> dict:
    """workload: {name, size, dtype, iters, ring, master_port} -> checked mapping."""
    w = f"{where}workload"
    need(isinstance(d, dict), w, f"a mapping, got {d!r}")
    for k in d:
        need(k in WORKLOAD_KEYS, f"{w}.{k}",
             f"unknown field (known: {', '.join(sorted(WORKLOAD_KEYS))})")
    need(d.get("name") in WORKLOADS, f"{w}.name", f"one of {', '.join(WORKLOADS)}, got "
         f"{d.get('name')!r}")
    out = {"name": d["name"], "size": str(d.get("size", "64MB")),
           "dtype": d.get("dtype", "float32"),
           "iters": d.get("iters"), "ring": d.get("ring", "rail"),
           "master_port": d.get("master_port", MASTER_PORT)}
    try:
        need(parse_size(out["size"]) > 0, f"{w}.size", "must be > 0")
    except ValueError as exc:
        raise ValueError(f"{w}.size: {exc}") from None
    need(out["ring"] in RING_KINDS, f"{w}.ring",
         f"{' or '.join(RING_KINDS)}, got {out['ring']!r}")
    need(out["iters"] is None or isinstance(out["iters"], int) and out["iters"] >= 1,
         f"{w}.iters", f"an integer >= 1, got {out['iters']!r}")
    mp = out["master_port"]
    need(isinstance(mp, int) and 1 <= mp <= 65535, f"{w}.master_port",
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
    need(isinstance(nic, dict), f"{where}nic", "a mapping")
    for k in nic:
        need(k in NIC_KEYS, f"{where}nic.{k}", f"unknown field (known: {', '.join(sorted(NIC_KEYS))})")
    if nic.get("transport", "roce") == "uet":  # its knobs checked, the switches' trim told
        nic = {**nic, **uet_nic_options(nic.get("uet") or {}, qos, f"{where}nic.uet")}
    else:
        need(nic.get("transport", "roce") == "roce" and "uet" not in nic,
             f"{where}nic.transport", f"roce or uet (uet knobs need uet), got "
                                       f"{nic.get('transport')!r}")
    wl = workload_of(d["workload"], fab, where) if d.get("workload") is not None else None
    flows_raw = d.get("flows")
    need(wl is None or not flows_raw, f"{where}flows",
         "a lab has flows or a workload, not both")
    need(wl is not None or isinstance(flows_raw, list) and flows_raw, f"{where}flows",
         "a non-empty list (or a workload)")
    flows = [flow_of(f, i, fab, where) for i, f in enumerate(flows_raw or [])]
    taken: set[int] = set()  # QPNs pinned in this variant (unique, so on every NIC)
    for i, f in enumerate(flows_raw or []):
        if "sport" in f:
            flows[i] = replace(flows[i], qpns=flowkeys.qpns_for(f["sport"], taken))
            taken.update(flows[i].qpns)
    names = [f.name for f in flows]
    dup = {n for n in names if names.count(n) > 1}
    need(not dup, f"{where}flows", f"duplicate flow name {sorted(dup)[0]!r}" if dup else "")
    caps = [capture_ok(fab, c, f"{where}captures[{i}]")
            for i, c in enumerate(str_list(d.get("captures"), f"{where}captures"))]
    off = [link_ok(fab, c, f"{where}lldp_off[{i}]")
           for i, c in enumerate(str_list(d.get("lldp_off"), f"{where}lldp_off"))]
    lb = lbplan.resolve(fab, qos, str_list(d.get("lb"), f"{where}lb"), f"{where}lb")
    for i, f in enumerate(flows_raw or []):
        if isinstance(f, dict) and "via" in f:
            need(isinstance(f["via"], str), f"{where}flows[{i}].via", "a switch name")
            lbplan.pin_via(fab, lb, f["src"], f["dst"], f["via"], f"{where}flows[{i}].via")
    try:
        faults = faultplan.resolve(fab, parse_schedule(
            str_list(d.get("faults"), f"{where}faults")), f"{where}faults")
    except ValueError as exc:
        raise ValueError(str(exc) if str(exc).startswith(f"{where}faults")
                         else f"{where}faults: {exc}") from None
    return Variant(name, title, fab, qos, dcqcn, dict(nic), off, flows, caps, wl, lb, faults)

