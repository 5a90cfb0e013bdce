"""`--tdf auto` (emu.run.autotdf): the choice as a table, with the calibration given."""

import subprocess

import pytest

import topologies
from emu.run import autotdf
from emu.run.autotdf import C, PYTHON, Load, agents_path, choose, offered_load
from emucore.lbconfig import LoadBalance
from emucore.qos.llr import Llr
from emucore.qos.qosconfig import QosConfig
from emucore.qos.trim import Trim

S = 5.9e-6  # the routed book-QoS pipeline on the 2-core VM (docs/PERFORMANCE.md, bench switch)
SC = 0.48e-6  # the C pipeline, its loop in C, 2026-11-27 (docs/PERFORMANCE.md)
FIT = 1 / 2_538_697  # the C calibration of the hour C's factors were measured in
ALL = {"gpus": ["x"], "sizes": [1]}


def test_cs_factors_are_the_whole_runs_cpu_per_data_frame_over_the_calibration():
    """docs/PERFORMANCE.md, the rail2x4 AllReduce 16 MB at TDF 10000 (kept up): the agents
    5.8 s, the NICs 39.0 s for 164,063 data frames of one hop, calibration 0.394 us."""
    f = autotdf.FACTORS[C]
    assert f.hop == pytest.approx(5.8 / 164_063 / FIT) and round(f.hop, 1) == 89.7
    assert f.nic == pytest.approx(39.0 / 164_063 / FIT) and round(f.nic, 1) == 603.5
    # that run's own frame costs back: 35.4 us an agent's hop, 237.7 us the two NIC ends
    assert f.units(1) * FIT == pytest.approx((5.8 + 39.0) / 164_063)
    assert autotdf.FACTORS[PYTHON].units(3) == 5 * 30  # a hop and a NIC end alike


@pytest.mark.parametrize("path, topo, workload, options, s, cores, expect_need, expect_tdf", [
    # rail2x4 AllReduce 16 MB: kept up at 20000 (p99 0.13 us), at the bound at 10000,
    # lost at 8000 and below -> 20000
    (PYTHON, "rail2x4", "allreduce", ALL, S, 2, 18191, 20000),
    (PYTHON, "rail8x4", "allreduce", ALL, S, 2, 72765, 100000),       # 32 ranks (lost at 20000)
    (PYTHON, "rail8x4", "allreduce", ALL, S, 8, 18191, 20000),         # 4x the cores
    (PYTHON, "rail8x4", "allreduce", ALL, 2 * S, 2, 145529, 150000),   # a 2x slower machine
    (PYTHON, "rail2x4", "write", {"gpus": ["h1g1", "h4g2"]}, S, 2, 3790, 5000),  # 3 hops
    (PYTHON, "rail2x4", "write", {"gpus": ["h1g1", "h2g1"]}, S, 2, 2274, 5000),  # 1 hop
    # 3:1 incast within rail1: kept up at 8000 (p99 0.75 us), lost at 2000 (3.2 us)
    (PYTHON, "rail2x4", "incast", {"gpus": ["h4g1", "h1g1", "h2g1", "h3g1"]}, S, 2, 6822, 7000),
    (PYTHON, "rail2x4", "incast", {"gpus": ["h4g1", "h1g1", "h2g1", "h3g1"]}, 40 * S, 2,
     272867, 300000),
    (PYTHON, "rail2x4", None, None, S, 2, 0, 5000),                    # reachability only
    # the C path: frames/s x (hops x 89.7 + 603.5) x calibration / (0.7 x cores). The fit's
    # own run: rail2x4 AllReduce, 47,961,631 frames/s x 693.2 x 0.394 us / 1.4 = 9,355
    # -> 10000 (where it kept up, p99 0.42 us)
    (C, "rail2x4", "allreduce", ALL, FIT, 2, 9355, 10000),
    (C, "rail2x4", "allreduce", ALL, SC, 2, 11399, 15000),             # a 0.48 us calibration
    (C, "rail8x4", "allreduce", ALL, SC, 2, 45598, 50000),             # 4 x 11399
    (C, "rail8x4", "allreduce", ALL, SC, 8, 11399, 15000),             # 4x the cores
    (C, "rail2x4", "allreduce", ALL, 1.25 * SC, 2, 14249, 15000),      # a 1.25x slower machine
    (C, "rail2x4", "write", {"gpus": ["h1g1", "h4g2"]}, SC, 2, 1794, 5000),  # the floor
    (C, "rail2x4", "incast", {"gpus": ["h4g1", "h1g1", "h2g1", "h3g1"]}, SC, 2, 4275, 5000),
    (C, "rail2x4", None, None, SC, 2, 0, 5000),
])
def test_choice(path, topo, workload, options, s, cores, expect_need, expect_tdf):
    fab = topologies.load(topo)
    tdf, need = choose(offered_load(fab, workload, options), s, cores, fab.tdf, path)
    assert round(need) == expect_need and tdf == expect_tdf


