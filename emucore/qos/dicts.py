"""The YAML/JSON form of the QoS configuration, part by part (presets/*.yaml; the
agent's start-up JSON): sizes in bytes or with units ("150KB"), durations in seconds or
with units ("200ms"). Unknown keys and bad values raise ValueError naming the field as
the YAML spells it (``qos.queuing.queues[3].wred.min``).

`emucore.qos.qosconfig.QosConfig.from_dict` / `to_dict` assemble the parts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emucore.qos.classify import Classification, TrafficClass
from emucore.qos.fields import NUM_QUEUES, int_in, prefixed, size
from emucore.qos.interface import InterfaceQos, Watchdog
from emucore.qos.pfc import Pfc
from emucore.qos.queuing import QueueConfig, Queuing
from emucore.qos.wred import Wred

#: top-level keys of the schema
TOP_KEYS = ("kind", "name", "description", "classification", "queuing", "pfc", "watchdog",
            "mtu", "cnp", "interfaces", "load_balance", "trim", "llr", "cbfc")
# YAML key -> dataclass field, per part
WRED_KEYS = {"min": "min_bytes", "max": "max_bytes", "max_prob": "max_prob_pct",
             "weight": "weight", "ecn": "ecn"}
QUEUE_KEYS = {"strict": "strict", "bandwidth_percent": "bandwidth_percent", "wred": "wred",
              "limit": "limit_bytes"}
PFC_KEYS = {"policy": "policy", "no_drop": "no_drop", "xoff": "xoff_bytes", "xon": "xon_bytes",
            "headroom": "headroom_bytes", "pause_quanta": "pause_quanta"}
WATCHDOG_KEYS = {"enabled": "enabled", "detect": "detect_s", "restore": "restore_s",
                 "action": "action"}
INTERFACE_KEYS = {"pfc_mode": "pfc_mode", "watchdog": "watchdog", "classify": "classify"}
CLASS_KEYS = {"name": "name", "dscp": "dscp", "qos_group": "qos_group"}
CNP_KEYS = {"dscp": "cnp_dscp", "priority": "cnp_priority"}


def mapping(path: str, value: Any, known: tuple[str, ...]) -> dict:
    """`value` as a dict with only `known` keys (None -> {})."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a mapping, got {value!r}")
    for k in value:
        if k not in known:
            raise ValueError(f"{path}.{k}: unknown field (known: {', '.join(known)})")
    return value


def build(path: str, cls: Any, raw: Any, keys: dict[str, str], required: tuple[str, ...] = (),
          **fixed: Any) -> Any:
    """cls(**raw) with YAML keys renamed to fields; errors prefixed with `path`."""
    d = mapping(path, raw, tuple(keys))
    for k in required:
        if k not in d:
            raise ValueError(f"{path}.{k}: required")
    try:
        return cls(**{keys[k]: v for k, v in d.items() if keys[k] not in fixed}, **fixed)
    except ValueError as exc:  # name the field as the YAML spells it
        name, sep, rest = str(exc).partition(":")
        inv = {f: k for k, f in keys.items()}
        raise ValueError(f"{path}.{inv.get(name, name)}{sep}{rest}") from None


def _fields(obj: Any, keys: dict[str, str]) -> dict:
    return {k: getattr(obj, f) for k, f in keys.items()}


# -- from the YAML form ----------------------------------------------------------------
def classification_from(path: str, raw: Any) -> Classification:
    """`classification: {policy, classes: [{name, dscp, qos_group}], default_group}`."""
    c = mapping(path, raw, ("policy", "classes", "default_group"))
    if not isinstance(c.get("classes", []), list):
        raise ValueError(f"{path}.classes: expected a list, got {c['classes']!r}")
    classes = tuple(build(f"{path}.classes[{i}]", TrafficClass, tc, CLASS_KEYS,
                          tuple(CLASS_KEYS)) for i, tc in enumerate(c.get("classes", [])))
    c_keys = {k: k for k in ("policy", "classes", "default_group")}
    return build(path, Classification, c, c_keys,
                 **({"classes": classes} if "classes" in c else {}))


