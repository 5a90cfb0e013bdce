"""emucore.yamlcache: a YAML file parsed once per process gives what a fresh
`yaml.safe_load` gives, a copy a caller may change, and a new parse when the file changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import topologies
from emu.lab import schema
from emucore import yamlcache
from emucore.qos import load as qos_load

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = (sorted(topologies.PRESET_DIR.glob("*.yaml"))
           + sorted(qos_load.PRESET_DIR.glob("*.yaml")) + schema.catalogue())


@pytest.fixture(autouse=True)
def fresh_cache():
    yamlcache.clear()
    yield
    yamlcache.clear()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_file_loads_as_a_fresh_safe_load(path):
    fresh = yaml.safe_load(path.read_text())      # the pure-Python loader, no cache
    assert yamlcache.load_file(path) == fresh     # first call: parsed (C loader if any)
    assert yamlcache.load_file(path) == fresh     # second call: from the cache


def test_presets_and_specs_equal_those_parsed_fresh():
    for name, path in topologies._fabric_presets().items():
        want = yaml.safe_load(path.read_text())
        want.setdefault("name", name)
        assert topologies.spec_of(name) == want
        assert topologies.spec_of(name) == want   # the cached parse, setdefault not leaked
        assert topologies.presets()[name] == str(want.get("description", "")).strip()


def test_a_caller_cannot_change_the_cached_value(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("a: {b: [1, 2]}\nc: !!set {x: null}\n")
    got = yamlcache.load_file(p)
    got["a"]["b"].append(3)
    got["c"].add("y")
    got["new"] = 1
    assert yamlcache.load_file(p) == {"a": {"b": [1, 2]}, "c": {"x"}}


def test_an_alias_stays_one_object_within_a_copy(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("one: &f [1, 2]\ntwo: *f\n")
    for _ in range(2):
        got = yamlcache.load_file(p)
        assert got["one"] is got["two"]           # as yaml.safe_load shares an alias
    assert yamlcache.load_file(p)["one"] is not got["one"]


def test_an_edited_file_is_read_again(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("kind: rail\nhosts: 2\n")
    assert yamlcache.load_file(p) == {"kind": "rail", "hosts": 2}
    st = os.stat(p)
    p.write_text("kind: rail\nhosts: 4\n")        # same size: only mtime_ns/inode differ
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert yamlcache.load_file(p) == {"kind": "rail", "hosts": 4}
    p.write_text("kind: rail\nhosts: 16\n")       # another size
    assert yamlcache.load_file(p) == {"kind": "rail", "hosts": 16}


def test_an_edited_preset_in_a_tmp_dir_is_read_again(tmp_path, monkeypatch):
    src = topologies.PRESET_DIR / "rail2x4.yaml"
    p = tmp_path / "mine.yaml"
    p.write_text(src.read_text())
    monkeypatch.setattr(topologies, "PRESET_DIR", tmp_path)
    assert topologies.spec_of("mine")["hosts"] == yaml.safe_load(src.read_text())["hosts"]
    data = yaml.safe_load(src.read_text())
    data["hosts"] += 1
    p.write_text(yaml.safe_dump(data))
    assert topologies.spec_of("mine")["hosts"] == data["hosts"]
    assert len(topologies.load("mine").hosts()) == data["hosts"]


def test_a_bad_file_raises_each_time_and_is_read_again_once_fixed(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("a: [1, 2\n")
    for _ in range(2):
        with pytest.raises(yaml.YAMLError):
            yamlcache.load_file(p)
    p.write_text("a: [1, 2]\n")
    assert yamlcache.load_file(p) == {"a": [1, 2]}
    with pytest.raises(FileNotFoundError):
        yamlcache.load_file(tmp_path / "none.yaml")

