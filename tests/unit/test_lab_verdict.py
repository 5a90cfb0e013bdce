"""emu.lab.verdict: every judged check names its bound's source (book, catalogue, theory,
spec), never a run; a check may differ from the book for a stated reason, an outcome
apart from pass and fail (issue 31)."""

import copy

import pytest

from emu.lab import schema as S
from emu.lab import verdict as V
from emu.lab.runner import entry

BASE = {"id": "T1", "title": "t", "topology": {"preset": "rail2x4"}, "dcqcn": "off",
        "flows": [{"name": "a", "src": "h1g1", "dst": "h2g1", "size": "1MB"}],
        "checks": [{"name": "no drops", "counter": {"node": "*", "name": "drops"},
                    "expect": "== 0", "source": "book: ch.11 L2499"}]}


def lab_with(**check) -> dict:
    d = copy.deepcopy(BASE)
    d["checks"][0] = {"name": "no drops", "counter": {"node": "*", "name": "drops"}, **check}
    return d


def test_a_source_is_a_kind_and_a_citation_either_way():
    for raw in ("book: ch.11 L2499", {"kind": "book", "cite": "ch.11 L2499"}):
        [c] = S.parse(lab_with(expect="== 0", source=raw)).checks
        assert c["source"] == {"kind": "book", "cite": "ch.11 L2499"}
    assert V.cite_text({"kind": "theory", "cite": "C/N fair share"}) == "theory: C/N fair share"


def test_a_judged_check_without_a_source_is_refused_naming_the_lab_and_the_check(tmp_path):
    with pytest.raises(ValueError, match=r"checks\[0\]\.source: missing for the judged check "
                                         r"'no drops'"):
        S.parse(lab_with(expect="== 0"))
    p = tmp_path / "T9.yaml"
    import yaml
    p.write_text(yaml.safe_dump(lab_with(expect="== 0")))
    with pytest.raises(ValueError, match=r"^T9\.yaml: checks\[0\]\.source: missing .*'no drops'"):
        S.load(str(p))


def test_a_shown_check_needs_no_source():
    [c] = S.parse(lab_with(expect="any")).checks
    assert c["source"] is None and V.shown(c)


@pytest.mark.parametrize("raw,match", [
    ("ch.11 L2499", r"'KIND: citation' with KIND one of book \| catalogue \| theory \| spec"),
    ("run: first run here", r"KIND one of"),
    ({"kind": "run", "cite": "0.058"}, r"source\.kind: one of .* never set from a run"),
    ({"kind": "book"}, r"source\.cite: the citation"),
    ("catalogue: calibrated: 0.058 measured", r"says the bound came from a run \('calibrat'\)"),
    ("theory: set from that run", r"never fitted to a measurement"),
    ("book: ch.11 (emu measured 0.983)", r"'measured'"),
])
def test_a_bound_fitted_to_a_run_or_an_unknown_kind_is_refused(raw, match):
    with pytest.raises(ValueError, match=match):
        S.parse(lab_with(expect="== 0", source=raw))


DIFFERS = {"expect": "< 0", "why": "a shared buffer counts an ingress's bytes at egress",
           "source": "theory: shared-buffer PFC accounting"}


def test_differs_needs_its_own_bound_reason_and_source():
    [c] = S.parse(lab_with(expect=">= 0", source="book: ch.11 Fig 11-7",
                           differs=DIFFERS)).checks
    assert c["differs"]["source"] == {"kind": "theory", "cite": "shared-buffer PFC accounting"}
    for key, match in [("why", r"differs\.why: why emu differs"),
                       ("source", r"differs\.source: where emu's bound"),
                       ("expect", r"differs\.expect: emu's own bound")]:
        d = {k: v for k, v in DIFFERS.items() if k != key}
        with pytest.raises(ValueError, match=match):
            S.parse(lab_with(expect=">= 0", source="book: x", differs=d))
    with pytest.raises(ValueError, match=r"differs\.expect: not an expectation"):
        S.parse(lab_with(expect=">= 0", source="book: x", differs={**DIFFERS, "expect": ">> 1"}))
    with pytest.raises(ValueError, match=r"differs\.colour: unknown field"):
        S.parse(lab_with(expect=">= 0", source="book: x", differs={**DIFFERS, "colour": 1}))
    with pytest.raises(ValueError, match=r"differs: a shown check"):
        S.parse(lab_with(expect="any", differs=DIFFERS))


