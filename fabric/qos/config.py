"""Switch QoS configuration for RoCEv2: typed, validated, frozen (book ch.11, Fig 11-8).

The book's DCQCN switch configuration (ch.11 "DCQCN Configuration", Examples 11-1..11-7)
as data: classification (DSCP -> qos-group; qos-group n is egress queue n and PFC
priority n, DSCP-based PFC), egress queuing (strict queue 7, "bandwidth remaining
percent", WRED + ECN on queue 3), network-qos (no-drop priority 3, MTU 9216), the PFC
xOFF/xON/headroom thresholds the book leaves implicit, the PFC watchdog, the CNP
priority and per-interface settings (`priority-flow-control mode auto|on|off`,
`watch-dog`, `service-policy type qos input`).

Default thresholds honour the book's rule of thumb **xON < WRED min < WRED max < xOFF**
(ECN acts before PFC): WRED 150 KB / 3000 KB (book) sits between xON = 100 KB and
xOFF = 3200 KB. xOFF is per ingress port and priority; 3.2 MB + 200 KB headroom per
lossless port-priority fits the ~100 MB shared buffer of a 64 x 400G switch, where a
port borrows from the shared pool. Headroom 200 KB covers 2 x one-way delay x rate +
2 MTU at 400G up to ~1.7 us of cable (`headroom_needed`). All sizes are model bytes
(identical in the lab, see fabric.timedil); durations are model seconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fabric.timedil import parse_duration, parse_size

NUM_QUEUES = 8
PFC_MODES = ("auto", "on", "off")
WATCHDOG_ACTIONS = ("drop", "forward")
MTU_RANGE = (1500, 9216)  # NX-OS network-qos mtu range


def _int_in(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}: must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _size(name: str, value: Any) -> int:
    try:
        n = parse_size(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not a size (e.g. 150KB), got {value!r}") from None
    if n < 0:
        raise ValueError(f"{name}: must be >= 0 bytes, got {value!r}")
    return n


def _duration(name: str, value: Any) -> float:
    try:
        s = parse_duration(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not a duration (e.g. 200ms), got {value!r}") from None
    if not s > 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return s


def _percent(name: str, value: Any) -> float:
    if isinstance(value, str):
        value = value.strip().rstrip("%")
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not a percentage, got {value!r}") from None
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"{name}: must be in 0..100 %, got {value!r}")
    return p


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: must be true or false, got {value!r}")
    return value


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # normalise a field of a frozen dataclass


def _prefixed(path: str, fn, *args, **kwargs):
    """Call fn; re-raise its ValueError with `path.` in front of the field name."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise ValueError(f"{path}.{exc}") from None


# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrafficClass:
    """A `class-map type qos` plus its `set qos-group` (Examples 11-1, 11-2)."""

    name: str
    dscp: tuple[int, ...]
    qos_group: int

    def __post_init__(self) -> None:
        dscp = self.dscp
        _set(self, "dscp", tuple(dscp) if isinstance(dscp, (list, tuple)) else (dscp,))
        for d in self.dscp:
            _int_in("dscp", d, 0, 63)
        _int_in("qos_group", self.qos_group, 0, NUM_QUEUES - 1)


BOOK_CLASSES = (TrafficClass("ROCEv2", (24,), 3), TrafficClass("CNP", (48,), 7))


@dataclass(frozen=True)
class Classification:
    """DSCP -> qos-group (first matching class wins; the rest -> default_group)."""

    policy: str = "QOS_CLASSIFICATION"
    classes: tuple[TrafficClass, ...] = BOOK_CLASSES
    default_group: int = 0

    def __post_init__(self) -> None:
        _set(self, "classes", tuple(self.classes))
        _int_in("default_group", self.default_group, 0, NUM_QUEUES - 1)

    @functools.cached_property
    def table(self) -> tuple[int, ...]:
        """64 entries: qos-group of each DSCP value (what the classify stage indexes)."""
        t = [-1] * 64
        for c in self.classes:
            for d in c.dscp:
                if t[d] < 0:
                    t[d] = c.qos_group
        return tuple(self.default_group if g < 0 else g for g in t)

    def group_of(self, dscp: int) -> int:
        """qos-group (= egress queue = PFC priority) of a DSCP value."""
        return self.table[dscp & 0x3F]


