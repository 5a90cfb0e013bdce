"""emu.lab.checks: every primitive on a synthetic event log, metrics and counters."""

import math

import pytest

from emu.lab import checks as C
from emu.lab import curve as CV
from emu.lab import evidence as E
from emu.lab import expect as X
from emucore.qos.wred import Wred

EVENTS = [
    {"t": 1.0, "node": "lab", "ev": "flow_start", "flow": "a"},
    {"t": 10.0, "node": "rail3", "ev": "wred_min", "port": "eth4", "queue": 3, "dir": "up"},
    {"t": 12.5, "node": "rail3", "ev": "ce_first", "port": "eth4", "queue": 3},
    {"t": 20.0, "node": "rail3", "ev": "xoff", "port": "eth1", "prio": 3, "bytes": 3200000},
    {"t": 25.0, "node": "spine1", "ev": "xoff", "port": "eth1", "prio": 3},
    {"t": 26.0, "node": "spine1", "ev": "xoff", "port": "eth2", "prio": 3},
    {"t": 30.0, "node": "h1g1", "ev": "cnp_rx", "qp": 17},
    {"t": 31.0, "node": "h1g1", "ev": "rate", "qp": 17, "rate_bps": 1e11, "why": "cut"},
    {"t": 40.0, "node": "spine1", "ev": "xoff", "port": "eth1", "prio": 3},
    {"t": 60.0, "node": "rail3", "ev": "xon", "port": "eth1", "prio": 3},
]
LINKS = {"rail3->spine1": ("rail3", "eth1"), "spine1->rail1": ("spine1", "eth1"),
         "spine1->rail2": ("spine1", "eth2"), "rail3->h3": ("rail3", "eth4")}
FLOWS = {"a": {"src": "h1g1", "dst": "h3g3", "qps": [17], "rx_qps": [5], "status": "SUCCESS",
               "byte_exact": True, "rate_model_bps": 5e10, "link_bps": 2e11, "done_us": 100.0},
         "b": {"src": "h2g1", "dst": "h3g3", "qps": [18], "rx_qps": [6], "status": "TIMEOUT",
               "byte_exact": False, "rate_model_bps": None, "link_bps": 2e11, "done_us": None}}
METRICS = [{"t_us": t, "node": n, "port": p, "queue": q, "metric": m, "value": v}
           for t, n, p, q, m, v in [
               (5, "rail3", "eth4", "", "tx_bps", 2e11), (15, "rail3", "eth4", "", "tx_bps", 1e11),
               (25, "rail3", "eth4", "", "tx_bps", 0.0), (15, "rail3", "eth4", "3", "depth_bytes", 4e5),
               (25, "rail3", "eth4", "3", "depth_bytes", 9e5),
               (10, "h1g1", "qp17", "", "tx_bps", 1.5e11), (20, "h1g1", "qp17", "", "tx_bps", 0.5e11)]]
COUNTERS = {"rail3": {"ports": {"eth1": {"drops": {"wred": 2}, "tx_packets": 9,
                                         "queues": {"3": {"drops": {"wred": 2}, "ecn_marks": 7}},
                                         "pfc": {"pause_tx": [0, 0, 0, 4, 0, 0, 0, 0]}},
                                "eth4": {"drops": {}, "tx_packets": 1, "queues": {},
                                         "pfc": {"pause_tx": [0] * 8}}}},
            "spine1": {"ports": {"eth1": {"drops": {"tail": 1}, "tx_packets": 0, "queues": {},
                                          "pfc": {"pause_tx": [0, 0, 0, 2, 0, 0, 0, 1]}}}},
            "h1g1": {"tx_frames": 100, "pfc_rx": 3}}
EV = E.Evidence(EVENTS, METRICS, COUNTERS, FLOWS, LINKS, {k: 4e11 for k in LINKS})


def check(kind, spec, **kw):
    c = {"name": "x", "kind": kind, kind: spec, **kw}
    m, held = C.measure(EV, c)
    return m, C.judge(m, held, c)[0]


