"""The layering of docs/ARCHITECTURE.md holds for every product module.

emucore  <-  topologies, switch_agent, traffic  <-  collectives  <-  emu

Every import statement is read from the source (module level, inside functions, inside
`if`/`try`), so no edge can hide; project imports belong at the top of the module (an
`if TYPE_CHECKING:` block at module level counts as the top). The one deferred import is
listed in DEFERRED with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: package -> the project packages it may import (besides itself).
ALLOWED = {
    "emucore": set(),
    "topologies": {"emucore"},
    "switch_agent": {"emucore"},
    "traffic": {"emucore"},
    "collectives": {"emucore", "traffic"},
    "emu": {"emucore", "topologies", "switch_agent", "traffic", "collectives"},
}
PACKAGES = set(ALLOWED)

#: (module, imported module) -> why the import waits until it is needed.
DEFERRED = {
    ("emu.cli", "emu.bench.basic"): "the benches run the switch pipeline and Scapy in-process "
                              "(0.6 s of imports); every other command starts without them",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _product_modules() -> dict[str, Path]:
    out = {}
    for pkg in sorted(PACKAGES):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


MODULES = _product_modules()


def _imports(name: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported project module, line, at module level) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = {id(n) for n in tree.body}
    for n in tree.body:  # `if TYPE_CHECKING:` at module level shows its edges
        if isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING"):
            top_level |= {id(m) for m in n.body}
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import mod` names a module when pkg.mod is one
            targets = list(dict.fromkeys(f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES
                                         else mod for a in node.names))
        for t in targets:
            if t.split(".")[0] in PACKAGES:
                out.append((t, node.lineno, id(node) in top_level))
    return out


def test_the_layout_has_the_packages():
    for pkg in PACKAGES:
        assert (ROOT / pkg / "__init__.py").is_file(), pkg
    assert len(MODULES) > 60


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name):
    pkg = name.split(".")[0]
    bad = [f"line {line}: {t}" for t, line, _ in _imports(name, MODULES[name])
           if t.split(".")[0] not in ALLOWED[pkg] | {pkg}]
    assert not bad, f"{name} imports above or beside its layer: {bad}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_project_imports_are_at_module_level(name):
    hidden = [f"line {line}: {t}" for t, line, top in _imports(name, MODULES[name])
              if not top and (name, t) not in DEFERRED]
    assert not hidden, f"{name} hides an edge in a function-local import: {hidden}"


def test_no_import_cycle_between_modules():
    graph = {n: {t for t, _, _ in _imports(n, p) if t in MODULES and t != n}
             for n, p in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycle = stack[stack.index(m):] + [m]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_deferred_imports_are_still_deferred():
    """An entry of DEFERRED that no longer matches a function-local import is stale."""
    for (name, target), why in DEFERRED.items():
        assert why and (target, False) in {(t, top) for t, _, top in _imports(name, MODULES[name])}


def test_the_checker_sees_a_hidden_upward_import(tmp_path, monkeypatch):
    """The checker itself: a function-local upward import in `fabric` is reported."""
    fake = ROOT / "emucore" / "_probe_for_test.py"
    src = "def f():\n    from emu import cli\n"
    tree_name = "fabric._probe_for_test"
    monkeypatch.setitem(MODULES, tree_name, fake)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: src if self == fake
                        else Path.read_bytes(self).decode())
    found = _imports(tree_name, fake)
    assert found == [("emu.cli", 2, False)]
