"""Parse the book's NX-OS QoS snippets into a `QosConfig` (book ch.11, Examples 11-1..11-7).

An engineer pastes the configuration of Figure 11-8 as printed in the book and gets the
effective switch configuration. Supported, and nothing more:

* ``class-map type qos [match-all|match-any] NAME`` + ``match dscp 24[,26][,30-32]``
* ``policy-map type qos NAME`` + ``class NAME`` + ``set qos-group N`` (``class-default``)
* ``class-map type queuing NAME`` + ``match qos-group N``
* ``policy-map type queuing NAME`` + ``class type queuing c-out-8q-qN|c-out-8q-q-default|NAME``
  + ``priority level 1`` / ``bandwidth remaining percent N`` /
  ``random-detect minimum-threshold N kbytes maximum-threshold N kbytes
  drop-probability P weight W [ecn]`` (units bytes|kbytes|mbytes; kbyte = 1000 B as
  elsewhere in emu)
* ``class-map type network-qos NAME`` + ``match qos-group N``;
  ``policy-map type network-qos NAME`` + ``class type network-qos c-8q-nqN|NAME`` +
  ``pause pfc-cos N[,M]`` + ``mtu N``
* ``system qos`` + ``service-policy type qos input|queuing output|network-qos NAME``
* ``interface ethernet1/N`` (also ``Ethernet 2/24``, ranges ``ethernet1/1-8``, lists
  with commas, ``ethN``) + ``priority-flow-control mode auto|on|off``,
  ``priority-flow-control watch-dog``, ``priority-flow-control watch-dog-interval on|off``,
  ``service-policy type qos input NAME``
* global ``priority-flow-control watch-dog-interval on|off`` (Example 11-5)
* ``hardware profile dlb`` + ``dlb-interface Eth1/N`` + ``mac-address M`` +
  ``mode per-packet|flowlet`` (ch.12 Example 12-1: Cisco Dynamic Load Balancing) ->
  `QosConfig.load_balance` (`emucore.lbconfig`): per-packet is spraying, flowlet is flowlet
  adaptive routing (the mode when none is given); the DLB MAC defaults to
  00:CC:CC:CC:CC:CC. Knobs the snippet does not carry (gap, thresholds) keep
  `emucore.lbconfig`'s defaults.

Indentation does not matter; ``!`` lines are comments. The seed text of the book is a
PDF extraction, so four of its artefacts are accepted: several commands on one line
("set qos-group 3 class CNP"), a word wrapped at a hyphen ("maximum-" / "threshold"),
``...`` elision lines and CLI prompts printed with the commands (``switch(config-dlb)#``). Anything else unknown or malformed raises ValueError naming
the line number and text.

Semantics follow NX-OS: the paste is applied on top of a factory-default switch
(`factory_default`: no classification, q-default 100 %, no PFC class, watchdog off);
only policies bound under ``system qos`` or an interface take effect. Module 1 ports map
to the emulator's port names (``Ethernet1/5`` -> ``eth5``); others keep the NX-OS name.
Values NX-OS snippets do not carry (xON/xOFF/headroom, queue limits, watchdog timers)
come from `base` (default: the book thresholds of `emucore.qos.qosconfig`). The way back,
configuration to NX-OS text, is `emucore.qos.nxos_render.to_nxos`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from emucore.lbconfig import DEFAULT_DLB_MAC, LoadBalance
from emucore.qos.classify import Classification, TrafficClass
from emucore.qos.qosconfig import QosConfig
from emucore.qos.fields import NUM_QUEUES
from emucore.qos.interface import InterfaceQos
from emucore.qos.nxos_lines import Line, interfaces, logical_lines
from emucore.qos.queuing import QueueConfig, Queuing
from emucore.qos.wred import Wred

UNITS = {"bytes": 1, "kbytes": 1000, "mbytes": 1000 ** 2}


def factory_default(base: QosConfig | None = None) -> QosConfig:
    """An NX-OS switch before the book's configuration (thresholds kept from `base`)."""
    base = base or QosConfig()
    queues = tuple(QueueConfig(bandwidth_percent=100 if i == 0 else 0,
                               limit_bytes=base.queuing.queues[i].limit_bytes)
                   for i in range(NUM_QUEUES))
    return replace(base, name="nxos",
                   classification=Classification("default-in-policy", (), 0),
                   queuing=Queuing("default-8q-out-policy", queues),
                   pfc=replace(base.pfc, policy="default-8q-nq-policy", no_drop=frozenset()),
                   watchdog=replace(base.watchdog, enabled=False),
                   default_interface=InterfaceQos("auto", True, False), interfaces=())


