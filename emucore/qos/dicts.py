"""The YAML/JSON form of the QoS configuration's stages (presets/*.yaml; the agent's
start-up JSON): sizes in bytes or with units ("150KB"), durations in seconds or with
units ("200ms"). Each stage is read and written by its `emucore.yamlform.Form` - the one
reader of every configuration part (trim, LLR, CBFC and load balancing declare theirs
beside their types). Unknown keys and bad values raise ValueError naming the field as
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
from emucore.yamlform import Form, mapping

#: top-level keys of the schema
TOP_KEYS = ("kind", "name", "description", "classification", "queuing", "pfc", "watchdog",
            "mtu", "cnp", "interfaces", "load_balance", "trim", "llr", "cbfc")
# YAML key -> dataclass field, per part
WRED = Form({"min": "min_bytes", "max": "max_bytes", "max_prob": "max_prob_pct",
             "weight": "weight", "ecn": "ecn"}, required=("min", "max", "max_prob"))
QUEUE = Form({"strict": "strict", "bandwidth_percent": "bandwidth_percent", "wred": "wred",
              "limit": "limit_bytes"})
PFC = Form({"policy": "policy", "no_drop": "no_drop", "xoff": "xoff_bytes",
            "xon": "xon_bytes", "headroom": "headroom_bytes", "pause_quanta": "pause_quanta"},
           write={"no_drop": sorted})
WATCHDOG = Form({"enabled": "enabled", "detect": "detect_s", "restore": "restore_s",
                 "action": "action"})
INTERFACE = Form({"pfc_mode": "pfc_mode", "watchdog": "watchdog", "classify": "classify"})
CLASS = Form({"name": "name", "dscp": "dscp", "qos_group": "qos_group"},
             required=("name", "dscp", "qos_group"), write={"dscp": list})
CLASSIFICATION = Form({k: k for k in ("policy", "classes", "default_group")})
CNP = Form({"dscp": "cnp_dscp", "priority": "cnp_priority"})


# -- from the YAML form ----------------------------------------------------------------
def classification_from(path: str, raw: Any) -> Classification:
    """`classification: {policy, classes: [{name, dscp, qos_group}], default_group}`."""
    c = mapping(path, raw, tuple(CLASSIFICATION.keys))
    if not isinstance(c.get("classes", []), list):
        raise ValueError(f"{path}.classes: expected a list, got {c['classes']!r}")
    classes = tuple(CLASS.build(f"{path}.classes[{i}]", TrafficClass, tc)
                    for i, tc in enumerate(c.get("classes", [])))
    return CLASSIFICATION.build(path, Classification, c,
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
        qv = dict(mapping(qp, qv, tuple(QUEUE.keys)))
        if qv.get("wred") is not None:
            qv["wred"] = WRED.build(f"{qp}.wred", Wred, qv["wred"])
        queues[i] = QUEUE.build(qp, QueueConfig, {"limit": limit, **qv})
    return prefixed(path, Queuing, str(qd.get("policy", Queuing.policy)), tuple(queues))


def pfc_from(path: str, raw: Any) -> Pfc:
    """`pfc: {policy, no_drop, xoff, xon, headroom, pause_quanta}`."""
    return PFC.build(path, Pfc, raw)


def watchdog_from(path: str, raw: Any) -> Watchdog:
    """`watchdog: {enabled, detect, restore, action}`."""
    return WATCHDOG.build(path, Watchdog, raw)


def cnp_from(path: str, raw: Any) -> dict[str, int]:
    """`cnp: {dscp, priority}` -> QosConfig keyword arguments."""
    return CNP.build(path, dict, raw)


def interfaces_from(path: str, raw: Any) -> dict[str, InterfaceQos]:
    """`interfaces: {default: {...}, eth1: {pfc_mode, watchdog, classify}}`."""
    ifs = mapping(path, raw, tuple(raw) if isinstance(raw, dict) else ())
    return {str(n): INTERFACE.build(f"{path}.{n}", InterfaceQos, v) for n, v in ifs.items()}


# -- to the YAML form ------------------------------------------------------------------
def classification_dict(c: Classification) -> dict:
    """Inverse of classification_from."""
    return {**CLASSIFICATION.dict_of(c), "classes": [CLASS.dict_of(tc) for tc in c.classes]}


def queuing_dict(q: Queuing) -> dict:
    """Inverse of queuing_from (every queue spelled out)."""
    queues = {}
    for i, qc in enumerate(q.queues):
        d: dict[str, Any] = {"strict": qc.strict, "bandwidth_percent": qc.bandwidth_percent,
                             "limit": qc.limit_bytes}
        if qc.wred is not None:
            d["wred"] = WRED.dict_of(qc.wred)
        queues[i] = d
    return {"policy": q.policy, "queues": queues}


def pfc_dict(p: Pfc) -> dict:
    """Inverse of pfc_from."""
    return PFC.dict_of(p)


def watchdog_dict(w: Watchdog) -> dict:
    """Inverse of watchdog_from."""
    return WATCHDOG.dict_of(w)


def interface_dict(iq: InterfaceQos) -> dict:
    """One entry of `interfaces`."""
    return INTERFACE.dict_of(iq)
