"""Where a lab result came from, and docs/LAB_RESULTS.md written from results (issue 31
"Results a reader can check"; docs/LABS.md).

Every `emu lab run` records in lab.json's `run` the commit (`git rev-parse --short HEAD`)
and whether the tree was dirty, the machine (`uname -n`), its cores, the date, the lab's
wall time and the sha256 of the lab file it ran, so a result can later be told apart from
one of an older lab file. `emu lab run --all` writes docs/LAB_RESULTS.md at its end;
`emu lab results RUNDIR...` writes it again from run directories without rerunning, and
`emu lab results docs/LAB_RESULTS.md RUNDIR` updates the labs RUNDIR holds, keeping the
other labs' entries (emu.lab.results renders it; this module does the I/O).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from emu.lab import results
from emu.lab import schema as S
from emu.run.autotdf import machine_cores
from emucore import yamlcache
from emucore.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
#: what `emu lab run --all` writes unless told otherwise
RESULTS = ROOT / "docs" / "LAB_RESULTS.md"


def _git(*argv: str) -> str:
    try:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_state() -> tuple[str, bool]:
    """The checkout's short commit and whether tracked files differ from it."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    return head, bool(_git("status", "--porcelain", "--untracked-files=no"))


def file_sha(path: Path) -> str:
    """sha256 of a lab file's bytes (16 hex digits)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def machine() -> dict:
    """commit, dirty, machine, cores and date (UTC) of this process, now."""
    commit, dirty = git_state()
    return {"commit": commit, "dirty": dirty, "machine": os.uname().nodename,
            "cores": machine_cores(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                             time.gmtime())}


def earlier_run(out: Path) -> dict:
    """The `run` record of the lab.json already in `out` ({} when it has none)."""
    try:
        return json.loads((Path(out) / "lab.json").read_text()).get("run") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def provenance(lab: S.Lab, wall_s: float | None, rejudged: dict | None = None,
               variant: str | None = None) -> dict:
    """lab.json's `run`: where and from what this result came (`variant`: the one variant
    run, when not all were; `rejudged`: the record of the run whose evidence was judged
    again, kept under `evidence_from`)."""
    run = machine()
    path = Path(lab.path) if lab.path else None
    run.update(wall_s=None if wall_s is None else round(wall_s, 1),
               lab_file=(os.path.relpath(path, ROOT) if path else None),
               lab_sha=(file_sha(path) if path else None),
               lab_dirty=bool(path and _git("status", "--porcelain", "--", str(path))))
    if rejudged is not None:
        run["rejudged"] = True
        run["evidence_from"] = rejudged.get("evidence_from", rejudged)
        run["wall_s"] = run["evidence_from"].get("wall_s")
    if variant is not None:
        run["only_variant"] = variant
    return run


def catalogue() -> list[dict]:
    """The labs of labs/ in order: id, title and the sha of their file now (read, not
    validated: `emu lab list` names a bad lab file)."""
    out = []
    for path in S.catalogue():
        try:
            raw = yamlcache.load_file(path)
            lid, title = str(raw["id"]), str(raw["title"])
        except (yaml.YAMLError, TypeError, KeyError) as exc:
            lid, title = path.stem, f"bad lab file: {type(exc).__name__}"
        out.append({"id": lid, "title": title, "sha": file_sha(path)})
    return out


def _when(doc: dict) -> str:
    return (doc.get("run") or {}).get("date") or ""


def load_runs(dirs: list[Path]) -> dict:
    """lab id -> lab.json from run directories (each DIR/lab.json, or DIR/*/lab.json for a
    parent such as runs/). Of several results of one lab, one of its current lab file is
    preferred, then one of all its variants, then one that kept up with the model (a run
    that fell behind is no verdict), then the newest."""
    current = {lab["id"]: lab["sha"] for lab in catalogue()}
    best: dict = {}
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise ValueError(f"{d}: not a directory")
        found = [d / "lab.json"] if (d / "lab.json").is_file() else sorted(d.glob("*/lab.json"))
        if not found:
            raise ValueError(f"{d}: no lab.json in it or in its subdirectories")
        for f in found:
            try:
                doc = json.loads(f.read_text())
                lid = doc["id"]
            except (OSError, ValueError, KeyError) as exc:
                raise ValueError(f"{f}: not a lab.json ({exc})") from None
            sha = (doc.get("run") or {}).get("lab_sha")
            whole = not (doc.get("run") or {}).get("only_variant")
            key = (sha is not None and sha == current.get(lid), whole,
                   doc.get("kept_up") is True, _when(doc))
            if lid not in best or key >= best[lid][0]:
                best[lid] = (key, doc)
    return {lid: doc for lid, (_, doc) in best.items()}


def write(path: Path, docs: dict, command: str, reasons: dict | None = None,
          kept: dict | None = None) -> str:
    """Render LAB_RESULTS.md for the catalogue from `docs` (and the `kept` entries of an
    earlier file: results.results_md) and write it atomically."""
    head = dict(machine(), command=command)
    text = results.results_md(catalogue(), docs, head, reasons, kept)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(str(path), text)
    return text


def load_kept(files: list[Path]) -> dict:
    """lab id -> its entry (results.entries) in the results files named (a later file's
    entry of a lab wins); a file with none is not a results file."""
    kept: dict = {}
    for f in files:
        found = results.entries(Path(f).read_text())
        if not found:
            raise ValueError(f"{f}: not a LAB_RESULTS.md (no lab result in it)")
        kept.update(found)
    return kept


def cmd_results(args) -> int:
    """`emu lab results RUNDIR... [--out PATH]`: LAB_RESULTS.md from existing runs. A
    RUNDIR that is a file is an earlier LAB_RESULTS.md: a lab the run directories give no
    result of its current lab file keeps its entry there if that entry is of the current
    lab file - so one lab's entry is updated with `emu lab results docs/LAB_RESULTS.md
    RUNDIR`."""
    try:
        kept = load_kept([Path(d) for d in args.rundirs if Path(d).is_file()])
        docs = load_runs([Path(d) for d in args.rundirs if not Path(d).is_file()])
    except (OSError, ValueError) as exc:
        print(f"emu lab results: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else RESULTS
    write(out, docs, " ".join(["python -m emu lab results", *args.rundirs]), kept=kept)
    print(f"Wrote {out} ({len(docs)} lab results read"
          + (f"; {len(kept)} entries of earlier results read)" if kept else ")"))
    return 0