@pytest.mark.parametrize("kind,spec,expect,measured,ok", [
    ("first", {"ev": "xoff", "port": "rail3->spine1"}, ">= 0", 20.0, True),
    ("first", {"ev": "xoff", "node": "spine1"}, "25us", 25.0, True),
    ("first", {"ev": "xoff", "node": "rail1"}, "none", None, True),
    ("first", {"ev": "xoff", "node": "spine1", "after": "30us"}, "40", 40.0, True),
    ("count", {"ev": "xoff"}, "== 4", 4, True),
    ("count", {"ev": "xoff", "distinct": ["node", "port"]}, "== 3", 3, True),
    ("count", {"ev": "xoff", "node": "spine*"}, "== 3", 3, True),
    ("count", {"ev": "xoff", "prio": [0, 1, 2]}, "== 0", 0, True),
    ("count", {"ev": "cnp_rx", "flow": "a"}, ">= 1", 1, True),
    ("count", {"ev": ["cnp_rx", "rate"], "flow": ["a", "b"]}, "== 2", 2, True),
    ("count", {"ev": "cnp_rx", "flow": ["b"]}, "== 0", 0, True),
    ("span", {"from": {"ev": "xoff", "node": "rail3"}, "to": {"ev": "xon"}}, "40us ± 1%", 40.0, True),
    ("rate", {"flow": "a"}, "50Gbps", 5e10, True),
    ("rate", {"flow": "a", "of_link": True}, "0.25", 0.25, True),
    ("rate", {"flow": "a", "window": ["0us", "15us"]}, "150Gbps", 1.5e11, True),
    ("util", {"link": "rail3->h3", "window": [0, 20]}, "0.375", 0.375, True),
    ("util", {"link": "rail3->h3", "window": [{"first": {"ev": "ce_first"}}, 20]}, "0.25", 0.25, True),
    ("util", {"link": "rail3->h3", "window": [{"first": {"ev": "wred_min"}, "plus": "4us"}, "1ms"]},
     "0.125", 0.125, True),
    ("rate", {"flow": "a", "window": [0, {"first": {"ev": "xoff", "node": "spine1"}}]}, "100Gbps",
     1e11, True),
    ("util", {"link": "rail3->h3", "window": [{"first": {"ev": "xoff", "node": "rail9"}}, 20]},
     "none", None, True),
    ("max", {"link": "rail3->h3", "queue": 3}, "> 150KB", 9e5, True),
    ("max", {"ev": "rate", "field": "rate_bps"}, "100Gbps", 1e11, True),
    ("counter", {"node": "*", "name": "drops"}, "== 0", 3.0, False),
    ("counter", {"node": "*", "name": "drops", "queue": 3}, "== 2", 2.0, True),
    ("counter", {"port": "rail3->spine1", "name": "pause_tx", "prio": 3}, "4", 4.0, True),
    ("counter", {"node": "spine1", "name": "pause_tx"}, "3", 3.0, True),
    ("counter", {"node": "h1g1", "name": "pfc_rx"}, "3", 3.0, True),
    ("flows", {}, "all", "1/2", False),
])
def test_primitives(kind, spec, expect, measured, ok):
    m, passed = check(kind, spec, expect=expect)
    assert m == pytest.approx(measured) if isinstance(measured, float) else m == measured
    assert passed is ok


def test_order_holds_group_by_group_and_reports_the_times():
    groups = [{"ev": "wred_min"}, {"ev": "ce_first"},
              [{"ev": "xoff", "port": "spine1->rail1"}, {"ev": "xoff", "port": "spine1->rail2"}],
              {"ev": "xon"}]
    m, ok = check("order", groups)
    assert ok and m == [10.0, 12.5, [25.0, 26.0], 60.0]
    m, ok = check("order", [{"ev": "xon"}, {"ev": "xoff", "node": "rail3"}])
    assert not ok and m == [60.0, 20.0]
    m, ok = check("order", [{"ev": "xoff"}, {"ev": "xoff", "node": "rail9"}])
    assert not ok and m == [20.0, None]  # an event that never happened breaks the order


