"""Fabric descriptions: presets, the rail{R}x{H} generator and the user YAML format.

`load(name_or_path)` returns a validated `Fabric` without touching the system, so every
check happens before any namespace exists (docs/ARCHITECTURE.md "One run", step 1).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from emucore import yamlcache
from topologies.model import Fabric
from topologies.rail import RAIL_NAME, RailSpec, build_rail

PRESET_DIR = Path(__file__).parent / "presets"
KINDS = ("rail",)


class TopologyError(ValueError):
    """Bad topology input; the message names the field and the value."""


def _fabric_presets() -> dict[str, Path]:
    """Preset name -> file; each file is parsed once per process (`emucore.yamlcache`)."""
    out = {}
    for path in sorted(PRESET_DIR.glob("*.yaml")):
        try:
            data = yamlcache.load_file(path) or {}
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and data.get("kind") in KINDS:
            out[path.stem] = path
    return out


def presets() -> dict[str, str]:
    """Named presets -> one-line description (`emu list`)."""
    out = {}
    for name, path in _fabric_presets().items():
        data = yamlcache.load_file(path)
        out[name] = str(data.get("description", "")).strip()
    return out


def from_dict(data: dict, source: str = "<dict>", **overrides) -> Fabric:
    """Build a fabric from a YAML-style mapping; unknown keys and bad values are errors."""
    if not isinstance(data, dict):
        raise TopologyError(f"{source}: expected a mapping at top level, got {type(data).__name__}")
    data = dict(data)
    kind = data.pop("kind", "rail")
    if kind not in KINDS:
        raise TopologyError(f"{source}: kind: unknown topology kind {kind!r} (known: {', '.join(KINDS)})")
    known = set(RailSpec.__dataclass_fields__)
    for key in data:
        if key not in known:
            raise TopologyError(f"{source}: {key}: unknown field (known: {', '.join(sorted(known))})")
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return build_rail(RailSpec(**data))
    except ValueError as exc:
        raise TopologyError(f"{source}: {exc}") from None


def _named_spec(name: str) -> tuple[dict, str] | None:
    """(YAML mapping, source label) of a preset or a generated ``rail{R}x{H}`` name."""
    presets_ = _fabric_presets()
    if name in presets_:
        data = yamlcache.load_file(presets_[name])
        data.setdefault("name", name)
        return data, f"preset {name}"
    m = RAIL_NAME.match(name)
    if m:
        return {"gpus_per_host": int(m.group(1)), "hosts": int(m.group(2))}, name
    return None


def _unknown(name: str, also: str = "") -> TopologyError:
    return TopologyError(f"unknown topology {name!r}: not a preset "
                         f"({', '.join(_fabric_presets())}), not rail{{R}}x{{H}}{also}")


def spec_of(name: str) -> dict:
    """The YAML mapping of a preset or of a generated ``rail{R}x{H}`` name (to merge
    overrides into before `from_dict`, as `emu lab` does)."""
    named = _named_spec(name)
    if named is None:
        raise _unknown(name)
    return named[0]


def load(name: str, spines: int | None = None, tdf: float | None = None) -> Fabric:
    """A preset name, a generator name ``rail{R}x{H}``, or a path to a YAML file."""
    overrides = {"spines": spines, "tdf": tdf}
    path = Path(name)
    if name.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise TopologyError(f"topology file {name!r} does not exist")
        try:
            data = yamlcache.load_file(path)
        except yaml.YAMLError as exc:
            raise TopologyError(f"{name}: not valid YAML: {exc}") from None
        return from_dict(data, source=name, **overrides)
    named = _named_spec(name)
    if named is None:
        raise _unknown(name, ", not a YAML file")
    return from_dict(named[0], source=named[1], **overrides)