@dataclass
class _State:
    qos_cmaps: dict[str, set[int]] = field(default_factory=dict)
    group_cmaps: dict[str, dict[str, int]] = field(default_factory=lambda: {"queuing": {},
                                                                            "network-qos": {}})
    qos_pols: dict[str, dict] = field(default_factory=dict)  # name -> {"classes", "default"}
    queuing_pols: dict[str, dict[int, dict]] = field(default_factory=dict)
    nq_pols: dict[str, dict[int, dict]] = field(default_factory=dict)
    bound: dict[str, tuple[str, int]] = field(default_factory=dict)  # kind -> (policy, line)
    ifaces: dict[str, dict] = field(default_factory=dict)
    watchdog: bool | None = None
    dlb: dict | None = None  # hardware profile dlb: {"interfaces", "mac", "mode"}
    ctx: tuple = ("top",)


def _queue_of_class(name: str, st: _State, kind: str, ln: Line) -> int:
    fixed = {"queuing": "c-out-8q-q", "network-qos": "c-8q-nq"}[kind]
    low = name.lower()
    if low == f"{fixed}-default":
        return 0
    if low.startswith(fixed) and low[len(fixed):].isdigit() and int(low[len(fixed):]) < NUM_QUEUES:
        return int(low[len(fixed):])
    if name in st.group_cmaps[kind]:
        return st.group_cmaps[kind][name]
    raise ln.error(f"class {name!r}: no class-map type {kind} of that name "
                   f"(nor {fixed}0..7 / {fixed}-default)")