@pytest.mark.parametrize("exp,good,badv", [
    (">= 0.9", 0.9, 0.89), ("< 150KB", 149_999, 150_000), ("0.9..1.1", 1.0, 1.2),
    ("83.9us ± 2%", 85.0, 86.0), ("100 +- 5", 104, 106), ("!= 0", 1, 0), (True, True, False),
    ("none", None, 0), ({"eth.type": "0x8808"}, {"eth.type": "0x8808", "x": 1}, {"eth.type": "0x0800"}),
])
def test_expectations(exp, good, badv):
    pred, _ = X.parse_expect(exp)
    assert pred(good) and not pred(badv)


@pytest.mark.parametrize("text,v", [("150KB", 150_000), ("3MB", 3_000_000), ("100Gbps", 1e11),
                                    ("10us", 10.0), ("1ms", 1000.0), ("83.9", 83.9)])
def test_values_with_units(text, v):
    assert X.value(text) == pytest.approx(v)


def test_bad_expectations_and_selectors_are_errors():
    for e in (">> 3", "soon", None, {1}):
        with pytest.raises(ValueError):
            X.parse_expect(e)
    with pytest.raises(ValueError, match="no link 'rail9->x'"):
        check("first", {"ev": "xoff", "port": "rail9->x"})
    with pytest.raises(ValueError, match="no flow 'zz'"):
        check("count", {"ev": "cnp_rx", "flow": "zz"})
    with pytest.raises(ValueError, match="flow_rx: no flow 'zz'"):
        check("count", {"ev": "cnp_rx", "flow_rx": ["a", "zz"]})
    with pytest.raises(ValueError, match="window: a time or"):
        check("util", {"link": "rail3->h3", "window": [{"after": 3}, 20]})


def test_ratio_over_measured_values_of_variants():
    vals = {"pfc_only.xoffs": 40, "both.xoffs": 4, "both.none": None}
    assert C.ratio(vals, {"num": "pfc_only.xoffs", "den": "both.xoffs"}) == 10
    assert C.ratio(vals, {"num": "both.none", "den": "both.xoffs"}) is None
    assert C.ratio(vals, {"num": "pfc_only.xoffs", "den": 0}) == math.inf
    with pytest.raises(ValueError, match="no measured value 'x.y'"):
        C.ratio(vals, {"num": "x.y", "den": 1})


def test_binomial_interval_is_exact_and_central():
    lo, hi = CV.binom_interval(100, 0.5, 0.01)
    assert (lo, hi) == (37, 63)  # scipy.stats.binom.interval(0.99, 100, 0.5)
    assert CV.binom_interval(50, 0.0, 0.01) == (0, 0)
    assert CV.binom_interval(50, 1.0, 0.01) == (50, 50)


def test_the_wred_curve_of_example_11_3():
    wred = Wred(150_000, 3_000_000, 7.0, 0, True)  # what curve checks against
    assert wred.probability(100e3) == 0.0
    assert wred.probability(1575e3) == pytest.approx(0.035)
    assert wred.probability(3000e3) == 1.0


def _curve_ev(marked):
    seen = [400] * 40
    bins = {"bin_bytes": 150_000, "seen": seen, "marked": marked, "dropped": [0] * 40}
    counters = {"rail1": {"ports": {"eth4": {"wred_bins": {"3": bins}}}}}
    return E.Evidence([], [], counters, {}, {"rail1->h4": ("rail1", "eth4")}, {})


def test_curve_counts_the_bins_outside_the_binomial_interval():
    # the expected marks of bin b: 400 x the mean p over [150 KB b, 150 KB (b + 1))
    good = [0] + [round(400 * 0.07 * (b - 0.5) / 19) for b in range(1, 20)] + [400] * 20
    c = {"name": "x", "kind": "curve", "curve": {"port": "rail1->h4", "queue": 3}, "expect": "== 0"}
    assert C.measure(_curve_ev(good), c) == (0, None)
    bad = list(good)
    bad[10], bad[0], bad[25] = 100, 5, 300  # 25 % at 1.5 MB; marks below min; 75 % above max
    assert C.measure(_curve_ev(bad), c) == (3, None)
    rows = CV.curve_bins(_curve_ev(bad), c["curve"])
    assert rows[10]["p"] == pytest.approx(0.07 * 9.5 / 19) and rows[10]["ok"] is False
    with pytest.raises(ValueError, match="curve.queue: queue 0"):
        C.measure(_curve_ev(good), {**c, "curve": {"port": "rail1->h4", "queue": 0}})
    with pytest.raises(ValueError, match="curve.of"):
        C.measure(_curve_ev(good), {**c, "curve": {"port": "rail1->h4", "of": "seen"}})


