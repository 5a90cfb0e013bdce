"""The layering of docs/ARCHITECTURE.md holds for every product module.

emucore  <-  topologies, switch_agent, traffic  <-  collectives  <-  emu

and inside a package its rooms (sub-packages) point one way too (ROOMS): emucore.wire
below emucore's top-level modules below emucore.qos; traffic's transports below its NIC
below its tools and workloads; emu's wings from realise/observe up to the CLI.

Every import statement is read from the source (module level, inside functions, inside
`if`/`try`), so no edge can hide; project imports belong at the top of the module (an
`if TYPE_CHECKING:` block at module level counts as the top). The one deferred import is
listed in DEFERRED with its reason. No module is over MAX_LINES lines (docs/CONVENTIONS.md)
but those of OVER_MAX_LINES, a list that only shrinks.
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

#: package -> its rooms in tiers, lowest first. A room is a sub-package ("emu.run") or a
#: top-level module named here ("emu.cli"); "pkg.*" is the package's other top-level
#: modules and its __init__. A module may import its own room and the rooms of lower
#: tiers; rooms of one tier never import each other. Written down from the imports of
#: issue 29 (the wire formats know nothing of the QoS; emu's wings from the bottom:
#: realise and observe, then what uses them, the run, the lab on runs, benches and
#: commands, the CLI). A new room gets a place here and in ARCHITECTURE.md.
ROOMS: dict[str, list[set[str]]] = {
    "emucore": [{"emucore.wire"},                   # packet formats
                {"emucore.*"},                      # timedil, rawsock, lbconfig, yamlform ...
                {"emucore.qos"}],                   # QoS stages, their YAML, DCBX policy
    "traffic": [{"traffic.*"},                      # verbs, dcqcn
                {"traffic.fast"},                   # per-frame work in C (a transport picks it)
                {"traffic.rc", "traffic.uet"},      # the transports
                {"traffic.nic"},                    # the RNIC over them
                {"traffic.tools", "traffic.workloads"}],
    "collectives": [{"collectives.compute"}, {"collectives.*"}, {"collectives.workloads"}],
    "emu": [{"emu.*", "emu.realise", "emu.observe", "emu.mncli"},   # emu.*: the __init__
            {"emu.cluster", "emu.faults", "emu.peers"},
            {"emu.run"},
            {"emu.lab"},
            {"emu.bench", "emu.commands"},
            {"emu.cli"},
            {"emu.__main__"}],
}

#: (module, imported module) -> why the import waits until it is needed. (traffic/fast's
#: wrappers load their C through emucore.datapath.compiled, which imports it only when
#: chosen: tests/unit/test_datapath.py)
DEFERRED = {
    ("emu.cli", "emu.bench.basic"): "the benches run the switch pipeline and Scapy in-process "
                              "(0.6 s of imports); every other command starts without them",
    ("emu.cli", "emu.bench.uet"): "as emu.bench.basic: Scapy and rich, only for `emu bench uet`",
    ("emu.cli", "emu.commands.run"): "the run's machinery and Mininet, only for `emu run` (its "
                                     "parser is emu.commands.run_args; issue 30)",
    ("emu.cli", "emu.lab.command"): "Scapy, matplotlib, rich, only for `emu lab` (its parser is "
                                    "emu.commands.lab_args; issue 30)",
    ("emu.cli", "emu.observe.summary"): "rich, only for `emu report` (issue 30)",
    ("emucore.wire.templates", "emucore.wire.roce"): "Scapy (~0.5 s of CPU per process) only for "
                                                    "tests and pcaps: a NIC builds frames without it",
    ("emucore.framing", "emucore.wire.fast"): "the C framing is imported only when chosen: "
                                              "EMU_DATAPATH=python runs where it is not built",
    ("switch_agent.fastagent", "switch_agent.fast.pipeline"): "the C agent pipeline is imported "
                                                             "only when chosen (EMU_DATAPATH auto or fast)",
    ("emu.observe.calibrate", "switch_agent.fast.pipeline"): "the C pipeline is timed only for "
                                                             "a run whose agents run C; the "
                                                             "Python one runs where it is not built",
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

#: docs/CONVENTIONS.md "Modules stay small"
MAX_LINES = 400
#: module -> why it is longer than MAX_LINES for now. Only shrinks: an entry that is no
#: longer over the limit must go.
OVER_MAX_LINES: dict[str, str] = {}


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


def _room(name: str) -> str:
    """The room of a module: its sub-package, a top-level module ROOMS names, or pkg.*."""
    pkg, *rest = name.split(".")
    room = f"{pkg}.{rest[0]}" if rest else pkg
    if rest and ((ROOT / pkg / rest[0]).is_dir()
                 or any(room in tier for tier in ROOMS.get(pkg, []))):
        return room
    return f"{pkg}.*"


def _tier(room: str) -> int | None:
    """The tier of a room in its package's ROOMS (None: not placed)."""
    tiers = ROOMS.get(room.split(".")[0], [])
    return next((i for i, tier in enumerate(tiers) if room in tier), None)


