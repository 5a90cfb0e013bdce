"""The ns-3 peer of `emu bench speed` (issue 11): the spec of a fabric, the script's
independence from the project, and a short real ns-3 run when its venv exists."""

import ast
from pathlib import Path

import pytest

import topologies
from emu.observe.calibrate import ROCE_FRAME
from emu.peers import ns3_env
from emu.peers.spec import fabric_spec, flow_pairs

PROJECT = {"fabric", "topologies", "switch_agent", "traffic", "collectives", "emu"}


def test_rail2x4_spec_counts_and_rates():
    spec = fabric_spec(topologies.load("rail2x4"), load=1.0)
    kinds = [n["kind"] for n in spec["nodes"]]
    assert (kinds.count("host"), kinds.count("switch"), len(kinds)) == (4, 4, 8)
    assert len(spec["links"]) == 12  # 8 host-rail + 4 rail-spine; no frontend
    rates = sorted((lk["kind"], lk["rate_bps"], lk["delay_s"]) for lk in spec["links"])
    assert rates == [("host-rail", 200e9, 1e-6)] * 8 + [("rail-spine", 400e9, 1e-6)] * 4
    assert len(spec["flows"]) == 8 and spec["mtu"] == 9216
    assert {(f["rate_bps"], f["frame_bytes"]) for f in spec["flows"]} == {(200e9, ROCE_FRAME)}
    assert {f["rate_bps"] for f in fabric_spec(topologies.load("rail2x4"), 0.5)["flows"]} == {
        100e9}


def test_flows_are_bench_tdfs_pairs():
    """Each GPU to the next host's GPU on the other rail, as `bench tdf` (fabric_load)."""
    fab = topologies.load("rail2x4")
    pairs = [(s.name, d.name) for s, d in flow_pairs(fab)]
    assert sorted(pairs) == [("h1g1", "h2g2"), ("h1g2", "h2g1"), ("h2g1", "h3g2"), ("h2g2", "h3g1"),
                     ("h3g1", "h4g2"), ("h3g2", "h4g1"), ("h4g1", "h1g2"), ("h4g2", "h1g1")]
    flows = [(f["src_host_nic"], f["dst"]) for f in fabric_spec(fab)["flows"]]
    assert flows == [(f"{s.host}:{s.nic}", f"{d.host}:{d.nic}") for s, d in flow_pairs(fab)]
    ports = {end for lk in fabric_spec(fab)["links"] for end in (lk["a"], lk["b"])}
    assert {end for f in flows for end in f} <= ports
    assert all(s.rail != d.rail for s, d in flow_pairs(topologies.load("rail8x4")))


def test_script_imports_nothing_of_the_project():
    tree = ast.parse(ns3_env.SCRIPT.read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            mods.add(node.module.split(".")[0])
    assert mods and not mods & PROJECT
    assert "ns" in mods


def _two_hosts(rate: float, frame: int) -> dict:
    return {"name": "pair", "mtu": 9216, "queue_bytes": 10_000_000,
            "nodes": [{"name": "a", "kind": "host"}, {"name": "b", "kind": "host"}],
            "links": [{"a": "a:nic1", "b": "b:nic1", "rate_bps": 10e9, "delay_s": 1e-6}],
            "flows": [{"src_host_nic": "a:nic1", "dst": "b:nic1", "rate_bps": rate,
                       "frame_bytes": frame}]}


@pytest.mark.skipif(not ns3_env.installed(), reason="no ns-3 venv "
                    f"({ns3_env.default_venv()}): python -m emu.peers.ns3_env sets it up")
def test_a_short_real_ns3_run():
    rate, frame, sim_ms = 5e9, ROCE_FRAME, 2.0
    out = ns3_env.run(_two_hosts(rate, frame), sim_ms, timeout=300)
    expect = rate * sim_ms / 1e3 / (frame * 8)  # 300 frames
    assert out["sim_s"] == pytest.approx(sim_ms / 1e3)
    assert abs(out["packets_sent"] - expect) <= 2
    assert abs(out["packets_delivered"] - expect) <= 2 and out["packets_dropped"] == 0
    assert out["wall_s"] > 0 and out["slowdown"] == pytest.approx(out["wall_s"] / out["sim_s"])
    assert out["events"] > out["packets_delivered"] and out["ns3_version"] == "3.44.post0"


def test_run_without_a_venv_says_how_to_get_one(tmp_path: Path):
    with pytest.raises(RuntimeError, match="ensure_venv"):
        ns3_env.run(_two_hosts(1e9, 1000), 1.0, path=tmp_path / "none")
    assert not ns3_env.installed(tmp_path / "none")
