"""Render a `QosConfig` as NX-OS text (book ch.11, Examples 11-1..11-7) that
`emucore.qos.nxos.parse_nxos` reads back; what NX-OS snippets do not carry (queue limits,
xON/xOFF/headroom, watchdog timers, CNP priority) is written as ``!`` comments.
Used by ``show policy-map`` (`switch_agent.show`).
"""

from __future__ import annotations

import re

from emucore.qos.qosconfig import QosConfig
from emucore.qos.fields import NUM_QUEUES


def _nx_iface(name: str) -> str:
    m = re.match(r"^eth(\d+)$", name)
    return f"ethernet1/{m.group(1)}" if m else name


def _size_words(n: int) -> str:
    return f"{n // 1000} kbytes" if n % 1000 == 0 else f"{n} bytes"


def to_nxos(cfg: QosConfig) -> str:
    """Render a config as NX-OS text that `parse_nxos` reads back (extras as ``!`` comments)."""
    out: list[str] = []
    c = cfg.classification
    for tc in c.classes:
        out += [f"class-map type qos match-any {tc.name}",
                f"  match dscp {','.join(str(d) for d in tc.dscp)}"]
    out.append(f"policy-map type qos {c.policy}")
    for tc in c.classes:
        out += [f"  class {tc.name}", f"    set qos-group {tc.qos_group}"]
    out += ["  class class-default", f"    set qos-group {c.default_group}"]
    out.append(f"policy-map type queuing {cfg.queuing.policy}")
    for i in reversed(range(NUM_QUEUES)):
        q = cfg.queuing.queues[i]
        out.append(f"  class type queuing c-out-8q-q{i if i else '-default'}")
        if q.strict:
            out.append("    priority level 1")
        else:
            out.append(f"    bandwidth remaining percent {q.bandwidth_percent}")
        if q.wred:
            w = q.wred
            out.append(f"    random-detect minimum-threshold {_size_words(w.min_bytes)} "
                       f"maximum-threshold {_size_words(w.max_bytes)} drop-probability "
                       f"{w.max_prob_pct:g} weight {w.weight}" + (" ecn" if w.ecn else ""))
        out.append(f"    ! queue-limit {q.limit_bytes} bytes")
    p = cfg.pfc
    out.append(f"policy-map type network-qos {p.policy}")
    for prio in sorted(p.no_drop):
        out += [f"  class type network-qos c-8q-nq{prio}", f"    pause pfc-cos {prio}",
                f"    mtu {cfg.mtu}"]
    out.append(f"  ! xoff {p.xoff_bytes} xon {p.xon_bytes} headroom {p.headroom_bytes} bytes, "
               f"pause quanta {p.pause_quanta:#06x}, cnp dscp {cfg.cnp_dscp} priority "
               f"{cfg.cnp_priority}")
    out += ["system qos", f"  service-policy type network-qos {p.policy}",
            f"  service-policy type queuing output {cfg.queuing.policy}"]
    if cfg.default_interface.classify:
        out.append(f"  service-policy type qos input {c.policy}")
    wd = cfg.watchdog
    out.append(f"priority-flow-control watch-dog-interval {'on' if wd.enabled else 'off'}")
    out.append(f"! watchdog detect {wd.detect_s:g} s restore {wd.restore_s:g} s action {wd.action}")
    d = cfg.default_interface
    out.append(f"! every other interface: priority-flow-control mode {d.pfc_mode}, watch-dog "
               f"{'on' if d.watchdog else 'off'}")
    for name, iq in cfg.interfaces:
        out += [f"interface {_nx_iface(name)}", f"  priority-flow-control mode {iq.pfc_mode}",
                f"  priority-flow-control watch-dog-interval {'on' if iq.watchdog else 'off'}"]
        if iq.classify:
            out.append(f"  service-policy type qos input {c.policy}")
    lb = cfg.load_balance
    if lb is not None and lb.mode != "ecmp":  # ch.12 Example 12-1
        out.append("hardware profile dlb")
        out += [f"  dlb-interface {_nx_iface(n)}" for n in lb.interfaces]
        if lb.dlb_mac:
            out.append(f"  mac-address {lb.dlb_mac}")
        out.append(f"  mode {'per-packet' if lb.mode == 'spray' else 'flowlet'}")
        out.append(f"  ! {lb.describe()}")
    return "\n".join(out) + "\n"
