"""The check primitives of a lab, over its evidence (pure: table-tested on synthetic logs).

Evidence is what a run left (emu.lab.evidence, with the selectors SEL); a check names one
primitive (docs/LABS.md "Checks") and an expectation (emu.lab.expect):

* first: SEL -> model µs of the first matching event (None if none)
* count: SEL -> number of matching events (`distinct: [node, port]`: of distinct ones)
* order: [SEL | [SEL, ...], ...] -> every first time of a group before every first time
  of the next group (Figure 11-7's t1 < t2 < ...; Figure 11-5's cascade)
* span: {from: SEL, to: SEL} -> µs from the first of one to the first of the other
* rate: {flow, window?} -> model bit/s (the flow's bytes over its duration; over a
  window [a, b]: the mean of its QPs' sampled tx_bps; a and b are µs, durations or
  {first: SEL, plus?} as a selector's after / before, e.g. from a port's first pause);
  `of_link: true` -> fraction;
  `paced: true` -> the rate its sender's own DCQCN allowed: the flow's bytes over the time
  from its post until each QP had put its wire bytes (tx_wire_bytes) on the link at the
  rates its `rate` events set (line rate before the first) - what a lossless fabric with
  no delay would deliver, so measured / paced isolates the fabric from the congestion
  control (L13.9, L10.4)
* util: {link: "A->B", window?} -> mean sampled tx_bps of A's port towards B / link rate
* max: {metric, link, queue?, window?} over metrics, or {ev..., field} over events
* pct: {ev..., field, p} -> the p-th percentile (nearest rank; p 50 if not given) of an
  event field, e.g. the CNPs' sojourn in a switch (`cnp_fwd`)
* counter: {node, port?, name, queue?, prio?, reason?} -> summed last counters (a NIC's
  per-QP counters, e.g. rx_out_of_order, rx_nak_seq, retransmits, summed over its QPs)
* ratio: {num, den} -> measured value of "variant.check" (or a number) over another's
* frames: {capture: "A->B", filter, fields, index?} -> tshark fields of the index-th
  frame matching the display filter (a dict), or the count with `count: true`
* flows: {} -> "n/m" flows completed byte-exact (expect "all")
* curve: {port: "A->B", queue, of: marked|dropped, min, max, pmax} -> how many depth bins
  of the agent's WRED counters (switch_agent.queues WRED_BIN_BYTES) hold a mark (or drop)
  count outside the exact binomial interval of p(d) = pmax (d - min)/(max - min), 0 below
  min, 1 from max on (Example 11-3; ch.11 Fig 11-2); each bin at 1 - 0.01/bins, so a
  correct curve fails with probability <= 1 %; bins with fewer than `min_seen` arrivals
  (20) are not judged
* result: {path: "a.b.0", over: "c.d"?} -> a value of the workload's result (a torch lab's
  rank table, ring trace, utilisation list), divided by another with `over`
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from emu.lab.curve import curve_bins
from emu.lab.evidence import Evidence, bound, first, order, select, wanted
from emu.lab.expect import parse_expect
from emu.observe.metrics import nic_sum


def _window(spec: dict, ev: Evidence) -> tuple[float, float]:
    w = spec.get("window")
    if w is None:
        done = [f["done_us"] for f in ev.flows.values() if f.get("done_us") is not None]
        return 0.0, max(done, default=math.inf)
    if not (isinstance(w, list) and len(w) == 2):
        raise ValueError(f"window: [from, to] (µs, durations or {{first: SEL, plus: ...}}), "
                         f"got {w!r}")
    return bound(ev, w[0], "window"), bound(ev, w[1], "window")


def _rows(ev: Evidence, node: str, ports: list[str], metric: str, spec: dict,
          queue: str = "") -> list[dict]:
    lo, hi = _window(spec, ev)
    return [r for r in ev.metrics if r["node"] == node and r["port"] in ports
            and r["metric"] == metric and lo <= r["t_us"] <= hi
            and (queue == "" or str(r["queue"]) == queue)]


def rate(ev: Evidence, spec: dict) -> float | None:
    """A flow's model bit/s (or fraction of its link with of_link)."""
    fr = ev.flows.get(spec.get("flow"))
    if fr is None:
        raise ValueError(f"rate.flow: no flow {spec.get('flow')!r}")
    if spec.get("paced"):
        r = paced(ev, fr)
    elif "window" not in spec:
        r = fr.get("rate_model_bps")
    else:
        rows = _rows(ev, fr["src"], [f"qp{q}" for q in fr["qps"]], "tx_bps", spec)
        by_t: dict[float, float] = {}
        for row in rows:
            by_t[row["t_us"]] = by_t.get(row["t_us"], 0.0) + row["value"]
        r = sum(by_t.values()) / len(by_t) if by_t else None
    if r is not None and spec.get("of_link"):
        r /= fr["link_bps"]
    return r


