"""`--tdf auto` (emu.run.autotdf): the choice as a table, with the calibration given."""

import pytest

import topologies
from emu.run import autotdf
from emu.run.autotdf import Load, choose, offered_load

S = 5.9e-6  # the routed book-QoS pipeline on the 2-core VM (docs/PERFORMANCE.md, bench switch)
ALL = {"gpus": ["x"], "sizes": [1]}


@pytest.mark.parametrize("topo, workload, options, s, cores, expect_need, expect_tdf", [
    # rail2x4 AllReduce 16 MB: kept up at 20000 (p99 0.13 us), at the bound at 10000,
    # lost at 8000 and below -> 20000
    ("rail2x4", "allreduce", ALL, S, 2, 18191, 20000),
    ("rail8x4", "allreduce", ALL, S, 2, 72765, 100000),       # 32 ranks (lost at 20000)
    ("rail8x4", "allreduce", ALL, S, 8, 18191, 20000),         # 4x the cores
    ("rail8x4", "allreduce", ALL, 2 * S, 2, 145529, 150000),   # a 2x slower machine
    ("rail2x4", "write", {"gpus": ["h1g1", "h4g2"]}, S, 2, 3790, 5000),  # 1 sender, 3 hops
    ("rail2x4", "write", {"gpus": ["h1g1", "h2g1"]}, S, 2, 2274, 5000),  # same rail: 1 hop
    # 3:1 incast within rail1: kept up at 8000 (p99 0.75 us), lost at 2000 (3.2 us)
    ("rail2x4", "incast", {"gpus": ["h4g1", "h1g1", "h2g1", "h3g1"]}, S, 2, 6822, 7000),
    ("rail2x4", "incast", {"gpus": ["h4g1", "h1g1", "h2g1", "h3g1"]}, 40 * S, 2, 272867,
     300000),
    ("rail2x4", None, None, S, 2, 0, 5000),                    # reachability only
])
def test_choice(topo, workload, options, s, cores, expect_need, expect_tdf):
    fab = topologies.load(topo)
    tdf, need = choose(offered_load(fab, workload, options), s, cores, fab.tdf)
    assert round(need) == expect_need and tdf == expect_tdf


def test_the_topologys_tdf_is_the_floor_and_a_higher_need_wins():
    load = Load(8, 200e9, 1.0, "x")
    assert choose(load, S, 2, 30000.0)[0] == 30000.0
    assert choose(load, S, 2, 1000.0)[0] == 20000.0   # nice_up(18,191)
    with pytest.raises(ValueError, match="cores"):
        choose(load, S, 0, 1000.0)


def test_offered_load():
    fab = topologies.load("rail2x4")
    assert offered_load(fab, "train", ALL) == Load(8, 200e9, 1.0, offered_load(
        fab, "train", ALL).what)
    inc = offered_load(fab, "incast", {"gpus": ["h4g2", "h1g1", "h2g2"]})
    assert (inc.senders, inc.hops) == (2, 2.0)  # one cross-rail (3), one within rail2 (1)
    assert offered_load(fab, "bookexample", {"gpus": [], "size": 0}).senders == 0


def test_the_printed_reason():
    fab = topologies.load("rail8x4")
    c = autotdf.auto(fab, "allreduce", ALL, measured=(S, "measured in 0.3 s"), cores=2)
    assert c.tdf == 100000 and c.to_dict()["mode"] == "auto"
    assert c.reason.startswith("TDF auto: 100000 - rail8x4 has 10 switches (64 ports) and 32 "
                               "NICs x 200 Gbps; allreduce: every GPU's NIC at line rate")
    assert "~169,492 frames/s in Python (measured in 0.3 s)" in c.reason
    assert c.reason.endswith("needs TDF >= 72,765, rounded up to 100000.")
    idle = autotdf.auto(topologies.load("rail2x4"), None, None, cores=2)  # no calibration
    assert idle.tdf == 5000 and "no data-path load" in idle.reason
