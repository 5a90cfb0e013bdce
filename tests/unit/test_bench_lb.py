"""`emu bench lb`'s traffic and summary (pure; the bench itself needs root)."""

import pytest

from emu.bench import lb as bench_lb


def test_permutation_crosses_hosts_and_rails():
    flows = bench_lb.permutation("8MB")
    assert [(f["src"], f["dst"]) for f in flows] == [
        ("h1g1", "h2g2"), ("h1g2", "h2g1"), ("h2g1", "h3g2"), ("h2g2", "h3g1"),
        ("h3g1", "h4g2"), ("h3g2", "h4g1"), ("h4g1", "h1g2"), ("h4g2", "h1g1")]
    assert {f["message"] for f in flows} == {1_000_000} and all(f["write_only"] for f in flows)


def test_lab_has_one_variant_per_mode_with_its_balancing():
    lab = bench_lb.lab_of("8MB", 10000.0)
    assert [v.name for v in lab.variants] == ["ecmp", "flowlet", "spray"]
    modes = {v.name: {n: lb.mode for n, lb in v.lb.items()} for v in lab.variants}
    assert modes["ecmp"] == {n: "ecmp" for n in ("rail1", "rail2", "spine1", "spine2")}
    assert modes["spray"] == {"rail1": "spray", "rail2": "spray", "spine1": "ecmp", "spine2": "ecmp"}
    assert modes["flowlet"]["rail1"] == "flowlet"


def port(peer, tx):
    return {"peer": peer, "tx_bytes": tx}


def test_summary_figures():
    run = {"result": {"flows": {
        "a": {"start_us": 10.0, "done_us": 410.0, "retransmits": 0, "byte_exact": True},
        "b": {"start_us": 12.0, "done_us": 650.0, "retransmits": 3, "byte_exact": True}}},
        "counters": {"rail1": {"ports": {"eth5": port("spine1:eth1", 300), "eth6": port("spine2:eth1", 100)}},
                     "rail2": {"ports": {"eth5": port("spine1:eth2", 200), "eth6": port("spine2:eth2", 200)}}},
        "fidelity": {"kept_up": True, "p99_lag_model_us": 0.42}}
    r = bench_lb.summarise(run, 8_000_000)
    assert r["completion_us"] == 640.0 and r["ideal_us"] == pytest.approx(320.0)
    assert r["ratio"] == pytest.approx(2.0) and r["max_min"] == 3.0
    assert (r["retransmits"], r["exact"], r["kept_up"]) == (3, True, True)
