"""docs/LAB_RESULTS.md: every lab's verdict as last run - results a reader can check
(issue 31 "Results a reader can check"; docs/LABS.md; pure: tests/unit/test_lab_results.py).

Written by `emu lab run --all`, or again from run directories by `emu lab results RUNDIR...`
(emu.lab.publish gathers the inputs). A header says which command made the file, at which
commit (and whether the tree was dirty), on which machine, how many cores, when. A summary
row per lab of the catalogue: its verdict, TDF, data path, whether the fidelity guard says
it kept up, its wall time and the commit its result came from. Then per lab and variant:
the guard's verdict, and per check the measured value, the bound, where the bound comes
from (book, catalogue, theory, spec: emu.lab.verdict) and the outcome (pass, differs,
fail, shown). Every lab of the catalogue has a row: one without a result says why (not
run, errored, interrupted, only one variant run, or its result came from another lab
file). A lab that fell
behind the model says so, and its verdict does not count as a pass.
"""

from __future__ import annotations

import re

from emu.lab.page import _fmt

OUTCOME_TEXT = {"pass": "pass", "differs": "**differs**", "fail": "**FAIL**",
                "shown": "shown"}
TALLY = ("pass", "differs", "fail", "shown")
NO_RESULT = "not run at this commit"


def _cell(x, limit: int | None = None) -> str:
    """Markdown table cell text: one line, pipes escaped; cut to `limit` characters (only
    a measured value is: a bound, its source and a check's name are given whole)."""
    t = _fmt(x).replace("|", "\\|").replace("\n", " ")
    return t if limit is None or len(t) <= limit else t[:limit - 3] + "..."


def _num(x) -> str:
    """A TDF in full (10000, not 1e+04)."""
    return f"{x:g}" if isinstance(x, (int, float)) and x < 1e15 else str(x)


def _secs(x) -> str:
    """A wall time: '812 s', or '-' when unknown."""
    return f"{x:.0f} s" if isinstance(x, (int, float)) else "-"


def commit_text(run: dict) -> str:
    """'abc1234', 'abc1234 (dirty)' or 'abc1234 (dirty, the lab file too)': the commit a
    result or the file came from."""
    dirty = ((" (dirty, the lab file too)" if run.get("lab_dirty") else " (dirty)")
             if run.get("dirty") else "")
    return f"{run.get('commit') or 'unknown'}{dirty}"


def _guard(v: dict) -> str:
    kept = v.get("kept_up")
    lag = v.get("p99_lag_us")
    lag_text = f" (p99 lag {_fmt(lag)} µs model)" if isinstance(lag, (int, float)) else ""
    if kept is True:
        return "kept up" + lag_text
    if kept is False:
        tdf = v.get("suggested_tdf")
        return "fell behind" + lag_text + (f", rerun at TDF {_num(tdf)}" if tdf else "")
    return "not judged"


def why_no_result(doc: dict | None, lab_sha: str) -> str:
    """Why a lab.json is not a result of the current lab file ('' when it is)."""
    if doc is None:
        return NO_RESULT
    run = doc.get("run")
    if not run or not run.get("lab_sha"):
        return "its lab.json predates runs recording their commit and lab file"
    if run["lab_sha"] != lab_sha:
        return f"its run at commit {commit_text(run)} used another version of the lab file"
    if run.get("only_variant"):
        return f"only variant {run['only_variant']} was run, at commit {commit_text(run)}"
    return ""


def verdict_text(doc: dict) -> str:
    """The lab's verdict for the summary; one that fell behind does not count."""
    if doc.get("kept_up") is False:
        return "**fell behind** (does not count)"
    if doc.get("kept_up") is None:
        return "**not judged** (no guard verdict)"
    return OUTCOME_TEXT.get(doc["verdict"], doc["verdict"])


def _joined(doc: dict, key: str, fmt=str) -> str:
    """The variants' values of `key`, each once, in order ('10000', 'python, fast')."""
    seen = []
    for v in doc["variants"].values():
        t = fmt(v.get(key)) if v.get(key) is not None else "?"
        if t not in seen:
            seen.append(t)
    return ", ".join(seen) or "-"


def _kept_up(doc: dict) -> str:
    return {True: "yes", False: "**no**"}.get(doc.get("kept_up"), "-")