def paced(ev: Evidence, fr: dict) -> float | None:
    """The model bit/s a flow's sender's DCQCN rate timeline allowed (`rate.paced`): each
    QP sends its wire bytes at Rc(t) - the link rate from its `wr_post`, then each `rate`
    event's rate_bps - and the flow is done when the last QP is; None without a post."""
    start, end = fr.get("start_us"), None
    for qp in fr["qps"]:
        evs = [e for e in ev.events if e.get("node") == fr["src"] and e.get("qp") == qp]
        post = next((e["t"] for e in evs if e["ev"] == "wr_post"), None)
        bits = 8 * _wire_bytes(ev.counters.get(fr["src"], {}), qp)
        if post is None or not bits:
            return None
        steps = [(post, fr["link_bps"])] + [(e["t"], e["rate_bps"]) for e in evs
                                            if e["ev"] == "rate" and e["t"] >= post]
        t_done = math.inf
        for (t, r), nxt in zip(steps, steps[1:] + [(math.inf, 0.0)]):
            if r > 0 and bits <= r * (nxt[0] - t) * 1e-6:
                t_done = t + bits / r * 1e6
                break
            bits -= r * (nxt[0] - t) * 1e-6
        end = t_done if end is None else max(end, t_done)
        start = post if start is None else start
    if end is None or not math.isfinite(end) or end <= start or not fr.get("bytes"):
        return None
    return fr["bytes"] * 8 / ((end - start) * 1e-6)


def _wire_bytes(nic: dict, qp: int) -> int:
    """A QP's tx_wire_bytes in a NIC's last counters (live or destroyed), 0 if absent."""
    live = (nic.get("qps") or {}).get(str(qp)) or {}
    if live.get("tx_wire_bytes"):
        return live["tx_wire_bytes"]
    return next((q.get("tx_wire_bytes") or 0 for q in nic.get("closed_qps") or []
                 if q.get("qpn") == qp), 0)


def util(ev: Evidence, spec: dict) -> float | None:
    """Mean sampled tx rate of a link's port over the window / the link's rate."""
    link = spec.get("link")
    if link not in ev.links:
        raise ValueError(f"util.link: no link {link!r}")
    node, ifname = ev.links[link]
    rows = _rows(ev, node, [ifname], "tx_bps", spec)
    return sum(r["value"] for r in rows) / len(rows) / ev.link_bps[link] if rows else None


def maximum(ev: Evidence, spec: dict) -> float | None:
    """The largest sampled metric of a link (or of an event field)."""
    if "field" in spec:
        return max(_field_values(ev, spec), default=None)
    link = spec.get("link")
    if link not in ev.links:
        raise ValueError(f"max.link: no link {link!r}")
    node, ifname = ev.links[link]
    q = str(spec.get("queue", ""))
    rows = _rows(ev, node, [ifname], spec.get("metric", "depth_bytes"), spec, q)
    return max((r["value"] for r in rows), default=None)


def _field_values(ev: Evidence, spec: dict) -> list:
    """The values of spec["field"] in the events matching the rest of spec (less p)."""
    name = spec["field"]
    sel = {k: v for k, v in spec.items() if k not in ("field", "p")}
    return [e[name] for e in select(ev, sel) if name in e]


def percentile(ev: Evidence, spec: dict) -> float | None:
    """The p-th percentile (nearest rank) of an event field over the matching events."""
    vals = sorted(_field_values(ev, spec))
    if not vals:
        return None
    return vals[max(1, math.ceil(float(spec.get("p", 50)) / 100 * len(vals))) - 1]


def counter(ev: Evidence, spec: dict) -> float:
    """A last-counter value summed over the matching nodes and ports."""
    name = spec.get("name")
    node_ok = wanted(spec.get("node", "*"))
    port = spec.get("port", "*")
    if isinstance(port, str) and "->" in port:
        if port not in ev.links:
            raise ValueError(f"counter.port: no link {port!r}")
        node_ok = wanted(ev.links[port][0])
        port = ev.links[port][1]
    port_ok = wanted(port)
    total = 0.0
    for node, c in ev.counters.items():
        if not node_ok(node):
            continue
        if "ports" not in c:  # a NIC: its top-level counters, else summed over its QPs
            v = c.get(name)
            if v is None and isinstance(c.get("qps"), dict):
                v = nic_sum(c, name)  # destroyed QPs included
            total += v if isinstance(v, (int, float)) else 0
            continue
        for pname, p in c["ports"].items():
            if port_ok(pname):
                total += _port_counter(p, name, spec)
    return total


def _port_counter(p: dict, name: str, spec: dict) -> float:
    if name == "drops":
        d = p["drops"]
        if "queue" in spec:
            d = p["queues"].get(str(spec["queue"]), {}).get("drops", {})
        return sum(n for r, n in d.items() if spec.get("reason", r) == r)
    if name in ("pause_tx", "resume_tx", "pause_rx", "resume_rx"):
        v = p["pfc"][name]
        return v[spec["prio"]] if "prio" in spec else sum(v)
    if "queue" in spec:
        return p["queues"].get(str(spec["queue"]), {}).get(name, 0)
    v = p.get(name, 0)
    return v if isinstance(v, (int, float)) else 0