def queuing_from(path: str, raw: Any) -> Queuing:
    """`queuing: {policy, limit, queues: {N: {strict, bandwidth_percent, limit, wred}}}`;
    without `queues` the book's queues (with `limit` if given)."""
    qd = mapping(path, raw, ("policy", "queues", "limit"))
    limit = prefixed(path, size, "limit", qd.get("limit", QueueConfig.limit_bytes))
    queues = [QueueConfig(limit_bytes=limit) for _ in range(NUM_QUEUES)]
    given = qd.get("queues")
    if given is None:
        queues = [replace(q, limit_bytes=limit) for q in Queuing().queues]
    elif not isinstance(given, dict):
        raise ValueError(f"{path}.queues: expected a mapping queue -> settings, got {given!r}")
    for key, qv in (given or {}).items():
        try:
            i = int_in("queue", int(key), 0, NUM_QUEUES - 1)
        except (TypeError, ValueError):
            raise ValueError(f"{path}.queues: queue must be 0..7, got {key!r}") from None
        qp = f"{path}.queues[{i}]"
        qv = dict(mapping(qp, qv, tuple(QUEUE_KEYS)))
        if qv.get("wred") is not None:
            qv["wred"] = build(f"{qp}.wred", Wred, qv["wred"], WRED_KEYS,
                               ("min", "max", "max_prob"))
        queues[i] = build(qp, QueueConfig, {"limit": limit, **qv}, QUEUE_KEYS)
    return prefixed(path, Queuing, str(qd.get("policy", Queuing.policy)), tuple(queues))


def pfc_from(path: str, raw: Any) -> Pfc:
    """`pfc: {policy, no_drop, xoff, xon, headroom, pause_quanta}`."""
    return build(path, Pfc, raw, PFC_KEYS)


def watchdog_from(path: str, raw: Any) -> Watchdog:
    """`watchdog: {enabled, detect, restore, action}`."""
    return build(path, Watchdog, raw, WATCHDOG_KEYS)


def cnp_from(path: str, raw: Any) -> dict[str, int]:
    """`cnp: {dscp, priority}` -> QosConfig keyword arguments."""
    return build(path, dict, raw, CNP_KEYS)


def interfaces_from(path: str, raw: Any) -> dict[str, InterfaceQos]:
    """`interfaces: {default: {...}, eth1: {pfc_mode, watchdog, classify}}`."""
    ifs = mapping(path, raw, tuple(raw) if isinstance(raw, dict) else ())
    return {str(n): build(f"{path}.{n}", InterfaceQos, v, INTERFACE_KEYS) for n, v in ifs.items()}


# -- to the YAML form ------------------------------------------------------------------
def classification_dict(c: Classification) -> dict:
    """Inverse of classification_from."""
    return {"policy": c.policy,
            "classes": [{"name": tc.name, "dscp": list(tc.dscp), "qos_group": tc.qos_group}
                        for tc in c.classes],
            "default_group": c.default_group}


def queuing_dict(q: Queuing) -> dict:
    """Inverse of queuing_from (every queue spelled out)."""
    queues = {}
    for i, qc in enumerate(q.queues):
        d: dict[str, Any] = {"strict": qc.strict, "bandwidth_percent": qc.bandwidth_percent,
                             "limit": qc.limit_bytes}
        if qc.wred is not None:
            d["wred"] = _fields(qc.wred, WRED_KEYS)
        queues[i] = d
    return {"policy": q.policy, "queues": queues}


def pfc_dict(p: Pfc) -> dict:
    """Inverse of pfc_from."""
    return {**_fields(p, PFC_KEYS), "no_drop": sorted(p.no_drop)}


def watchdog_dict(w: Watchdog) -> dict:
    """Inverse of watchdog_from."""
    return _fields(w, WATCHDOG_KEYS)


def interface_dict(iq: InterfaceQos) -> dict:
    """One entry of `interfaces`."""
    return _fields(iq, INTERFACE_KEYS)
