"""The check primitives of a lab, over its evidence (pure: table-tested on synthetic logs).

Evidence is what a run left: the event log (emucore.eventlog, times made relative to the
lab's t0, model microseconds), the sampled metrics (emu.observe.metrics rows, same axis), the
agents' and NICs' last counters, the flows' results and, on request, decoded frames of
a capture (tshark). A check names one primitive (docs/LABS.md "Checks"):

* first: SEL -> model µs of the first matching event (None if none)
* count: SEL -> number of matching events (`distinct: [node, port]`: of distinct ones)
* order: [SEL | [SEL, ...], ...] -> every first time of a group before every first time
  of the next group (Figure 11-7's t1 < t2 < ...; Figure 11-5's cascade)
* span: {from: SEL, to: SEL} -> µs from the first of one to the first of the other
* rate: {flow, window?} -> model bit/s (the flow's bytes over its duration; over a
  window [a, b] µs: the mean of its QPs' sampled tx_bps); `of_link: true` -> fraction
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

A selector SEL is a mapping of event fields (ev, node, port, prio, queue, qp, dir, why,
...; a list means any of) plus `port: "A->B"` (node A, its port towards B), `flow:` /
`flow_rx:` (the flow's sender / receiver NIC and QPs), `after:` / `before:` (µs or a
duration, or `{first: SEL, plus: duration}`: relative to another event). `expect` is
"OP value" (>=, <=, >, <, ==, !=), "a..b", "x ± y" or "x ± y%", "none", "any"
(informational; an order with "any" is shown, not judged), true/false, "is TEXT" (the
text), a mapping of fields or a list (equal). Values may carry units: KB/MB/B (bytes),
Gbps/Mbps (bit/s), ns/us/ms/s (microseconds).
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emucore.qos.wred import Wred
from emucore.timedil import parse_duration, parse_rate, parse_size

OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
       "<": lambda a, b: a < b, "==": lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9),
       "!=": lambda a, b: not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)}
EXPECT_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")
RANGE_RE = re.compile(r"^\s*(\S+)\s*\.\.\s*(\S+)\s*$")
TOL_RE = re.compile(r"^\s*(\S+)\s*(?:±|\+-)\s*([\d.]+)(%?)\s*$")
SEL_SPECIAL = {"port", "flow", "flow_rx", "after", "before", "node", "ev", "field", "distinct"}


def value(text: Any) -> float:
    """A number, or text with a unit: bytes (KB), bit/s (Gbps), microseconds (us)."""
    if isinstance(text, bool):
        raise ValueError(f"a number, got {text!r}")
    if isinstance(text, (int, float)):
        return float(text)
    t = str(text).strip()
    try:
        return float(t)
    except ValueError:
        pass
    low = t.lower()
    if low.endswith("bps"):
        return parse_rate(t[:-3])
    if re.search(r"(ns|us|µs|ms|s)$", low):
        return parse_duration(t.replace("µs", "us")) * 1e6
    if low.endswith("b"):
        return float(parse_size(t))
    raise ValueError(f"a number or a value with a unit (150KB, 100Gbps, 10us), got {text!r}")


def parse_expect(exp: Any) -> tuple[Callable[[Any], bool], str]:
    """An expectation -> (predicate on the measured value, its text)."""
    if isinstance(exp, bool):
        return (lambda m: m is exp), str(exp).lower()
    if isinstance(exp, (int, float)):
        return (lambda m: isinstance(m, (int, float)) and OPS["=="](m, exp)), f"== {exp:g}"
    if isinstance(exp, list):
        return (lambda m: isinstance(m, list) and len(m) == len(exp) and all(
            _same(a, b) for a, b in zip(m, exp))), _list_text(exp)
    if isinstance(exp, dict):
        return (lambda m: _same(m, exp)), ", ".join(f"{k}={v}" for k, v in exp.items())
    if not isinstance(exp, str):
        raise ValueError(f"an expectation like '>= 0.9', got {exp!r}")
    low = exp.strip().lower()
    if low == "none":
        return (lambda m: m is None), "none"
    if low == "any":
        return (lambda m: True), "(shown)"
    if low == "all":
        return (lambda m: isinstance(m, str) and m.split("/")[0] == m.split("/")[-1]), "all"
    if low in ("true", "false"):
        return (lambda m: m is (low == "true")), low
    if low.startswith("is "):  # text equality: "is BCDA"
        want = exp.strip()[3:].strip()
        return (lambda m: str(m) == want), f"is {want}"
    m = EXPECT_RE.match(exp)
    if m:
        op, v = m.group(1), value(m.group(2))
        return (lambda x: isinstance(x, (int, float)) and OPS[op](x, v)), exp.strip()
    m = RANGE_RE.match(exp)
    if m:
        lo, hi = value(m.group(1)), value(m.group(2))
        return (lambda x: isinstance(x, (int, float)) and lo <= x <= hi), exp.strip()
    m = TOL_RE.match(exp)
    if m:
        c, tol = value(m.group(1)), float(m.group(2))
        tol = abs(c) * tol / 100 if m.group(3) else tol
        return (lambda x: isinstance(x, (int, float)) and abs(x - c) <= tol), exp.strip()
    try:
        v = value(exp)
    except ValueError:
        pass
    else:
        return (lambda x: isinstance(x, (int, float)) and OPS["=="](x, v)), f"== {exp.strip()}"
    raise ValueError(f"not an expectation: {exp!r} (try '>= 0.9', '0..150KB', '83.9us ± 2%', "
                     f"'none', 'any')")


def _same(m: Any, want: Any) -> bool:
    """`m` matches `want`: a mapping by the keys `want` names (keys compared as text, so
    JSON's "0" is YAML's 0), anything else as text, case-insensitive."""
    if isinstance(want, dict):
        if not isinstance(m, dict):
            return False
        got = {str(k): v for k, v in m.items()}
        return all(_same(got.get(str(k), ""), v) for k, v in want.items())
    return str(m).lower() == str(want).lower()


def _list_text(xs: list) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


@dataclass
class Evidence:
    """What one variant's run left, on the lab's time axis (model µs after t0)."""

    events: list[dict]
    metrics: list[dict] = field(default_factory=list)  # t_us, node, port, queue, metric, value
    counters: dict = field(default_factory=dict)  # node -> last counters
    flows: dict = field(default_factory=dict)  # flow -> result (src, dst, qps, rx_qps, ...)
    links: dict = field(default_factory=dict)  # "A->B" -> (A, ifname of A's port)
    link_bps: dict = field(default_factory=dict)  # "A->B" -> model bit/s
    frames: Callable[[str, str, list], list] | None = None  # (capture, filter, fields) -> rows
    result: dict = field(default_factory=dict)  # a torch workload's result (emu.run)


def _any(want: Any) -> Callable[[Any], bool]:
    if isinstance(want, list):
        return lambda x: x in want
    if isinstance(want, str) and any(ch in want for ch in "*?["):
        return lambda x: isinstance(x, str) and fnmatch.fnmatchcase(x, want)
    return lambda x: x == want


def matcher(ev: Evidence, sel: dict) -> Callable[[dict], bool]:
    """A predicate on events for the selector `sel`."""
    if not isinstance(sel, dict):
        raise ValueError(f"a selector mapping (ev: ..., node: ...), got {sel!r}")
    tests: list[Callable[[dict], bool]] = []

    def on(key: str, want: Any) -> None:
        f = _any(want)
        tests.append(lambda e: f(e.get(key)))

    for k, v in sel.items():
        if k not in SEL_SPECIAL:
            on(k, v)
    if "ev" in sel:
        on("ev", sel["ev"])
    if "node" in sel:
        on("node", sel["node"])
    port = sel.get("port")
    if isinstance(port, str) and "->" in port:
        if port not in ev.links:
            raise ValueError(f"port: no link {port!r}")
        node, ifname = ev.links[port]
        on("node", node)
        on("port", ifname)
    elif port is not None:
        on("port", port)
    for key, side, qps in (("flow", "src", "qps"), ("flow_rx", "dst", "rx_qps")):
        if key in sel:
            fr = ev.flows.get(sel[key])
            if fr is None:
                raise ValueError(f"{key}: no flow {sel[key]!r}")
            on("node", fr[side])
            on("qp", list(fr[qps]))
    lo = _bound(ev, sel["after"], "after") if "after" in sel else -math.inf
    hi = _bound(ev, sel["before"], "before") if "before" in sel else math.inf
    return lambda e: lo <= e["t"] <= hi and all(t(e) for t in tests)


def _bound(ev: Evidence, b: Any, key: str) -> float:
    """A time bound of a selector: µs (or a duration), or {first: SEL, plus: duration}:
    the first time of another selector, shifted (Figure 11-7's "t7 after t5"). When that
    selector matches nothing, nothing is after it (inf) and everything before it."""
    if not isinstance(b, dict):
        return value(b)
    if set(b) - {"first", "plus"} or not isinstance(b.get("first"), dict):
        raise ValueError(f"{key}: a time or {{first: SELECTOR, plus: DURATION}}, got {b!r}")
    t = first(ev, b["first"])
    return math.inf if t is None else t + (value(b["plus"]) if "plus" in b else 0.0)


def select(ev: Evidence, sel: dict) -> list[dict]:
    """The events matching `sel`, in time order."""
    m = matcher(ev, sel)
    return [e for e in ev.events if m(e)]


def first(ev: Evidence, sel: dict) -> float | None:
    """Model µs of the first matching event."""
    hit = select(ev, sel)
    return hit[0]["t"] if hit else None


def order(ev: Evidence, groups: list) -> tuple[bool, list]:
    """Whether each group's first times all precede the next group's; the times."""
    times = [[first(ev, s) for s in (g if isinstance(g, list) else [g])] for g in groups]
    ok = all(t is not None for g in times for t in g) and all(
        max(a) < min(b) for a, b in zip(times, times[1:]))
    return ok, [t[0] if len(t) == 1 else t for t in times]


def _window(spec: dict, ev: Evidence) -> tuple[float, float]:
    w = spec.get("window")
    if w is None:
        done = [f["done_us"] for f in ev.flows.values() if f.get("done_us") is not None]
        return 0.0, max(done, default=math.inf)
    if not (isinstance(w, list) and len(w) == 2):
        raise ValueError(f"window: [from, to] (µs or durations), got {w!r}")
    return value(w[0]), value(w[1])


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
    if "window" not in spec:
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
    node_ok = _any(spec.get("node", "*"))
    port = spec.get("port", "*")
    if isinstance(port, str) and "->" in port:
        if port not in ev.links:
            raise ValueError(f"counter.port: no link {port!r}")
        node_ok = _any(ev.links[port][0])
        port = ev.links[port][1]
    port_ok = _any(port)
    total = 0.0
    for node, c in ev.counters.items():
        if not node_ok(node):
            continue
        if "ports" not in c:  # a NIC: its top-level counters, else summed over its QPs
            v = c.get(name)
            if v is None and isinstance(c.get("qps"), dict):
                v = sum(q.get(name) or 0 for q in c["qps"].values())
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


def binom_interval(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The exact central interval [lo, hi] holding a Binomial(n, p) count with
    probability >= 1 - alpha."""
    if p <= 0:
        return 0, 0
    if p >= 1:
        return n, n
    lp, lq = math.log(p), math.log1p(-p)
    lg = math.lgamma(n + 1)
    cdf, lo, hi = 0.0, None, n
    for k in range(n + 1):
        cdf += math.exp(lg - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)
        if lo is None and cdf > alpha / 2:
            lo = k
        if cdf >= 1 - alpha / 2:
            hi = k
            break
    return lo or 0, hi


def curve_bins(ev: Evidence, spec: dict) -> list[dict]:
    """Per depth bin of a queue: arrivals, counted (marked or dropped), expected p and
    the interval; `ok` None where the bin has too few arrivals to judge."""
    port = spec.get("port")
    if port not in ev.links:
        raise ValueError(f"curve.port: no link {port!r}")
    node, ifname = ev.links[port]
    p = ev.counters.get(node, {}).get("ports", {}).get(ifname)
    if p is None:
        raise ValueError(f"curve.port: no counters of {port}")
    bins = p.get("wred_bins", {}).get(str(spec.get("queue", 3)))
    if bins is None:
        raise ValueError(f"curve.queue: queue {spec.get('queue', 3)} of {port} saw no arrivals")
    of = spec.get("of", "marked")
    if of not in ("marked", "dropped"):
        raise ValueError(f"curve.of: marked or dropped, got {of!r}")
    w = bins["bin_bytes"]
    wred = Wred(int(value(spec.get("min", "150KB"))), int(value(spec.get("max", "3000KB"))),
                100 * float(spec.get("pmax", 0.07)), 0, True)  # the book's curve, Ex 11-3
    min_seen = int(spec.get("min_seen", 20))
    judged = sum(1 for n in bins["seen"] if n >= min_seen)
    alpha = 0.01 / max(judged, 1)
    out = []
    for b, (n, k) in enumerate(zip(bins["seen"], bins[of])):
        if n == 0:
            continue
        a, z = b * w, (b + 1) * w
        # the bin's mean probability (arrivals taken as spread evenly over the bin)
        pe = sum(wred.probability(a + (i + 0.5) * w / 16) for i in range(16)) / 16
        ci = binom_interval(n, pe, alpha)
        out.append({"bin": b, "from": a, "to": z, "seen": n, of: k, "p": pe, "interval": ci,
                    "ok": (ci[0] <= k <= ci[1]) if n >= min_seen else None})
    return out


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