def test_outcomes_pass_differs_fail_and_shown():
    [c] = S.parse(lab_with(expect=">= 0", source="book: ch.11 Fig 11-7", differs=DIFFERS)).checks
    assert V.outcome(True, 5.0, c) == ("pass", "")
    assert V.outcome(False, -3.0, c) == ("differs", "< 0")  # misses the book, meets emu's
    assert V.outcome(False, None, c) == ("fail", "")         # meets neither
    plain = {**c, "differs": None}
    assert V.outcome(False, -3.0, plain) == ("fail", "")
    shown = {**c, "expect": "any"}
    assert V.outcome(True, 1.0, shown) == ("shown", "")
    assert V.outcome(False, "error: no link", shown) == ("fail", "")  # not measured at all


def test_a_differing_check_in_lab_json_carries_the_reason_and_both_bounds():
    [c] = S.parse(lab_with(expect=">= 0", source="book: ch.11 Fig 11-7", differs=DIFFERS)).checks
    e = entry(c, "no drops [a]", "a", -671.1, False, ">= 0")
    assert (e["outcome"], e["pass"], e["source"]) == ("differs", True, "book: ch.11 Fig 11-7")
    assert e["differs"] == {"expected": "< 0", "why": DIFFERS["why"],
                            "source": "theory: shared-buffer PFC accounting"}
    assert entry(c, "x", "a", 1.0, True, ">= 0")["outcome"] == "pass"
    assert entry(c, "x", "a", None, False, ">= 0")["pass"] is False


def test_the_lab_verdict_counts_differs_apart():
    assert V.lab_verdict(["pass", "shown"], True) == "pass"
    assert V.lab_verdict(["pass", "differs"], True) == "differs"
    assert V.lab_verdict(["differs", "fail"], True) == "fail"
    assert V.lab_verdict(["pass"], False) == "fail"   # fell behind the model
    assert V.lab_verdict([], True) == "fail"
    assert V.tally(["pass", "differs", "pass", "shown"]) == {
        "pass": 2, "differs": 1, "fail": 0, "shown": 1}


def test_every_catalogue_check_is_shown_or_names_a_source():
    kinds = set()
    for p in S.catalogue():
        for c in S.load(str(p)).checks:
            assert V.shown(c) or c["source"]["kind"] in V.SOURCE_KINDS, (p.stem, c["name"])
            if c["source"]:
                kinds.add(c["source"]["kind"])
    assert kinds == set(V.SOURCE_KINDS)


#: a differs that rests on a premise measured by another check (L12.2: no flowlet moved)
PREMISE = {"when": {"check": "a.moved", "expect": "== 0"},
           "why": "nothing moved, so the book's premise does not hold here",
           "source": "theory: the comparison asks what the move changed"}


def premise_lab(differs: dict, on: str = "ratio") -> S.Lab:
    d = copy.deepcopy(BASE)
    d["variants"] = {"a": {}, "b": {}}
    judged = {"source": "catalogue: X (P) <= 0.5 x b", "expect": "<= 0.5", "differs": differs}
    d["checks"] = [{"name": "moved", "counter": {"node": "*", "name": "drops"}, "variant": "a",
                    "expect": "any"},
                   {"name": "q", "counter": {"node": "*", "name": "drops"}, "expect": "any"},
                   {"name": "per variant", "counter": {"node": "*", "name": "drops"},
                    "variant": "a", **judged}]
    if on == "ratio":
        d["checks"].append({"name": "q a / b", "ratio": {"num": "a.q", "den": "b.q"}, **judged})
    return S.parse(d)


