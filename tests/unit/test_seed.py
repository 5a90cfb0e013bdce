"""`--seed` (issue 31): one integer seeds every random draw of the switch agents - each
port's WRED dice `Random(f"{seed}:{ifname}")` (switch_agent.port), the test-drop die
(switch_agent.testhook), the balancer's groups - from `emu run --seed` / `emu lab run
--seed` through FabricNet's agent configs; seed 1, the default, is the draws every run
made before. The C pipeline takes over the seeded state (a differential against the
Python reference). No root."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import topologies
from emu.cli import build_parser
from emu.commands.run_args import run_options
from emu.lab import command as lab_command, runner
from emu.lab import schema as S
from emu.realise.net import FabricNet
from emucore import datapath
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig
from tests.unit.test_fast_pipeline import config, differential, small_qos, trace


def agent(seed: int) -> Agent:
    return Agent(replace(config(small_qos()), test_drop_seed=seed), open_sockets=False)


def test_default_is_todays_draws() -> None:
    """Seed 1 (every default): each port's first WRED draw is `Random("1:<ifname>")`'s."""
    a = Agent(config(small_qos()), open_sockets=False)
    assert a.cfg.test_drop_seed == 1 and a.balancer.seed == 1
    for name, p in a.ports.items():
        assert p.queues.rng() == random.Random(f"1:{name}").random()


@pytest.mark.parametrize("seed", [0, 2, 12345])
def test_the_seed_reaches_every_die(seed: int) -> None:
    a, one = agent(seed), agent(1)
    for name, p in a.ports.items():
        first = p.queues.rng()
        assert first == random.Random(f"{seed}:{name}").random()
        assert first != one.ports[name].queues.rng()
    assert a.balancer.seed == seed
    a.drop_rate = 0.5  # the test hook's die, made when the rate first goes above 0
    assert a.drop_hook.random() == random.Random(seed).random()


def test_c_pipeline_takes_the_seeded_dice() -> None:
    """The same trace through C and Python under seeds 1 and 2: C equals Python under
    each (the differential), and the two seeds mark or drop different frames."""
    frames = trace(1)
    runs = {s: differential(replace(config(small_qos()), test_drop_seed=s), frames)
            for s in (1, 2)}
    assert runs[1]["sent"] != runs[2]["sent"]


def test_fabric_agent_configs_carry_the_seed() -> None:
    fab = topologies.load("rail2x4")
    switches = [s.name for s in fab.switches()]
    assert {FabricNet(fab).agent_config(s).test_drop_seed for s in switches} == {1}
    fnet = FabricNet(fab, seed=7)
    for s in switches:
        cfg = fnet.agent_config(s)
        assert cfg.test_drop_seed == 7
        assert AgentConfig.from_json(cfg.to_json()).test_drop_seed == 7  # the agent's file
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="seed: an integer >= 0"):
            FabricNet(fab, seed=bad)
    with pytest.raises(ValueError, match="test_drop_seed: an integer >= 0, got -3"):
        replace(fnet.agent_config(switches[0]), test_drop_seed=-3).validate()


def test_run_option() -> None:
    parse = build_parser().parse_args
    assert run_options(parse(["run", "rail2x4"])).seed == 1
    assert run_options(parse(["run", "rail2x4", "--seed", "3"])).seed == 3
    assert run_options(parse(["run", "rail2x4", "--seed", "0"])).seed == 0


@pytest.mark.parametrize("cmd", [["run", "rail2x4"], ["lab", "run", "L11.3"]])
@pytest.mark.parametrize("bad", ["-1", "x", "1.5", ""])
def test_bad_seed_is_named(cmd, bad, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*cmd, "--seed", bad])
    assert exc.value.code == 2
    assert f"argument --seed: an integer >= 0, got {bad!r}" in capsys.readouterr().err


def test_lab_run_passes_the_seed(monkeypatch, tmp_path) -> None:
    seen = []
    monkeypatch.setattr(lab_command, "run_one", lambda lab, out, variant, quiet, rejudge=False,
                        seed=1: (seen.append(seed), (0, {}))[1])
    monkeypatch.setattr(lab_command.os, "geteuid", lambda: 0)
    monkeypatch.setattr(datapath, "require_built", lambda: None)
    monkeypatch.delenv(datapath.ENV, raising=False)  # (cmd_run sets it for the agents)
    for argv, want in (([], 1), (["--seed", "5"], 5)):
        args = build_parser().parse_args(["lab", "run", "L11.3", "--datapath", "python",
                                          "--out", str(tmp_path), *argv])
        assert lab_command.cmd_run(args) == 0
        assert seen.pop() == want


def test_lab_plan_and_lab_json_record_the_seed(tmp_path) -> None:
    lab = S.load("L11.3")
    v = lab.variants[0]
    assert runner.plan_of(v, tmp_path, 20.0).options.seed == 1
    assert runner.plan_of(v, tmp_path, 20.0, seed=9).options.seed == 9
    run = {"tdf": v.fabric.tdf, "lab_s": 1.0, "fidelity": {"kept_up": True},
           "result": {"flows": []}}
    doc = runner.write_json(tmp_path / "lab.json", lab, [], {v.name: {**run, "seed": 9}})
    assert doc["seed"] == 9 and doc["variants"][v.name]["seed"] == 9
    old = runner.write_json(tmp_path / "lab.json", lab, [], {v.name: run})  # before --seed
    assert old["seed"] == 1 and old["variants"][v.name]["seed"] == 1