def _beside_or_above(name: str, path: Path) -> list[str]:
    """The imports of `name` into a room of its package that is not below its own."""
    pkg, here = name.split(".")[0], _room(name)
    if pkg not in ROOMS:
        return []
    return [f"line {line}: {t} ({_room(t)})" for t, line, _ in _imports(name, path)
            if t.split(".")[0] == pkg and _room(t) != here
            and _tier(_room(t)) >= _tier(here)]


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


def test_every_room_has_a_place():
    rooms = {_room(n) for n in MODULES if n.split(".")[0] in ROOMS}
    assert not [r for r in sorted(rooms) if _tier(r) is None], "give each room a tier in ROOMS"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.split(".")[0] in ROOMS))
def test_imports_point_down_between_rooms(name):
    bad = _beside_or_above(name, MODULES[name])
    assert not bad, f"{name} ({_room(name)}) imports a room beside or above its own: {bad}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_small(name):
    n = len(MODULES[name].read_text().splitlines())
    if name in OVER_MAX_LINES:
        assert n > MAX_LINES, f"{name} is {n} lines now: remove it from OVER_MAX_LINES"
    else:
        assert n <= MAX_LINES, f"{name} is {n} lines, over {MAX_LINES}: split it along its " \
                               f"mechanisms (docs/CONVENTIONS.md)"


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


def _plant(monkeypatch, name: str, src: str) -> Path:
    """A product module `name` whose source is `src` (no file is written)."""
    fake = ROOT.joinpath(*name.split(".")).with_suffix(".py")
    monkeypatch.setitem(MODULES, name, fake)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: src if self == fake
                        else Path.read_bytes(self).decode())
    return fake


def test_the_checker_sees_a_hidden_upward_import(tmp_path, monkeypatch):
    """The checker itself: a function-local upward import in `emucore` is reported."""
    tree_name = "emucore._probe_for_test"
    fake = _plant(monkeypatch, tree_name, "def f():\n    from emu import cli\n")
    found = _imports(tree_name, fake)
    assert found == [("emu.cli", 2, False)]


@pytest.mark.parametrize("name, src, found", [
    ("emucore.wire._probe_for_test", "from emucore.qos import qosconfig\n",
     ["line 1: emucore.qos.qosconfig (emucore.qos)"]),                    # upward
    ("emu.faults._probe_for_test", "import os\n\ndef f():\n    import emu.cluster.placer\n",
     ["line 4: emu.cluster.placer (emu.cluster)"]),                       # beside, hidden
    ("traffic.rc._probe_for_test", "from traffic.verbs import Verb\n", []),  # downward
])
def test_the_checker_sees_a_planted_import_between_rooms(monkeypatch, name, src, found):
    """The room checker itself, on a planted module's source."""
    fake = _plant(monkeypatch, name, src)
    assert _beside_or_above(name, fake) == found
