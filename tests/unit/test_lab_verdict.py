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
