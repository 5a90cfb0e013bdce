"""Warnings about legal but dubious QoS settings (errors are raised at construction).

Each check looks at the parts it needs and returns sentences naming the setting, the
values and the consequence; `emucore.qos.qosconfig.QosConfig.validate` runs them all. The
rules: book ch.11 (xON < WRED min < WRED max < xOFF, "ECN must act before PFC"; CNPs in a
strict queue; headroom for what is in flight, `emucore.qos.pfc.headroom_needed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from emucore.qos.classify import Classification
from emucore.qos.interface import InterfaceQos
from emucore.qos.pfc import Pfc, headroom_needed
from emucore.qos.queuing import Queuing


def overlapping_classes(c: Classification) -> list[str]:
    """A DSCP listed in two classes (the first wins)."""
    w, seen = [], {}
    for tc in c.classes:
        for d in tc.dscp:
            if d in seen and seen[d] != tc.name:
                w.append(f"classification: DSCP {d} is in classes {seen[d]} and {tc.name}; "
                         f"the first ({seen[d]}) wins")
            seen.setdefault(d, tc.name)
    return w


def ecn_before_pfc(pfc: Pfc, queuing: Queuing) -> list[str]:
    """No-drop queues without WRED-ECN, or whose thresholds break xON < min < max < xOFF."""
    w = []
    for prio in sorted(pfc.no_drop):
        wred = queuing.queues[prio].wred
        where = f"queue {prio} (no-drop)"
        if wred is None or not wred.ecn:
            w.append(f"{where}: no WRED with ecn: DCQCN gets no CE marks, PFC alone "
                     f"controls congestion" + (" and WRED drops packets" if wred else ""))
        if wred is None:
            continue
        if pfc.xoff_bytes <= wred.min_bytes:
            w.append(f"pfc.xoff_bytes {pfc.xoff_bytes} <= WRED min {wred.min_bytes} on "
                     f"{where}: xOFF before ECN, expect abrupt pauses, head-of-line "
                     f"blocking and stop-and-go oscillation (ch.11)")
        elif not pfc.xon_bytes < wred.min_bytes < wred.max_bytes < pfc.xoff_bytes:
            w.append(f"{where}: rule of thumb xON < WRED min < WRED max < xOFF broken: "
                     f"{pfc.xon_bytes} / {wred.min_bytes} / {wred.max_bytes} / "
                     f"{pfc.xoff_bytes} bytes (ch.11)")
    return w


def limits_below_wred_max(queuing: Queuing) -> list[str]:
    """Queues whose limit is below their WRED max (the agent raises it to WRED max)."""
    return [f"queuing.queues[{i}].limit_bytes {q.limit_bytes} < WRED max "
            f"{q.wred.max_bytes}: the switch agent raises the limit to WRED max"
            for i, q in enumerate(queuing.queues)
            if q.wred is not None and q.limit_bytes < q.wred.max_bytes]


def bandwidth(c: Classification, queuing: Queuing) -> list[str]:
    """Classified traffic in a 0 % queue; non-strict shares that do not add up to 100 %."""
    w = []
    for g in sorted(set(c.table)):
        q = queuing.queues[g]
        if not q.strict and q.bandwidth_percent == 0:
            w.append(f"queue {g}: receives traffic (qos-group {g}) but has 0 % bandwidth and "
                     f"no priority: it is served only when every other queue is empty")
    total = sum(q.bandwidth_percent for q in queuing.queues if not q.strict)
    if total < 100:
        w.append(f"queuing: non-strict bandwidth sums to {total} %, not 100 %")
    return w


def cnp_path(c: Classification, queuing: Queuing, cnp_dscp: int, cnp_priority: int) -> list[str]:
    """CNPs classified elsewhere than cnp_priority, or queued behind data."""
    w = []
    if c.group_of(cnp_dscp) != cnp_priority:
        w.append(f"cnp_dscp {cnp_dscp} is classified into qos-group {c.group_of(cnp_dscp)}, "
                 f"not cnp_priority {cnp_priority}")
    if not queuing.queues[cnp_priority].strict:
        w.append(f"cnp_priority {cnp_priority}: queue is not strict priority; CNPs can "
                 f"wait behind data (the book uses strict queue 7)")
    return w


def interfaces(c: Classification, default: InterfaceQos,
               blocks: tuple[tuple[str, InterfaceQos], ...],
               ports: Iterable[str] | None = None) -> list[str]:
    """Classification bound on some ports only; interface blocks for unknown ports."""
    w = []
    if blocks and not default.classify:
        on = [n for n, iq in blocks if iq.classify]
        w.append(f"classification {c.policy} is applied only on {', '.join(on) or 'no interface'}"
                 f"; other ports leave all traffic in qos-group {c.default_group}")
    if ports is not None:
        ports = list(ports)
        w += [f"interfaces: {name!r} is not a port of this switch ({', '.join(ports)})"
              for name, _ in blocks if name not in ports]
    return w


def headroom(pfc: Pfc, mtu: int, links: Mapping[str, tuple[float, float]]) -> list[str]:
    """Ports whose link (model bit/s, one-way cable delay in model s) needs more headroom
    than `pfc.headroom_bytes` (`headroom_needed`); no no-drop priority, no warning."""
    if not pfc.no_drop:
        return []
    w = []
    for port, (model_bps, delay_s) in links.items():
        need = headroom_needed(model_bps, delay_s, mtu)
        if pfc.headroom_bytes < need:
            w.append(f"{port}: pfc.headroom_bytes {pfc.headroom_bytes} < {need} needed at "
                     f"{model_bps / 1e9:g} Gbps over {delay_s * 1e6:g} us of cable "
                     f"(2 x delay x rate + 2 x MTU {mtu}): expect headroom drops on no-drop "
                     f"priorities {sorted(pfc.no_drop)}")
    return w