def summary_row(lab: dict, doc: dict | None, reason: str) -> str:
    """One lab's row of the summary table."""
    link = f"[{lab['id']}](#{anchor(lab['id'], lab['title'])})"
    if reason:
        return f"| {lab['id']} | {_cell(lab['title'])} | no result: {reason} | | | | | | |"
    t = doc.get("outcomes", {})
    run = doc["run"]
    return (f"| {link} | {_cell(lab['title'])} | {verdict_text(doc)} | "
            + " / ".join(str(t.get(k, 0)) for k in TALLY)
            + f" | {_joined(doc, 'tdf', _num)} | {_joined(doc, 'data_path')} | "
              f"{_kept_up(doc)} | {_secs(run.get('wall_s'))} | {commit_text(run)} |")


def lab_section(lab: dict, doc: dict) -> list[str]:
    """One lab's part: where its result came from, its variants, its checks."""
    t = doc.get("outcomes", {})
    counts = ", ".join(f"{t[k]} {k}" for k in TALLY if t.get(k))
    run = doc["run"]
    rejudged = ("" if not run.get("rejudged") else " - judged again from the evidence of a "
                f"run at commit {commit_text(run.get('evidence_from') or {})}, "
                f"{(run.get('evidence_from') or {}).get('date', 'date unknown')}")
    verdict = (f"Verdict: **{doc['verdict']}** ({counts or 'no checks'})." if
               doc.get("kept_up") is not False else "Verdict: **fell behind** - the lab "
               f"did not keep up with the model, so its checks ({counts}) do not count.")
    out = [f"## {lab['id']}: {lab['title']}", "", verdict, "",
           f"Result from commit {commit_text(run)}, lab file {run['lab_file']} "
           f"(sha256 {run['lab_sha']}), on {run.get('machine', '?')} "
           f"({run.get('cores', '?')} cores), {run.get('date', '?')}; wall time "
           f"{_secs(run.get('wall_s'))}{rejudged}.", "",
           "| variant | TDF | data path | traffic done in (lab) | fidelity guard |",
           "|---|---|---|---|---|"]
    for name, v in doc["variants"].items():
        out.append(f"| {_cell(name)} | {_num(v.get('tdf'))} | {v.get('data_path', '?')} | "
                   f"{_fmt(v.get('lab_s'))} s | {_guard(v)} |")
    out += ["", "| check | variant | measured | bound | source | outcome |",
            "|---|---|---|---|---|---|"]
    notes = []
    for c in doc["checks"]:
        res = c.get("outcome", "pass" if c.get("pass") else "fail")
        bound = str(c["expected"])
        src = c.get("source") or "-"
        d = c.get("differs")
        if d:
            bound += f" (emu: {d['expected']})"
            src += f"; emu: {d['source']}"
            if res == "differs":
                notes.append(f"* {c.get('check', c['name'])}: {d['why']}")
        out.append(f"| {_cell(c.get('check', c['name']))} | {_cell(c.get('variant') or 'all')} | "
                   f"{_cell(c['measured'], 160)} | {_cell(bound)} | {_cell(src)} | "
                   f"{OUTCOME_TEXT.get(res, res)} |")
    if notes:
        out += ["", "Where emu differs from the book, and why:", "", *notes]
    return out + [""]


def header_lines(head: dict, n_labs: int, verdicts: list[str]) -> list[str]:
    """The title, where the file came from, and how many labs have a result (`verdicts`:
    the summary's verdict text of each)."""
    dirty = (" - the working tree had uncommitted changes (dirty)" if head.get("dirty")
             else " (clean tree)")
    tally = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))
    return ["# Lab results", "",
            f"Generated by `{head['command']}` at commit {head['commit']}{dirty}, on "
            f"{head['machine']} ({head['cores']} cores), {head['date']}. Do not edit: "
            "regenerate it (`python -m emu lab run --all`, or `python -m emu lab results "
            "RUNDIR...` from existing runs).", "",
            f"{len(verdicts)} of {n_labs} labs have a result from their current lab file"
            + (f": {tally}." if verdicts else
               ": the benchmark has not been run at this commit. Run every lab with `sudo "
               ".venv/bin/python -m emu lab run --all`, or one with `emu lab run ID` and "
               "then `python -m emu lab results RUNDIR...`."), "",
            "Each check's bound and where it comes from are in its lab file (labs/*.yaml, "
            "[LABS.md](LABS.md)); an outcome is pass, **differs** (emu differs from the "
            "book where the book simplifies, for the reason given), **FAIL** or shown (a "
            "figure without a bound, not judged). A verdict counts only when the fidelity "
            "guard says the lab kept up with the model; a lab that fell behind says so. "
            "Each result names the commit it came from; \"dirty\" means that commit plus "
            "uncommitted changes.", ""]