def frames(ev: Evidence, spec: dict) -> Any:
    """tshark fields of a capture's matching frame (or their count)."""
    if ev.frames is None:
        raise ValueError("frames: this run kept no captures")
    rows = ev.frames(spec["capture"], spec.get("filter", ""), list(spec.get("fields", [])))
    if spec.get("count"):
        return len(rows)
    i = spec.get("index", 0)
    return rows[i] if -len(rows) <= i < len(rows) else None



def result_value(result: dict, path: str) -> Any:
    """`path` ("a.b.0") in a workload's result."""
    cur: Any = result
    for part in str(path).split("."):
        if isinstance(cur, list) and part.lstrip("-").isdigit():
            i = int(part)
            cur = cur[i] if -len(cur) <= i < len(cur) else None
        elif isinstance(cur, dict):
            cur = cur.get(part, cur.get(int(part)) if part.isdigit() else None)
        else:
            cur = None
        if cur is None:
            raise ValueError(f"result.path: nothing at {path!r} (stopped at {part!r})")
    return cur


#: the primitives whose value is one function of the evidence and the check's spec
VALUE_OF: dict[str, Callable[[Evidence, dict], Any]] = {
    "first": first, "rate": rate, "util": util, "max": maximum, "pct": percentile,
    "counter": counter, "frames": frames}


def measure(ev: Evidence, check: dict) -> tuple[Any, bool | None]:
    """The measured value of one check (and, for order, whether it held)."""
    kind, spec = check["kind"], check[check["kind"]]
    if kind in VALUE_OF:
        return VALUE_OF[kind](ev, spec), None
    if kind == "count":
        hits = select(ev, spec)
        if "distinct" in spec:  # e.g. [node, port]: how many ports did it
            return len({tuple(e.get(k) for k in spec["distinct"]) for e in hits}), None
        return len(hits), None
    if kind == "order":
        ok, times = order(ev, spec)
        return times, ok
    if kind == "span":
        a, b = first(ev, spec["from"]), first(ev, spec["to"])
        return (None if a is None or b is None else round(b - a, 2)), None
    if kind == "flows":  # {} every flow, or {names: [a, b]} those
        names = spec.get("names") if isinstance(spec, dict) else None
        unknown = [n for n in names or () if n not in ev.flows]
        if unknown:
            raise ValueError(f"flows.names: no flow {unknown[0]!r}")
        chosen = [ev.flows[n] for n in names] if names else list(ev.flows.values())
        ok = [f for f in chosen if f["status"] == "SUCCESS" and f["byte_exact"]]
        return f"{len(ok)}/{len(chosen)}", None
    if kind == "curve":
        bins = [b for b in curve_bins(ev, spec) if b["ok"] is not None]
        if not bins:
            raise ValueError("curve: no depth bin had enough arrivals to judge")
        return sum(1 for b in bins if not b["ok"]), None
    if kind == "result":
        if not ev.result:
            raise ValueError("result: this lab ran no workload")
        v = result_value(ev.result, spec.get("path", ""))
        if "over" in spec:
            d = result_value(ev.result, spec["over"])
            return (v / d if d else None), None
        return v, None
    raise ValueError(f"{kind}: not judged per variant")


def judge(measured: Any, held: bool | None, check: dict) -> tuple[bool, str]:
    """Whether the measured value meets the expectation; the expectation's text."""
    if check["kind"] == "order":
        if check.get("expect") == "any":  # shown, not judged
            return True, f"(shown: in this order - {'yes' if held else 'no'})"
        return bool(held), "in this order"
    pred, text = parse_expect(check.get("expect", "any"))
    return bool(pred(measured)), text


def share(values: dict[str, Any], spec: dict) -> float | None:
    """The fraction of `variants` (every variant that measured it, if not given) whose
    measured value of check `check` meets `where` (an expectation, e.g. ">= 928"): a
    verdict over many runs, e.g. over ECMP seeds (L12.5)."""
    name, want = spec["check"], spec.get("variants")
    got = {k.split(".", 1)[0]: v for k, v in values.items() if k.split(".", 1)[1] == name}
    if want:
        missing = [v for v in want if v not in got]
        if missing:
            raise ValueError(f"share: no measured {missing[0]}.{name}")
        got = {v: got[v] for v in want}
    if not got:
        raise ValueError(f"share: no variant measured {name!r}")
    pred, _ = parse_expect(spec["where"])
    return sum(1 for v in got.values() if pred(v)) / len(got)


def ratio(values: dict[str, Any], spec: dict) -> float | None:
    """num / den where each is a number or the measured value of 'variant.check'."""
    def get(k):
        x = spec.get(k)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return float(x)
        if x not in values:
            raise ValueError(f"ratio.{k}: no measured value {x!r}")
        return values[x]
    n, d = get("num"), get("den")
    if not isinstance(n, (int, float)) or not isinstance(d, (int, float)):
        return None
    return n / d if d else (math.inf if n else None)