def _command(ln: Line, st: _State) -> None:
    w = ln.word("class-map", "policy-map", "class", "match", "set", "priority", "bandwidth",
                "random-detect", "pause", "mtu", "system", "service-policy", "interface",
                "priority-flow-control", "hardware", "dlb-interface", "mac-address", "mode")
    ctx = st.ctx
    if w in ("hardware", "dlb-interface", "mac-address", "mode"):
        _dlb_command(w, ln, st)
    elif w == "class-map":
        ln.word("type")
        kind = ln.word("qos", "queuing", "network-qos")
        mode = ln.word("match-all", "match-any") if ln.peek() in ("match-all", "match-any") \
            else "match-all"
        name = ln.take("a class-map name")
        if kind == "qos":
            st.qos_cmaps[name] = set()
        st.ctx = ("cmap", kind, name, mode, [])
    elif w == "policy-map":
        ln.word("type")
        kind = ln.word("qos", "queuing", "network-qos")
        name = ln.take("a policy-map name")
        {"qos": st.qos_pols, "queuing": st.queuing_pols, "network-qos": st.nq_pols}[kind][name] = \
            {"classes": [], "default": 0} if kind == "qos" else {}
        st.ctx = ("pmap", kind, name)
    elif w == "class":
        if ctx[0] not in ("pmap", "pclass"):
            raise ln.error("'class' outside a policy-map")
        kind, pol = ctx[1], ctx[2]
        if ln.peek() == "type":
            ln.take()
            ln.word(kind)
        name = ln.take("a class name")
        if kind == "qos":
            if name != "class-default" and name not in st.qos_cmaps:
                raise ln.error(f"class {name!r}: no class-map type qos of that name")
            st.ctx = ("pclass", kind, pol, name)
        else:
            q = _queue_of_class(name, st, kind, ln)
            pols = st.queuing_pols if kind == "queuing" else st.nq_pols
            pols[pol].setdefault(q, {})
            st.ctx = ("pclass", kind, pol, q)
    elif w == "match":
        if ctx[0] != "cmap":
            raise ln.error("'match' outside a class-map")
        if ctx[1] == "qos":
            ln.word("dscp")
            ctx[4].append(set(ln.numlist("dscp", 0, 63)))
            sets = ctx[4]
            st.qos_cmaps[ctx[2]] = set.union(*sets) if ctx[3] == "match-any" \
                else set.intersection(*sets)
        else:
            ln.word("qos-group")
            st.group_cmaps[ctx[1]][ctx[2]] = ln.number("qos-group", 0, NUM_QUEUES - 1)
    elif w == "set":
        if ctx[:2] != ("pclass", "qos"):
            raise ln.error("'set qos-group' outside a class of a policy-map type qos")
        ln.word("qos-group")
        g = ln.number("qos-group", 0, NUM_QUEUES - 1)
        pol = st.qos_pols[ctx[2]]
        if ctx[3] == "class-default":
            pol["default"] = g
        else:
            pol["classes"].append((ctx[3], g))
    elif w in ("priority", "bandwidth", "random-detect"):
        if ctx[:2] != ("pclass", "queuing"):
            raise ln.error(f"{w!r} outside a class of a policy-map type queuing")
        q = st.queuing_pols[ctx[2]][ctx[3]]
        if w == "priority":
            ln.word("level")
            ln.number("priority level (only level 1 is modelled)", 1, 1)
            q["strict"] = True
        elif w == "bandwidth":
            ln.word("remaining")
            ln.word("percent")
            q["bw"] = ln.number("bandwidth remaining percent", 0, 100)
        else:
            q["wred"] = _random_detect(ln)
    elif w in ("pause", "mtu"):
        if ctx[:2] != ("pclass", "network-qos"):
            raise ln.error(f"{w!r} outside a class of a policy-map type network-qos")
        c = st.nq_pols[ctx[2]][ctx[3]]
        if w == "pause":
            ln.word("pfc-cos")
            c.setdefault("pfc", set()).update(ln.numlist("pfc-cos", 0, NUM_QUEUES - 1))
        else:
            c["mtu"] = ln.number("mtu", 1500, 9216)
    elif w == "system":
        ln.word("qos")
        st.ctx = ("system",)
    elif w == "service-policy":
        ln.word("type")
        kind = ln.word("qos", "queuing", "network-qos")
        if kind == "qos":
            ln.word("input")
        elif kind == "queuing":
            ln.word("output")
        name = ln.take("a policy-map name")
        pols = {"qos": st.qos_pols, "queuing": st.queuing_pols, "network-qos": st.nq_pols}[kind]
        if name not in pols:
            raise ln.error(f"no policy-map type {kind} named {name!r}")
        if ctx[0] == "system":
            st.bound[kind] = (name, ln.num)
        elif ctx[0] == "iface" and kind == "qos":
            for n in ctx[1]:
                st.ifaces[n]["qos"] = (name, ln.num)
        else:
            raise ln.error("service-policy outside 'system qos'"
                           + (" (interfaces take only type qos input)" if ctx[0] == "iface" else
                              " or an interface"))
    elif w == "interface":
        names = interfaces(ln)
        for n in names:
            st.ifaces.setdefault(n, {})
        st.ctx = ("iface", names)
    elif w == "priority-flow-control":
        sub = ln.word("mode", "watch-dog", "watch-dog-interval")
        if sub == "watch-dog-interval":
            on = ln.word("on", "off") == "on"
            if ctx[0] == "iface":
                for n in ctx[1]:
                    st.ifaces[n]["watchdog"] = on
            else:
                st.watchdog = on
            return
        if ctx[0] != "iface":
            raise ln.error(f"'priority-flow-control {sub}' outside an interface")
        if sub == "watch-dog":
            for n in ctx[1]:
                st.ifaces[n]["watchdog"] = True
        else:
            mode = ln.word("auto", "on", "off")
            for n in ctx[1]:
                st.ifaces[n]["mode"] = mode


def _dlb_command(w: str, ln: Line, st: _State) -> None:
    """ch.12 Example 12-1: ``hardware profile dlb`` and its sub-commands."""
    if w == "hardware":
        ln.word("profile")
        ln.word("dlb")
        st.dlb = st.dlb or {"interfaces": [], "mac": None, "mode": None}
        st.ctx = ("dlb",)
        return
    if st.ctx[0] != "dlb" or st.dlb is None:
        raise ln.error(f"{w!r} outside 'hardware profile dlb'")
    if w == "dlb-interface":
        st.dlb["interfaces"].extend(n for n in interfaces(ln) if n not in st.dlb["interfaces"])
    elif w == "mac-address":
        mac = ln.take("a MAC address")
        try:
            LoadBalance(dlb_mac=mac)
        except ValueError:
            raise ln.error(f"mac-address: not a MAC address, got {mac!r}") from None
        st.dlb["mac"] = mac.lower()
    else:
        st.dlb["mode"] = ln.word("per-packet", "flowlet")