def results_md(labs: list[dict], docs: dict, head: dict,
               reasons: dict | None = None, kept: dict | None = None) -> str:
    """The whole file. `labs`: the catalogue in order, each {id, title, sha} (sha256 of
    its lab file); `docs`: lab id -> lab.json document; `head`: command, commit, dirty,
    machine, cores, date of this file; `reasons`: lab id -> why it has no result
    (errored, interrupted) when it has no lab.json; `kept`: lab id -> its entry in an
    earlier file (`entries`), kept as it was when `docs` has no result of the lab's
    current file and the entry is of that file."""
    reasons, kept = reasons or {}, kept or {}
    why, keep = {}, set()
    for lab in labs:
        why[lab["id"]] = why_no_result(docs.get(lab["id"]), lab["sha"])
        old = kept.get(lab["id"])
        if why[lab["id"]] and old and old["lab_sha"] == lab["sha"]:
            why[lab["id"]] = ""
            keep.add(lab["id"])
        elif lab["id"] in reasons and why[lab["id"]] == NO_RESULT:
            why[lab["id"]] = reasons[lab["id"]]
    verdicts = [kept[lab["id"]]["verdict"] if lab["id"] in keep else
                verdict_text(docs[lab["id"]]) for lab in labs if not why[lab["id"]]]
    rows = [kept[lab["id"]]["row"] if lab["id"] in keep else
            summary_row(lab, docs.get(lab["id"]), why[lab["id"]]) for lab in labs]
    out = header_lines(head, len(labs), verdicts)
    out += ["| lab | title | verdict | pass / differs / fail / shown | TDF | data path | "
            "kept up | wall time | commit |", "|---|---|---|---|---|---|---|---|---|",
            *rows, ""]
    for lab in labs:
        if lab["id"] in keep:
            out += kept[lab["id"]]["section"]
        elif not why[lab["id"]]:
            out += lab_section(lab, docs[lab["id"]])
    return "\n".join(out)


def anchor(lab_id: str, title: str) -> str:
    """GitHub's anchor of the lab's heading."""
    text = f"{lab_id}: {title}".lower()
    return "".join(ch for ch in text.replace(" ", "-") if ch.isalnum() or ch in "-_")


_ROW = re.compile(r"^\| \[?(?P<id>[A-Z]+[0-9.]+)\]?(?:\(#[^)]*\))? \| (?:\\\||[^|])* \| "
                  r"(?P<verdict>[^|]+?) \|(?:[^|]*\|){4} (?P<wall>\d+) s \|")
_SECTION = re.compile(r"^## (?P<id>[A-Z]+[0-9.]+): ")
_FROM = re.compile(r"^Result from commit .*?, lab file (?P<file>\S+) \(sha256 (?P<sha>[0-9a-f]+)\)")
_VERDICTS = {v: k for k, v in OUTCOME_TEXT.items()} | {
    "**fell behind** (does not count)": "fell behind",
    "**not judged** (no guard verdict)": "not judged"}


def recorded(md: str) -> dict[str, dict]:
    """What a LAB_RESULTS.md says, read back (the inverse of `results_md` for the labs
    that have a result): lab id -> {verdict (pass, differs, fail, shown, fell behind),
    wall_s, lab_file, lab_sha}. Labs without a result are absent."""
    out: dict[str, dict] = {}
    section = None
    for line in md.splitlines():
        if (m := _ROW.match(line)) and m["verdict"] in _VERDICTS:
            out[m["id"]] = {"verdict": _VERDICTS[m["verdict"]], "wall_s": int(m["wall"])}
        elif m := _SECTION.match(line):
            section = m["id"]
        elif (m := _FROM.match(line)) and section in out:
            out[section].update(lab_file=m["file"], lab_sha=m["sha"])
    return out


def entries(md: str) -> dict[str, dict]:
    """The labs that have a result in a LAB_RESULTS.md, each read back whole so that
    `results_md` can keep it: lab id -> {row: its summary row, verdict: the row's verdict
    text, section: its lines, lab_sha: the lab file it came from}."""
    rows, sections, section = {}, {}, None
    for line in md.split("\n"):
        if (m := _ROW.match(line)) and m["verdict"] in _VERDICTS:
            rows[m["id"]] = {"row": line, "verdict": m["verdict"]}
        elif line.startswith("## "):
            section = m["id"] if (m := _SECTION.match(line)) else None
            if section:
                sections[section] = []
        if section:
            sections[section].append(line)
    out = {}
    for lid, row in rows.items():
        lines = sections.get(lid, [])
        sha = next((m["sha"] for x in lines if (m := _FROM.match(x))), None)
        if sha:
            out[lid] = dict(row, section=lines, lab_sha=sha)
    return out