def test_result_paths_and_list_expectations():
    ev = E.Evidence([], result={"utilization": [25, 50], "trace": {"RS1": "ABCD"},
                                "tx": {"h1g2": 6144}, "exp": 6144.0,
                                "slots": [{"rank": 0, "host": "h1"}]})
    c = {"name": "x", "kind": "result", "result": {"path": "utilization"}, "expect": [25, 50]}
    m, held = C.measure(ev, c)
    assert C.judge(m, held, c) == (True, "[25, 50]")
    assert C.judge([25, 75], None, c)[0] is False
    assert C.measure(ev, {**c, "result": {"path": "slots.0.host"}})[0] == "h1"
    assert C.measure(ev, {**c, "result": {"path": "tx.h1g2", "over": "exp"}})[0] == 1.0
    d = {"name": "x", "kind": "result", "result": {"path": "trace"}, "expect": {"RS1": "abcd"}}
    assert C.judge(C.measure(ev, d)[0], None, d)[0] is True
    with pytest.raises(ValueError, match="nothing at 'trace.RS9'"):
        C.measure(ev, {**c, "result": {"path": "trace.RS9"}})
    with pytest.raises(ValueError, match="ran no workload"):
        C.measure(E.Evidence([]), c)


def test_text_expectation():
    pred, text = X.parse_expect("is BCDA")
    assert text == "is BCDA" and pred("BCDA") and not pred("bcda") and not pred("BCD")


def test_mappings_match_by_the_keys_named_and_lists_of_mappings_element_by_element():
    pred, _ = X.parse_expect({0: "127.0.0.1", "4": "192.168.10.101"})
    assert pred({"0": "127.0.0.1", "1": "x", "4": "192.168.10.101"})
    assert pred({0: "127.0.0.1", 4: "192.168.10.101"})
    assert not pred({"0": "192.168.10.101", "4": "192.168.10.101"})
    table, _ = X.parse_expect([{"rank": 0, "host": "h1"}, {"rank": 4, "host": "h2"}])
    assert table([{"rank": 0, "host": "h1", "gpu": "h1g1"}, {"rank": 4, "host": "h2"}])
    assert not table([{"rank": 0, "host": "h1"}, {"rank": 4, "host": "h1"}])
    assert not table([{"rank": 0, "host": "h1"}])


def test_percentile_of_an_event_field_nearest_rank():
    evs = [{"t": float(i), "node": "rail1", "ev": "cnp_fwd", "port": "eth2", "queue": 7,
            "sojourn": s} for i, s in enumerate([0.4, 0.1, 30.0, 0.2, 0.3])]
    evs.append({"t": 9.0, "node": "rail1", "ev": "cnp_fwd", "port": "eth3", "sojourn": 99.0})
    ev = E.Evidence(evs, links={"rail1->h2": ("rail1", "eth2")})
    sel = {"ev": "cnp_fwd", "port": "rail1->h2", "field": "sojourn"}
    assert C.percentile(ev, {**sel, "p": 50}) == 0.3
    assert C.percentile(ev, {**sel, "p": 80}) == 0.4
    assert C.percentile(ev, {**sel, "p": 99}) == 30.0
    assert C.percentile(ev, {**sel, "p": 20}) == 0.1
    assert C.percentile(ev, {**sel, "queue": 3}) is None
    assert C.measure(ev, {"kind": "pct", "pct": sel}) == (0.3, None)


def test_pct_check_shape_is_validated():
    from emu.lab.schema import check_of
    c = check_of({"name": "x", "pct": {"ev": "cnp_fwd", "field": "sojourn", "p": 99}}, 0, [])
    assert c["kind"] == "pct"
    with pytest.raises(ValueError, match=r"checks\[0\].pct.field"):
        check_of({"name": "x", "pct": {"ev": "cnp_fwd"}}, 0, [])
    with pytest.raises(ValueError, match=r"checks\[0\].pct.p: a percentile"):
        check_of({"name": "x", "pct": {"field": "sojourn", "p": 0}}, 0, [])