def _random_detect(ln: Line) -> Wred:
    vals: dict[str, float] = {"weight": 0, "ecn": 0}
    while ln.more() and ln.peek() in ("minimum-threshold", "maximum-threshold",
                                      "drop-probability", "weight", "ecn"):
        k = ln.take().lower()
        if k == "ecn":
            vals["ecn"] = 1
        elif k == "drop-probability":
            vals[k] = ln.number("drop-probability", 0, 100)
        elif k == "weight":
            vals[k] = ln.number("weight", 0, 15)
        else:
            n = ln.number(k, 0, 10 ** 12)
            vals[k] = n * UNITS[ln.word(*UNITS)]
    for k in ("minimum-threshold", "maximum-threshold"):
        if k not in vals:
            raise ln.error(f"random-detect: {k} missing")
    try:
        return Wred(int(vals["minimum-threshold"]), int(vals["maximum-threshold"]),
                    vals.get("drop-probability", 100), int(vals["weight"]), bool(vals["ecn"]))
    except ValueError as exc:
        raise ln.error(f"random-detect: {exc}") from None


def parse_nxos(text: str, base: QosConfig | None = None,
               warnings: list[str] | None = None) -> QosConfig:
    """Parse NX-OS QoS configuration text; `warnings` (if given) collects unbound policies."""
    st = _State()
    for ln in logical_lines(text):
        while ln.more():
            _command(ln, st)
    cfg = factory_default(base)
    notes = warnings if warnings is not None else []
    # classification: one qos input policy, system-wide or on interfaces
    qos_names = {n for n, _ in [st.bound["qos"]]} if "qos" in st.bound else set()
    qos_names |= {i["qos"][0] for i in st.ifaces.values() if "qos" in i}
    if len(qos_names) > 1:
        raise ValueError(f"service-policy type qos input: only one classification policy is "
                         f"modelled, got {', '.join(sorted(qos_names))}")
    if qos_names:
        name = qos_names.pop()
        pol = st.qos_pols[name]
        classes = tuple(TrafficClass(c, tuple(sorted(st.qos_cmaps[c])), g)
                        for c, g in pol["classes"])
        cfg = replace(cfg, classification=Classification(name, classes, pol["default"]))
    if "queuing" in st.bound:
        name = st.bound["queuing"][0]
        qs = st.queuing_pols[name]
        queues = list(cfg.queuing.queues)
        for i in range(NUM_QUEUES):
            q = qs.get(i, {})
            queues[i] = QueueConfig(q.get("strict", False), q.get("bw", 0), q.get("wred"),
                                    cfg.queuing.queues[i].limit_bytes)
        if "bw" not in qs.get(0, {}) and not queues[0].strict:
            rest = 100 - sum(q.bandwidth_percent for q in queues if not q.strict)
            queues[0] = replace(queues[0], bandwidth_percent=max(rest, 0))
        try:
            cfg = replace(cfg, queuing=Queuing(name, tuple(queues)))
        except ValueError as exc:
            raise ValueError(f"policy-map type queuing {name}: {exc}") from None
    if "network-qos" in st.bound:
        name = st.bound["network-qos"][0]
        classes = st.nq_pols[name].values()
        no_drop = frozenset().union(*(c.get("pfc", set()) for c in classes))
        mtus = [c["mtu"] for c in classes if "mtu" in c]
        cfg = replace(cfg, pfc=replace(cfg.pfc, policy=name, no_drop=no_drop),
                      mtu=max(mtus) if mtus else cfg.mtu)
    if st.watchdog is not None:
        cfg = replace(cfg, watchdog=replace(cfg.watchdog, enabled=st.watchdog))
    default = cfg.default_interface
    if "qos" in st.bound:
        default = replace(default, classify=True)
    ifaces = tuple((n, InterfaceQos(i.get("mode", default.pfc_mode),
                                    i.get("watchdog", default.watchdog),
                                    "qos" in i or default.classify))
                   for n, i in st.ifaces.items())
    cfg = replace(cfg, default_interface=default, interfaces=ifaces)
    if st.dlb is not None:
        cfg = replace(cfg, load_balance=LoadBalance(
            mode="spray" if st.dlb["mode"] == "per-packet" else "flowlet",
            interfaces=tuple(st.dlb["interfaces"]), dlb_mac=st.dlb["mac"] or DEFAULT_DLB_MAC))
        if not st.dlb["interfaces"]:
            notes.append("hardware profile dlb: no dlb-interface, so no group is balanced "
                         "by DLB on NX-OS; emu balances every group")
    for kind, pols in (("qos", st.qos_pols), ("queuing", st.queuing_pols),
                       ("network-qos", st.nq_pols)):
        bound = {st.bound[kind][0]} if kind in st.bound else set()
        if kind == "qos":
            bound |= {i["qos"][0] for i in st.ifaces.values() if "qos" in i}
        for name in pols:
            if name not in bound:
                notes.append(f"policy-map type {kind} {name} is not bound (system qos / "
                             f"interface service-policy): not applied")
    return cfg
