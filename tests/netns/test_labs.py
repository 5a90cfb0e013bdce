"""`emu lab` end to end (root): L11.4 runs and passes with the fidelity guard satisfied, and
so do L11.3, L11.7 and every lab docs/LAB_RESULTS.md records as taking a minute or less -
each must reach the verdict that file records; a deliberately wrong expectation fails with
the measured value; lab.html renders in a real headless browser (Debian's chromium) with its images.
Only L11.4's page is looked at, so only L11.4 draws its plots (issue 30: 0.6-3.2 s a lab).
"""

import dataclasses
import json
import shutil
import subprocess

import pytest

from emu.lab import command, publish, results
from emu.lab import schema as S

pytestmark = pytest.mark.netns


def run_kept_up(lab_id: str, out, plots: bool = False):
    """Runs a lab; when a busy machine made it fall behind the model (its verdict does
    not count), once more at the guard's suggested TDF, as the lab itself advises.
    `plots`: draw lab.html's plots (0.6-3.2 s a lab; only the page test looks at them)."""
    lab = S.load(lab_id)
    code, doc = command.run_one(lab, out, None, quiet=True, plots=plots)
    if doc["kept_up"] is False:
        tdf = max(v["suggested_tdf"] for v in doc["variants"].values() if v["suggested_tdf"])
        lab = S.load(lab_id, tdf)
        code, doc = command.run_one(lab, out / f"tdf{tdf:g}", None, quiet=True, plots=plots)
        out = out / f"tdf{tdf:g}"
    return lab, out, code, doc


@pytest.fixture(scope="module")
def l114(tmp_path_factory):
    return run_kept_up("L11.4", tmp_path_factory.mktemp("L11.4"), plots=True)


def _failed(doc):
    return [c for c in doc["checks"] if not c["pass"]]


def test_l11_4_the_cascade_goes_upstream_and_recovers_downstream(l114):
    _, out, code, doc = l114
    assert doc["kept_up"] is True, doc["variants"]
    assert (code, doc["verdict"]) == (0, "pass"), _failed(doc)
    assert json.loads((out / "lab.json").read_text())["verdict"] == "pass"


def test_a_wrong_expectation_fails_naming_what_was_measured(l114, capsys, tmp_path):
    lab, out, _, _ = l114
    wrong = [dict(c, expect="== 8") if c["name"].startswith("paused links") else c
             for c in lab.checks]
    again = shutil.copytree(out, tmp_path / "L11.4")  # the page test reads out's lab.html
    code, doc = command.run_one(dataclasses.replace(lab, checks=wrong), again, None,
                                quiet=True, rejudge=True, plots=False)
    [bad] = _failed(doc)
    assert (code, bad["measured"], bad["expected"]) == (1, 7, "== 8")
    assert "paused links" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_lab_html_renders_with_its_images_in_a_headless_browser(l114):
    _, out, _, _ = l114
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--virtual-time-budget=5000", "--dump-dom",
                        (out / "lab.html").resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert 'id="verdict"' in dom and "PASS" in dom, r.stderr[-2000:]
    n_img = (out / "lab.html").read_text().count("<img ")
    assert n_img >= 2 and f'data-images-loaded="{n_img}"' in dom


#: issue 31: "CI runs every lab that takes under ~60 s"; a lab's time is the wall time
#: docs/LAB_RESULTS.md records for it (one `emu lab run` on the 2-core VM)
CI_WALL_S = 60
RECORDED = results.recorded(publish.RESULTS.read_text())
#: labs whose verdict does not hold from run to run, so CI cannot hold them to the file (a
#: finding, said in the lab file; not a reason to move a bound). L12.2's two same-path
#: comparisons (completion 1.79 / 1.06 / 1.40 in three runs) rest on a flowlet moving, and
#: differ when none did (differs.when); two runs since: differs both times
NOT_REPEATABLE: dict[str, str] = {
    "UE.1": "roce7's DCQCN starved one sender in 1 of 6 runs on 2026-11-29 (11 CNPs 50 us "
            "apart, 0.15 Gb/s, done at 3036 us: uet7 / roce7 0.19 against 1 +- 10 %); "
            "labs/UE.1.yaml",
    "L13.9": "its spray variant's verdict is pass or differs from run to run: 5, 11 and 15 CE "
             "marks on pod 2's rho = 1 downlinks (2026-11-27, 2026-11-29 02:25 and 02:36 UTC: "
             "1-2 CNPs a sender, differs) and none in the fresh-clone suite of 45738d8 (03:45 "
             "UTC: no CNP, every flow 0.970, pass); labs/L13.9.yaml"}
#: L11.4 runs in the fixture above; L11.3 and L11.7 run whatever their time
CI_LABS = sorted(({lab for lab, r in RECORDED.items() if r["wall_s"] <= CI_WALL_S
                   and r["verdict"] != "fell behind"} | {"L11.3", "L11.7"})
                 - {"L11.4"} - set(NOT_REPEATABLE))


@pytest.mark.parametrize("lab_id", CI_LABS)
def test_lab_reaches_the_verdict_lab_results_records(lab_id, tmp_path):
    """The committed docs/LAB_RESULTS.md stays true: the lab, run again, reaches the verdict
    the file records for it (pass when it records none), with the guard saying it kept up."""
    want = RECORDED.get(lab_id, {"verdict": "pass"})["verdict"]
    _, _, code, doc = run_kept_up(lab_id, tmp_path)
    assert doc["kept_up"] is True, doc["variants"]
    assert doc["verdict"] == want, ("regenerate docs/LAB_RESULTS.md if the change is meant",
                                    _failed(doc))
    assert code == (command.EXIT_PASS if want in ("pass", "differs") else command.EXIT_FAIL)