def test_after_and_before_another_event():
    evs = [{"t": t, "node": "rail1", "ev": e, "port": "eth3"} for t, e in
           [(1.0, "wred_min"), (5.0, "xoff"), (7.0, "wred_min"), (9.0, "xon"), (2009.5, "xoff")]]
    ev = E.Evidence(evs)
    t5 = {"ev": "xoff"}
    assert E.first(ev, {"ev": "wred_min", "after": {"first": t5}}) == 7.0
    assert E.first(ev, {"ev": "wred_min", "before": {"first": t5}}) == 1.0
    late = {"ev": "xoff", "after": {"first": {"ev": "xon"}, "plus": "2ms"}}
    assert E.first(ev, late) == 2009.5
    assert len(E.select(ev, {**late, "after": {"first": {"ev": "xon"}, "plus": "2001us"}})) == 0
    assert E.select(ev, {"ev": "xoff", "after": {"first": {"ev": "none"}}}) == []
    with pytest.raises(ValueError, match="after: a time or"):
        E.select(ev, {"ev": "xoff", "after": {"first": t5, "minus": 1}})


def test_an_order_with_expect_any_is_shown_not_judged():
    c = {"kind": "order", "order": [{"ev": "xon"}, {"ev": "xoff"}]}
    assert C.judge([60.0, 20.0], False, c) == (False, "in this order")
    assert C.judge([60.0, 20.0], False, {**c, "expect": "any"}) == (
        True, "(shown: in this order - no)")
    assert C.judge([1.0, 2.0], True, {**c, "expect": "any"})[1] == "(shown: in this order - yes)"


def paced_ev(counters, rates, post=0.0):
    """One flow of 2 MB from h1g1 (QP 7) whose NIC logged `rates` [(t, bit/s)] after a
    post at `post` µs, its last counters `counters`."""
    evs = [{"t": post, "node": "h1g1", "ev": "wr_post", "qp": 7}]
    evs += [{"t": t, "node": "h1g1", "ev": "rate", "qp": 7, "rate_bps": r, "why": "cut"}
            for t, r in rates]
    evs.append({"t": 5.0, "node": "h2g1", "ev": "rate", "qp": 7, "rate_bps": 1.0})  # another NIC
    fl = {"a": {"src": "h1g1", "qps": [7], "bytes": 2_000_000, "start_us": 0.0,
                "link_bps": 2e11, "rate_model_bps": 1e11}}
    return E.Evidence(evs, counters={"h1g1": counters}, flows=fl)


LIVE = {"qps": {"7": {"tx_wire_bytes": 2_500_000}}}
CLOSED = {"qps": {}, "closed_qps": [{"qpn": 7, "tx_wire_bytes": 2_500_000}]}


@pytest.mark.parametrize("counters,rates,post,bps", [
    # 20 Mbit on the wire: 10 at 200G in 50 us, then 10 at 100G in 100 us -> 16 Mbit / 150 us
    (LIVE, [(50.0, 1e11)], 0.0, 16e6 / 150e-6),
    (CLOSED, [(50.0, 1e11)], 0.0, 16e6 / 150e-6),  # a destroyed QP's counters
    (LIVE, [], 0.0, 16e6 / 100e-6),  # never cut: line rate, 100 us
    (LIVE, [(50.0, 1e11), (60.0, 2e11)], 0.0, 16e6 / 105e-6),  # 10 us at half rate: +5 us
    (LIVE, [(200.0, 1e11)], 0.0, 16e6 / 100e-6),  # a cut after the last byte changes nothing
    (LIVE, [], 10.0, 16e6 / 110e-6),  # posted 10 us after the flow's start
    ({}, [], 0.0, None),  # no wire bytes: not measured
])
def test_rate_paced_integrates_the_senders_rate_events(counters, rates, post, bps):
    ev = paced_ev(counters, rates, post)
    got = C.rate(ev, {"flow": "a", "paced": True})
    assert got == (None if bps is None else pytest.approx(bps))
    if bps is not None:
        assert C.rate(ev, {"flow": "a", "paced": True, "of_link": True}) == pytest.approx(bps / 2e11)