@dataclass(frozen=True)
class Wred:
    """`random-detect minimum-threshold maximum-threshold drop-probability weight [ecn]`."""

    min_bytes: int
    max_bytes: int
    max_prob_pct: float  # NX-OS drop-probability, percent
    weight: int = 0  # 0 = instantaneous depth (book)
    ecn: bool = True

    def __post_init__(self) -> None:
        _set(self, "min_bytes", _size("min_bytes", self.min_bytes))
        _set(self, "max_bytes", _size("max_bytes", self.max_bytes))
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes: must be <= max_bytes ({self.max_bytes}), "
                             f"got {self.min_bytes!r}")
        _set(self, "max_prob_pct", _percent("max_prob_pct", self.max_prob_pct))
        _int_in("weight", self.weight, 0, 15)
        _flag("ecn", self.ecn)

    @property
    def max_prob(self) -> float:
        """Marking/drop probability at max_bytes as a fraction 0..1."""
        return self.max_prob_pct / 100.0


@dataclass(frozen=True)
class QueueConfig:
    """One egress queue (`class type queuing c-out-8q-qN`, Example 11-3)."""

    strict: bool = False  # priority level 1
    bandwidth_percent: int = 0  # bandwidth remaining percent
    wred: Wred | None = None
    limit_bytes: int = 10_000_000  # tail-drop threshold of the queue

    def __post_init__(self) -> None:
        _flag("strict", self.strict)
        _int_in("bandwidth_percent", self.bandwidth_percent, 0, 100)
        _set(self, "limit_bytes", _size("limit_bytes", self.limit_bytes))
        if self.limit_bytes == 0:
            raise ValueError(f"limit_bytes: must be > 0, got {self.limit_bytes!r}")


def _book_queues() -> tuple[QueueConfig, ...]:
    q = [QueueConfig() for _ in range(NUM_QUEUES)]
    q[0] = QueueConfig(bandwidth_percent=50)
    # the no-drop queue must hold N ingress ports x (xOFF + headroom) without tail drop:
    # 24 MB covers a 6:1 incast at the default 3.2 MB + 0.2 MB per ingress port
    q[3] = QueueConfig(bandwidth_percent=50, wred=Wred(150_000, 3_000_000, 7.0, 0, True),
                       limit_bytes=24_000_000)
    q[7] = QueueConfig(strict=True)
    return tuple(q)


@dataclass(frozen=True)
class Queuing:
    """`policy-map type queuing`: 8 queues, index = queue number = qos-group."""

    policy: str = "QOS_EGRESS_PORT"
    queues: tuple[QueueConfig, ...] = field(default_factory=_book_queues)

    def __post_init__(self) -> None:
        if len(self.queues) != NUM_QUEUES:
            raise ValueError(f"queues: need exactly {NUM_QUEUES}, got {len(self.queues)}")

    @property
    def strict(self) -> frozenset[int]:
        """Strict-priority queues."""
        return frozenset(i for i, q in enumerate(self.queues) if q.strict)


@dataclass(frozen=True)
class Pfc:
    """`policy-map type network-qos` (Example 11-4) + PFC thresholds per ingress port/priority."""

    policy: str = "qos_network"
    no_drop: frozenset[int] = frozenset({3})  # pause pfc-cos 3
    xoff_bytes: int = 3_200_000
    xon_bytes: int = 100_000
    headroom_bytes: int = 200_000
    pause_quanta: int = 0xFFFF

    def __post_init__(self) -> None:
        if not isinstance(self.no_drop, (list, tuple, set, frozenset)):
            raise ValueError(f"no_drop: expected a list of priorities, got {self.no_drop!r}")
        _set(self, "no_drop", frozenset(self.no_drop))
        for p in sorted(self.no_drop):
            _int_in("no_drop", p, 0, NUM_QUEUES - 1)
        for name in ("xoff_bytes", "xon_bytes", "headroom_bytes"):
            _set(self, name, _size(name, getattr(self, name)))
        if self.xon_bytes >= self.xoff_bytes:
            raise ValueError(f"xon_bytes: must be < xoff_bytes ({self.xoff_bytes}), "
                             f"got {self.xon_bytes!r}")
        _int_in("pause_quanta", self.pause_quanta, 1, 0xFFFF)


@dataclass(frozen=True)
class Watchdog:
    """PFC watchdog (Example 11-5): a queue paused longer than detect_s is acted on."""

    enabled: bool = True
    detect_s: float = 0.2  # model seconds
    restore_s: float = 0.2
    action: str = "drop"  # drop | forward the paused queue's traffic

    def __post_init__(self) -> None:
        _flag("enabled", self.enabled)
        _set(self, "detect_s", _duration("detect_s", self.detect_s))
        _set(self, "restore_s", _duration("restore_s", self.restore_s))
        if self.action not in WATCHDOG_ACTIONS:
            raise ValueError(f"action: must be one of {'|'.join(WATCHDOG_ACTIONS)}, "
                             f"got {self.action!r}")


