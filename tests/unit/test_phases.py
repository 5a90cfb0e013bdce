"""emu.run.phases: wall time per phase of a run, grouped for the closing line."""

import pytest

from emu.run import phases as phases_mod
from emu.run.phases import GROUP, GROUPS, Phases


def test_phases_keep_their_order_and_add_up():
    p = Phases()
    p.add("build", 4.25)
    p.add("reach", 1.0)
    p.add("build", 0.5)  # a phase that runs twice adds up
    assert list(p.to_dict()) == ["build", "reach"]
    assert p.to_dict() == {"build": 4.75, "reach": 1.0}


def test_groups_sum_their_phases_and_the_line_names_every_group():
    p = Phases()
    for name, s in (("calibrate", 0.5), ("build", 6.0), ("lldp_dcbx", 1.25), ("reach", 0.75),
                    ("nics", 0.5), ("workload", 3.0), ("collect", 0.25), ("collect", 0.25),
                    ("teardown", 2.0), ("plots", 1.5)):
        p.add(name, s)
    assert p.groups() == {"start-up": 9.0, "workload": 3.0, "collect": 0.5, "teardown": 2.0,
                          "plots": 1.5}
    assert p.line() == ("Wall time: start-up 9.0 s, workload 3.0 s, collect 0.5 s, "
                        "teardown 2.0 s, plots 1.5 s")


def test_a_group_none_of_whose_phases_ran_is_zero():
    assert Phases().groups() == dict.fromkeys(GROUPS, 0.0)


def test_an_unknown_phase_is_refused():
    with pytest.raises(KeyError):
        Phases().add("buidl", 1.0)
    assert set(GROUP.values()) == set(GROUPS)


def test_timed_records_also_a_block_that_raises(monkeypatch):
    clock = iter([10.0, 12.5])
    monkeypatch.setattr(phases_mod.time, "monotonic", lambda: next(clock))
    p = Phases()
    with pytest.raises(RuntimeError):
        with p.timed("teardown"):
            raise RuntimeError("boom")
    assert p.to_dict() == {"teardown": 2.5}


def test_detail_is_rounded_to_the_millisecond():
    p = Phases()
    p.detail["build"] = {"namespaces": 1.23456, "agents": 2.0}
    assert p.detail_dict() == {"build": {"namespaces": 1.235, "agents": 2.0}}