def test_a_premise_names_a_per_variant_check_of_its_variant_and_may_stand_for_the_bound():
    c = premise_lab(PREMISE).checks[3]
    assert c["differs"]["when"] == PREMISE["when"] and c["differs"]["expect"] == "any"
    assert V.differs_text(c["differs"]) == "not asked: a.moved == 0"
    assert V.differs_text({**c["differs"], "expect": "> 0"}) == "> 0, not asked: a.moved == 0"
    for when, match in [({"check": "b.moved", "expect": "== 0"}, r"no per-variant check 'moved'"
                                                                 r" in variant 'b'"),
                        ({"check": "a.q a / b", "expect": "== 0"}, r"no per-variant check"),
                        ({"check": "moved", "expect": "== 0"}, r"when\.check: 'variant\.check"),
                        ({"check": "a.moved"}, r"differs\.when: \{check: VARIANT\.CHECK"),
                        ({"check": "a.moved", "expect": ">> 0"}, r"when\.expect: not an exp")]:
        with pytest.raises(ValueError, match=match):
            premise_lab({**PREMISE, "when": when})
    with pytest.raises(ValueError, match=r"differs\.expect: emu's own bound .*\(or `when`"):
        premise_lab({k: v for k, v in PREMISE.items() if k != "when"})


def test_without_its_premise_the_book_is_not_asked_with_it_the_book_judges():
    c = premise_lab(PREMISE).checks[3]
    not_asked = ("differs", "not asked: a.moved == 0")
    assert V.outcome(False, 0.9, c, {"a.moved": 0}) == not_asked
    assert V.outcome(True, 0.3, c, {"a.moved": 0}) == not_asked  # a chance pass proves nothing
    assert V.outcome(True, 0.3, c, {"a.moved": 2}) == ("pass", "")  # premise held: the book
    assert V.outcome(False, 0.9, c, {"a.moved": 2}) == ("fail", "")
    assert V.outcome(False, 0.9, c, {}) == ("fail", "")               # premise not measured
    assert V.outcome(True, 0.3, c) == ("pass", "")
    assert V.outcome(False, "not measured: no b.q", c, {"a.moved": 0}) == ("fail", "")
    bounded = {**c, "differs": {**c["differs"], "expect": ">= 0.8"}}
    assert V.outcome(False, 0.9, bounded, {"a.moved": 0})[0] == "differs"
    assert V.outcome(True, 0.3, bounded, {"a.moved": 0})[0] == "fail"


@pytest.mark.parametrize("moved,q_a,want", [(0, 90.0, "differs"), (3, 90.0, "fail"),
                                           (0, 40.0, "differs"), (3, 40.0, "pass")])
def test_premises_are_settled_once_every_variant_ran(moved, q_a, want):
    from emu.lab.runner import judge_ratios
    lab = premise_lab(PREMISE)
    by = {c["name"]: c for c in lab.checks}
    r = q_a / 100
    results = [entry(by["moved"], "moved [a]", "a", moved, True, "any"),
               entry(by["q"], "q [a]", "a", q_a, True, "any"),
               entry(by["per variant"], "per variant [a]", "a", r, r <= 0.5, "<= 0.5"),
               entry(by["q"], "q [b]", "b", 100.0, True, "any")]
    assert results[2]["outcome"] == ("pass" if r <= 0.5 else "fail")  # the book, until settled
    ratios = judge_ratios(lab, results)
    assert [x["outcome"] for x in (results[2], *ratios)] == [want, want]
    assert ratios[0]["measured"] == r
    assert ratios[0]["differs"]["expected"] == "not asked: a.moved == 0"


@pytest.mark.parametrize("lab_id", ["L14.3", "L9.1"])
def test_a_torch_lab_plans_its_workload_so_the_build_prestarts_the_job_s_zygote(lab_id, tmp_path):
    """The build starts a torch job's zygote when the plan names a torch workload (emu.run.
    build, collectives.launch.Prestart), and the job takes it only if started alike: the
    plan's options and the job's come from one place (runner.workload_options)."""
    from emu.lab.runner import plan_of, workload_options
    from emu.run.options import TORCH_WORKLOADS
    lab = S.load(lab_id)
    v = lab.variants[0]
    opts = plan_of(v, tmp_path, 1.0).options
    if v.workload:
        assert opts.workload in TORCH_WORKLOADS and opts.workload == v.workload["name"]
        assert {k: getattr(opts, k) for k in workload_options(v)} == workload_options(v)
        assert (opts.size, opts.ring) == (v.workload["size"], v.workload["ring"])
    else:
        assert workload_options(v) == {} and opts.workload is None