@dataclass(frozen=True)
class InterfaceQos:
    """Per-port settings (Example 11-7)."""

    pfc_mode: str = "auto"  # priority-flow-control mode auto|on|off
    watchdog: bool = True  # priority-flow-control watch-dog
    classify: bool = True  # service-policy type qos input <classification>

    def __post_init__(self) -> None:
        if self.pfc_mode not in PFC_MODES:
            raise ValueError(f"pfc_mode: must be one of {'|'.join(PFC_MODES)}, "
                             f"got {self.pfc_mode!r}")
        _flag("watchdog", self.watchdog)
        _flag("classify", self.classify)


@dataclass(frozen=True)
class QosConfig:
    """The whole switch QoS configuration; defaults = the book's (ch.11)."""

    name: str = "book"
    classification: Classification = field(default_factory=Classification)
    queuing: Queuing = field(default_factory=Queuing)
    pfc: Pfc = field(default_factory=Pfc)
    watchdog: Watchdog = field(default_factory=Watchdog)
    mtu: int = 9216
    cnp_dscp: int = 48
    cnp_priority: int = 7  # book: strict queue 7; NVIDIA NICs use 6
    default_interface: InterfaceQos = field(default_factory=InterfaceQos)
    interfaces: tuple[tuple[str, InterfaceQos], ...] = ()

    def __post_init__(self) -> None:
        _int_in("mtu", self.mtu, *MTU_RANGE)
        _int_in("cnp_dscp", self.cnp_dscp, 0, 63)
        _int_in("cnp_priority", self.cnp_priority, 0, NUM_QUEUES - 1)
        total = sum(q.bandwidth_percent for q in self.queuing.queues if not q.strict)
        if total > 100:
            raise ValueError(f"queuing.queues.bandwidth_percent: non-strict queues sum to "
                             f"{total} %, more than 100 %")
        names = [n for n, _ in self.interfaces]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"interfaces: duplicate interface {sorted(dup)[0]!r}")

    # -- look-ups used by the agent ----------------------------------------------------
    def port(self, ifname: str) -> InterfaceQos:
        """Settings of one port: its own block, else the default."""
        for name, iq in self.interfaces:
            if name == ifname:
                return iq
        return self.default_interface

    def watchdog_on(self, ifname: str) -> bool:
        """Is the PFC watchdog active on this port (global and per interface)?"""
        return self.watchdog.enabled and self.port(ifname).watchdog

    # -- validation ---------------------------------------------------------------------
    def validate(self, ports: list[str] | None = None) -> list[str]:
        """Warnings about legal but dubious settings (errors were raised at construction)."""
        w: list[str] = []
        p = self.pfc
        seen: dict[int, str] = {}
        for c in self.classification.classes:
            for d in c.dscp:
                if d in seen and seen[d] != c.name:
                    w.append(f"classification: DSCP {d} is in classes {seen[d]} and {c.name}; "
                             f"the first ({seen[d]}) wins")
                seen.setdefault(d, c.name)
        for prio in sorted(p.no_drop):
            q = self.queuing.queues[prio]
            where = f"queue {prio} (no-drop)"
            if q.wred is None or not q.wred.ecn:
                w.append(f"{where}: no WRED with ecn: DCQCN gets no CE marks, PFC alone "
                         f"controls congestion" + (" and WRED drops packets" if q.wred else ""))
            if q.wred is not None:
                if p.xoff_bytes <= q.wred.min_bytes:
                    w.append(f"pfc.xoff_bytes {p.xoff_bytes} <= WRED min {q.wred.min_bytes} on "
                             f"{where}: xOFF before ECN, expect abrupt pauses, head-of-line "
                             f"blocking and stop-and-go oscillation (ch.11)")
                elif not p.xon_bytes < q.wred.min_bytes < q.wred.max_bytes < p.xoff_bytes:
                    w.append(f"{where}: rule of thumb xON < WRED min < WRED max < xOFF broken: "
                             f"{p.xon_bytes} / {q.wred.min_bytes} / {q.wred.max_bytes} / "
                             f"{p.xoff_bytes} bytes (ch.11)")
        for i, q in enumerate(self.queuing.queues):
            if q.wred is not None and q.limit_bytes < q.wred.max_bytes:
                w.append(f"queuing.queues[{i}].limit_bytes {q.limit_bytes} < WRED max "
                         f"{q.wred.max_bytes}: tail drops before WRED max")
        used = set(self.classification.table)
        for g in sorted(used):
            q = self.queuing.queues[g]
            if not q.strict and q.bandwidth_percent == 0:
                w.append(f"queue {g}: receives traffic (qos-group {g}) but has 0 % bandwidth and "
                         f"no priority: it is served only when every other queue is empty")
        total = sum(q.bandwidth_percent for q in self.queuing.queues if not q.strict)
        if total < 100:
            w.append(f"queuing: non-strict bandwidth sums to {total} %, not 100 %")
        if self.classification.group_of(self.cnp_dscp) != self.cnp_priority:
            w.append(f"cnp_dscp {self.cnp_dscp} is classified into qos-group "
                     f"{self.classification.group_of(self.cnp_dscp)}, not cnp_priority "
                     f"{self.cnp_priority}")
        if not self.queuing.queues[self.cnp_priority].strict:
            w.append(f"cnp_priority {self.cnp_priority}: queue is not strict priority; CNPs can "
                     f"wait behind data (the book uses strict queue 7)")
        if self.interfaces and not self.default_interface.classify:
            on = [n for n, iq in self.interfaces if iq.classify]
            w.append(f"classification {self.classification.policy} is applied only on "
                     f"{', '.join(on) or 'no interface'}; other ports leave all traffic in "
                     f"qos-group {self.classification.default_group}")
        if ports is not None:
            for name, _ in self.interfaces:
                if name not in ports:
                    w.append(f"interfaces: {name!r} is not a port of this switch "
                             f"({', '.join(ports)})")
        return w

    def headroom_needed(self, model_bps: float, delay_s: float) -> int:
        """Bytes in flight after xOFF on a link: 2 x delay x rate + 2 MTU (ch.11 headroom)."""
        return int(2 * delay_s * model_bps / 8 + 2 * self.mtu)

    # -- (de)serialisation --------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain JSON-able dict in the YAML schema (sizes in bytes, durations in s)."""
        queues = {}
        for i, q in enumerate(self.queuing.queues):
            d: dict[str, Any] = {"strict": q.strict, "bandwidth_percent": q.bandwidth_percent,
                                 "limit": q.limit_bytes}
            if q.wred is not None:
                d["wred"] = {"min": q.wred.min_bytes, "max": q.wred.max_bytes,
                             "max_prob": q.wred.max_prob_pct, "weight": q.wred.weight,
                             "ecn": q.wred.ecn}
            queues[i] = d
        return {
            "name": self.name,
            "classification": {
                "policy": self.classification.policy,
                "classes": [{"name": c.name, "dscp": list(c.dscp), "qos_group": c.qos_group}
                            for c in self.classification.classes],
                "default_group": self.classification.default_group},
            "queuing": {"policy": self.queuing.policy, "queues": queues},
            "pfc": {"policy": self.pfc.policy, "no_drop": sorted(self.pfc.no_drop),
                    "xoff": self.pfc.xoff_bytes, "xon": self.pfc.xon_bytes,
                    "headroom": self.pfc.headroom_bytes, "pause_quanta": self.pfc.pause_quanta},
            "watchdog": {"enabled": self.watchdog.enabled, "detect": self.watchdog.detect_s,
                         "restore": self.watchdog.restore_s, "action": self.watchdog.action},
            "mtu": self.mtu,
            "cnp": {"dscp": self.cnp_dscp, "priority": self.cnp_priority},
            "interfaces": {"default": _iface_dict(self.default_interface),
                           **{n: _iface_dict(iq) for n, iq in self.interfaces}},
        }

    @classmethod
    def from_dict(cls, data: dict, source: str = "qos") -> "QosConfig":
        """Build from the YAML schema; unknown keys and bad values name the field."""
        return _from_dict(data, source)


