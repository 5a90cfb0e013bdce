"""The documentation stays true to the tree.

* docs/ARCHITECTURE.md's module list ("## Modules") names every product module by its
  path, and every path it names exists;
* its layer picture and "may import" table agree with tests/unit/test_layers.py's ALLOWED
  (the picture is text, so it cannot drift from the rule unnoticed);
* every relative link in README.md and docs/*.md resolves to a file;
* nothing in the repository points outside it to the design notes beside it;
* README.md stays a front door: at most 200 lines, with a "Quick start".
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_layers import ALLOWED

ROOT = Path(__file__).resolve().parents[2]
ARCH = ROOT / "docs" / "ARCHITECTURE.md"
README = ROOT / "README.md"
PACKAGES = sorted(ALLOWED)
MODULE_PATH = re.compile(r"`((?:%s)/[\w/]+\.py)`" % "|".join(PACKAGES))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section (up to the next `## `)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def product_modules() -> set[str]:
    """Every .py of a product package but __init__ and __main__, as a repo path."""
    return {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if p.name not in ("__init__.py", "__main__.py")}


def listed_modules() -> set[str]:
    return set(MODULE_PATH.findall(_section(ARCH.read_text(), "Modules")))


def test_every_product_module_is_in_the_module_list():
    missing = sorted(product_modules() - listed_modules())
    assert not missing, f"docs/ARCHITECTURE.md '## Modules' does not name: {missing}"


def test_every_listed_module_exists():
    gone = sorted(p for p in listed_modules() if not (ROOT / p).is_file())
    assert not gone, f"docs/ARCHITECTURE.md '## Modules' names paths not in the tree: {gone}"


def _layer_rows() -> list[list[str]]:
    """The packages of each line of the picture after the `<!-- layers` comment, top first."""
    text = ARCH.read_text()
    block = text[text.index("<!-- layers"):].split("```")[1]
    word = re.compile(r"[a-z_]+")
    rows = [[w for w in word.findall(line) if w in ALLOWED] for line in block.splitlines()]
    return [r for r in rows if r]


def _level(pkg: str) -> int:
    deps = ALLOWED[pkg]
    return 1 + max(map(_level, deps)) if deps else 0


def test_layer_picture_matches_allowed():
    rows = _layer_rows()
    drawn = [p for r in rows for p in r]
    assert sorted(drawn) == PACKAGES, f"the picture draws {drawn}, ALLOWED has {PACKAGES}"
    for height, row in enumerate(reversed(rows)):
        for pkg in row:
            assert _level(pkg) == height, (
                f"{pkg} is drawn on row {height} from the bottom; by ALLOWED it belongs on "
                f"row {_level(pkg)}")


def test_may_import_table_matches_allowed():
    table = {}
    for line in _section(ARCH.read_text(), "Layers (imports point one way)").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2:
            table[cells[0].strip("`")] = set(re.findall(r"`(\w+)`", cells[1]))
    assert table == ALLOWED


def _docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc: Path):
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        if not (doc.parent / path).exists():
            bad.append(target)
    assert not bad, f"{doc.name}: links to nothing: {bad}"


def test_nothing_points_outside_the_repository():
    needle = "../" + "shared"  # spelled apart, so this file does not match itself
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if path.is_file():
            try:
                if needle in path.read_text(errors="strict"):
                    hits.append(name)
            except (UnicodeDecodeError, OSError):
                continue  # a binary file
    assert not hits, f"files that reference {needle}: {hits}"


def test_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines (<= 200)"
    assert "\n## Quick start\n" in text
    assert "./setup.sh run rail2x4" in text and "./setup.sh test" in text