def test_the_need_scales_with_the_calibration_the_frames_and_one_over_the_cores():
    load = offered_load(topologies.load("rail8x4"), "allreduce", ALL)
    need = choose(load, SC, 2, 1.0, C)[1]
    assert choose(load, 2 * SC, 2, 1.0, C)[1] == pytest.approx(2 * need)
    assert choose(load, SC, 4, 1.0, C)[1] == pytest.approx(need / 2)
    two = offered_load(topologies.load("rail2x4"), "allreduce", ALL)  # 8 of rail8x4's 32 NICs
    assert choose(two, SC, 2, 1.0, C)[1] == pytest.approx(need / 4)


@pytest.mark.parametrize("mode, qos, lb, env, expect, says", [
    ("python", None, None, {}, PYTHON, "--datapath python"),
    ("auto", QosConfig(), None, {}, C, "--datapath auto: C's pipeline and ring poll loop"),
    ("fast", QosConfig(), {"rail1": LoadBalance()}, {}, C, "--datapath fast"),  # ECMP
    ("auto", None, None, {"EMU_FAST_RINGS": "1"}, C, "ring poll loop"),
    ("auto", QosConfig(trim=Trim()), None, {}, PYTHON, "C refuses qos.trim"),
    ("auto", QosConfig(llr=Llr()), None, {}, PYTHON, "C refuses qos.llr"),
    ("auto", QosConfig(), {"rail1": LoadBalance(mode="spray"), "rail2": LoadBalance()}, {},
     PYTHON, "C refuses lb.mode spray"),
    ("auto", QosConfig(), {"rail1": LoadBalance(mode="flowlet")}, {}, PYTHON, "flowlet"),
    ("fast", QosConfig(trim=Trim()), None, {}, C, "--datapath fast"),  # agents refuse to start
    ("auto", QosConfig(), None, {"EMU_FAST_RINGS": "0"}, PYTHON, "Python's poll loop"),
    ("fast", None, None, {"EMU_FAST_RINGS": "0"}, PYTHON, "EMU_FAST_RINGS=0"),
])
def test_the_agents_path(mode, qos, lb, env, expect, says):
    path, why = agents_path(mode, qos, lb, env)
    assert path == expect and says in why


def test_a_c_calibration_that_fails_says_so_and_assumes_cs_figure(monkeypatch):
    """The C module not built: the child says so, and the reason carries it; the figure
    assumed is C's reference, never the Python pipeline's."""
    error = ('{"path": "c", "error": "switch_agent.fast._pipeline is not built from '
             'today\'s sources: run ./setup.sh"}')
    asked = []

    def fake_run(argv, **kw):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 1, error, "")

    monkeypatch.setattr(autotdf.subprocess, "run", fake_run)
    s, how = autotdf.calibrate(0.1, C)
    assert asked[0][-2:] == ["--path", "c"]
    assert s == autotdf.REFERENCE_S_PER_FRAME[C] == SC
    assert how.startswith("calibrating the C pipeline failed (switch_agent.fast._pipeline is "
                          "not built") and how.endswith("assumed C's 0.48 us/frame")


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
    c = autotdf.auto(fab, "allreduce", ALL, measured=(S, "measured in 0.3 s"), cores=2,
                     agents=agents_path("python", None, None, {}))
    assert c.tdf == 100000 and c.to_dict()["mode"] == "auto"
    assert c.reason.startswith("TDF auto: 100000 - rail8x4 has 10 switches (64 ports) and 32 "
                               "NICs x 200 Gbps; allreduce: every GPU's NIC at line rate")
    assert ("the switch agents run Python (--datapath python), whose pipeline forwards "
            "~169,492 frames/s on this machine (measured in 0.3 s); in a whole run a frame "
            "costs ~531 us of CPU (1 hop x 30 + NICs 60 pipeline frames, Python's factors), "
            "so 2 cores at 70% take ~2,637 frames/s; at TDF 100000 the run asks ~1,918") in c.reason
    assert c.reason.endswith("needs TDF >= 72,765, rounded up to 100000.")
    idle = autotdf.auto(topologies.load("rail2x4"), None, None, cores=2)  # no calibration
    assert idle.tdf == 5000 and "no data-path load" in idle.reason


def test_the_printed_reason_and_summary_of_a_c_run():
    fab = topologies.load("rail2x4")
    agents = agents_path("auto", QosConfig(), None, {})
    c = autotdf.auto(fab, "allreduce", ALL, measured=(SC, "measured in 0.3 s"), cores=2,
                     agents=agents)
    assert c.tdf == 15000
    assert ("the switch agents run C (--datapath auto: C's pipeline and ring poll loop), "
            "whose pipeline forwards ~2,083,333 frames/s on this machine (measured in 0.3 "
            "s); in a whole run a frame costs ~333 us of CPU (1 hop x 90 + NICs 603 pipeline "
            "frames, C's factors), so 2 cores at 70% take ~4,207 frames/s") in c.reason
    assert c.reason.endswith("needs TDF >= 11,399, rounded up to 15000.")
    assert c.to_dict() == {"mode": "auto", "tdf": 15000, "need": 11399.5, "path": "c",
                           "s_per_frame": SC, "cost_factors": {"hop": 89.7, "nic": 603.5},
                           "reason": c.reason}