def _iface_dict(iq: InterfaceQos) -> dict:
    return {"pfc_mode": iq.pfc_mode, "watchdog": iq.watchdog, "classify": iq.classify}


def _mapping(path: str, value: Any, known: tuple[str, ...]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a mapping, got {value!r}")
    for k in value:
        if k not in known:
            raise ValueError(f"{path}.{k}: unknown field (known: {', '.join(known)})")
    return value


def _build(path: str, cls, raw: Any, keys: dict[str, str], required: tuple[str, ...] = (),
           **fixed):
    """cls(**raw) with YAML keys renamed to fields; errors prefixed with `path`."""
    d = _mapping(path, raw, tuple(keys))
    for k in required:
        if k not in d:
            raise ValueError(f"{path}.{k}: required")
    try:
        return cls(**{keys[k]: v for k, v in d.items() if keys[k] not in fixed}, **fixed)
    except ValueError as exc:  # name the field as the YAML spells it
        name, sep, rest = str(exc).partition(":")
        inv = {f: k for k, f in keys.items()}
        raise ValueError(f"{path}.{inv.get(name, name)}{sep}{rest}") from None


_WRED_KEYS = {"min": "min_bytes", "max": "max_bytes", "max_prob": "max_prob_pct",
              "weight": "weight", "ecn": "ecn"}
_QUEUE_KEYS = {"strict": "strict", "bandwidth_percent": "bandwidth_percent", "wred": "wred",
               "limit": "limit_bytes"}
_PFC_KEYS = {"policy": "policy", "no_drop": "no_drop", "xoff": "xoff_bytes", "xon": "xon_bytes",
             "headroom": "headroom_bytes", "pause_quanta": "pause_quanta"}
_WD_KEYS = {"enabled": "enabled", "detect": "detect_s", "restore": "restore_s", "action": "action"}
_IF_KEYS = {"pfc_mode": "pfc_mode", "watchdog": "watchdog", "classify": "classify"}


def _from_dict(data: dict, src: str) -> QosConfig:
    d = _mapping(src, data, ("kind", "name", "description", "classification", "queuing", "pfc",
                             "watchdog", "mtu", "cnp", "interfaces"))
    kw: dict[str, Any] = {k: d[k] for k in ("name", "mtu") if k in d}
    if "classification" in d:
        path = f"{src}.classification"
        c = _mapping(path, d["classification"], ("policy", "classes", "default_group"))
        if not isinstance(c.get("classes", []), list):
            raise ValueError(f"{path}.classes: expected a list, got {c['classes']!r}")
        tc_keys = {k: k for k in ("name", "dscp", "qos_group")}
        classes = tuple(_build(f"{path}.classes[{i}]", TrafficClass, tc, tc_keys, tuple(tc_keys))
                        for i, tc in enumerate(c.get("classes", [])))
        c_keys = {k: k for k in ("policy", "classes", "default_group")}
        kw["classification"] = _build(path, Classification, c, c_keys,
                                      **({"classes": classes} if "classes" in c else {}))
    if "queuing" in d:
        kw["queuing"] = _queuing(f"{src}.queuing", d["queuing"])
    if "pfc" in d:
        kw["pfc"] = _build(f"{src}.pfc", Pfc, d["pfc"], _PFC_KEYS)
    if "watchdog" in d:
        kw["watchdog"] = _build(f"{src}.watchdog", Watchdog, d["watchdog"], _WD_KEYS)
    if "cnp" in d:
        kw.update(_build(f"{src}.cnp", dict, d["cnp"], {"dscp": "cnp_dscp",
                                                         "priority": "cnp_priority"}))
    if "interfaces" in d:
        raw = d["interfaces"]
        ifs = _mapping(f"{src}.interfaces", raw, tuple(raw) if isinstance(raw, dict) else ())
        built = {str(n): _build(f"{src}.interfaces.{n}", InterfaceQos, v, _IF_KEYS)
                 for n, v in ifs.items()}
        if "default" in built:
            kw["default_interface"] = built.pop("default")
        kw["interfaces"] = tuple(built.items())
    return _prefixed(src, QosConfig, **kw)


def _queuing(path: str, value: Any) -> Queuing:
    qd = _mapping(path, value, ("policy", "queues", "limit"))
    limit = _prefixed(path, _size, "limit", qd.get("limit", QueueConfig.limit_bytes))
    queues = [QueueConfig(limit_bytes=limit) for _ in range(NUM_QUEUES)]
    raw = qd.get("queues")
    if raw is None:
        queues = [replace(q, limit_bytes=limit) for q in Queuing().queues]
    elif not isinstance(raw, dict):
        raise ValueError(f"{path}.queues: expected a mapping queue -> settings, got {raw!r}")
    for key, qv in (raw or {}).items():
        try:
            i = _int_in("queue", int(key), 0, NUM_QUEUES - 1)
        except (TypeError, ValueError):
            raise ValueError(f"{path}.queues: queue must be 0..7, got {key!r}") from None
        qp = f"{path}.queues[{i}]"
        qv = dict(_mapping(qp, qv, tuple(_QUEUE_KEYS)))
        if qv.get("wred") is not None:
            qv["wred"] = _build(f"{qp}.wred", Wred, qv["wred"], _WRED_KEYS,
                                ("min", "max", "max_prob"))
        queues[i] = _build(qp, QueueConfig, {"limit": limit, **qv}, _QUEUE_KEYS)
    return _prefixed(path, Queuing, str(qd.get("policy", Queuing.policy)), tuple(queues))
