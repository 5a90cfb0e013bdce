"""The CLI without root: help, list, show, clear errors for bad input."""

import subprocess
import sys
from pathlib import Path

import pytest

from emu.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "emu", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("cmd", [[], ["run"], ["show"], ["list"], ["clean"], ["bench"]])
def test_help_everywhere(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0 and "usage: python -m emu" in r.stdout


def test_list_names_presets(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "rail2x4" in out and "Figure 12-4" in out and "rail{R}x{H}" in out


def test_show_plan(capsys):
    assert main(["show", "rail2x4"]) == 0
    out = capsys.readouterr().out
    assert "h4g2   h4:nic2  10.0.2.14" in out and "spine2" in out


def test_show_json(capsys):
    import json

    assert main(["show", "rail8x4", "--json", "--tdf", "500"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tdf"] == 500 and len(d["gpus"]) == 32


def test_bad_topology_is_a_clear_error():
    r = run("show", "rail2x4", "--spines", "-3")
    assert r.returncode == 2 and "spines" in r.stderr and "-3" in r.stderr
    r = run("run", "nosuchtopo")
    assert r.returncode == 2 and "unknown topology 'nosuchtopo'" in r.stderr


def test_parser_defaults():
    a = build_parser().parse_args(["run", "rail2x4"])
    assert a.spines is None and a.tdf == "auto" and not a.cli
    assert build_parser().parse_args(["run", "rail2x4", "--tdf", "2000"]).tdf == 2000.0
    assert build_parser().parse_args(["show", "rail2x4"]).tdf is None


@pytest.mark.parametrize("bad", ["0", "-5", "fast"])
def test_bad_tdf_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["run", "rail2x4", "--tdf", bad])
    assert e.value.code == 2 and "--tdf" in capsys.readouterr().err


def test_help_names_the_exit_codes():
    r = run("run", "--help")
    assert "3 fidelity lost" in r.stdout and "auto" in r.stdout


def test_a_given_tdf_is_used_as_given(capsys):
    assert main(["show", "rail2x4", "--tdf", "1234"]) == 0
    assert "TDF 1234" in capsys.readouterr().out


def test_pcap_selection():
    import topologies
    from emu.observe.capture import select

    fab = topologies.load("rail2x4")
    assert len(select(fab, "hosts")) == 8
    assert select(fab, "none") == []
    assert len(select(fab, "all")) == 28  # 24 fabric ports + 4 host frontends, not the bridge
    assert select(fab, "rail1:eth5,h1:nic1") == [("rail1", "eth5"), ("h1", "nic1")]
    with pytest.raises(ValueError, match="rail9:eth1"):
        select(fab, "rail9:eth1")


def plan_of(*argv):
    import topologies
    from emu.commands.run import run_options
    from emu.run.plan import make_plan

    args = build_parser().parse_args(["run", "rail2x4", *argv])
    return make_plan(run_options(args), topologies.load("rail2x4"))


def test_run_dir_is_absolute_relative_to_the_callers_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = plan_of("--out", "mine")
    assert p.shown_dir == Path("mine") and p.run_dir == tmp_path / "mine"
    p = plan_of()
    assert p.run_dir.is_absolute() and p.run_dir.parent == tmp_path / "runs"
    assert p.run_dir.name.startswith("rail2x4-") and not p.run_dir.exists()  # made at build


def test_run_plan_checks_options_before_anything_is_built():
    p = plan_of("--workload", "allreduce", "--size", "1MB,2MB")
    assert p.workload["sizes"] == [1_000_000, 2_000_000] and ("h1", "fe0") in p.targets
    assert p.qos.name and p.interval == pytest.approx(50e-6)
    assert plan_of("--qos", "off").qos is None
    assert plan_of("--workload", "write", "--send", "--write-only", "--transport", "uet").workload
    assert plan_of("--workload", "allreduce").workload["nic"] == {}  # NicConfig's own
    assert plan_of("--workload", "write", "--nic-timeout", "131.072us").workload["nic"] == {
        "timeout_s": pytest.approx(131.072e-6)}
    for argv, opt in ((["--interval", "0us"], "--interval"), (["--pcap", "rail9:eth1"], "rail9"),
                      (["--workload", "write", "--src", "h9g9"], "--src"),
                      (["--workload", "allreduce", "--dtype", "bf16"], "--dtype"),
                      (["--workload", "incast", "--send"], "--send: with --workload write"),
                      (["--workload", "write", "--send", "--write-only"], "--send and --write-only"),
                      (["--workload", "write", "--nic-timeout", "0us"], "--nic-timeout: a model "
                                                                        "time > 0"),
                      (["--workload", "write", "--nic-timeout", "soon"], "--nic-timeout"),
                      (["--nic-timeout", "1ms"], "--nic-timeout: the NICs start with a workload")):
        with pytest.raises(ValueError, match=opt):
            plan_of(*argv)


def test_bad_run_option_exits_2_before_root_is_asked():
    r = run("run", "rail2x4", "--workload", "write", "--dst", "h9g1")
    assert r.returncode == 2 and "--dst: no GPU 'h9g1'" in r.stderr


def test_processes_get_absolute_paths_only():
    from emu.realise.procs import run_module

    class Node:
        def popen(self, argv, **kw):
            return argv, kw

    argv, kw = run_module(Node(), "traffic.nic", [Path("/run/emu/x/nic.json"), "--log", "x"])
    assert argv[1:] == ["-m", "traffic.nic", "/run/emu/x/nic.json", "--log", "x"]
    assert Path(kw["cwd"]).is_absolute()
    with pytest.raises(ValueError, match="relative path 'runs/x/agent-rail1.log'"):
        run_module(Node(), "switch_agent", [Path("runs/x/agent-rail1.log")])


def test_run_servers_is_checked_before_anything_is_built(tmp_path):
    f = tmp_path / "servers.yaml"
    f.write_text("servers:\n  - {name: a, address: localhost}\n  - {name: b, address: 10.98.0.2}\n"
                 "placement: {rail1: b, h1: a}\n")
    plan = plan_of("--servers", str(f), "--pcap", "rail1:eth1,h1:nic1")
    assert plan.servers.names() == ["a", "b"]
    assert plan.targets == [("rail1", "eth1"), ("h1", "nic1")]  # captured where they run
    for wl in ("write", "incast"):
        assert plan_of("--servers", str(f), "--workload", wl).servers is not None
    assert plan_of("--servers", str(f), "--cli").options.cli
    assert plan_of("--servers", str(f), "--workload", "allreduce").servers is not None
    assert len(plan_of("--servers", str(f), "--workload", "allreduce", "--fault",
                       "10us nic h1g1 down; 20us storm h1g1").faults) == 2
    f.write_text("servers:\n  - {name: b, address: 10.98.0.2}\n")
    with pytest.raises(ValueError, match="one server must be this machine"):
        plan_of("--servers", str(f))
    f.write_text("servers:\n  - {name: a, address: localhost}\nplacement: {h9: a}\n")
    with pytest.raises(ValueError, match="placement.h9: no such host or switch"):
        plan_of("--servers", str(f))
    r = run("run", "rail2x4", "--servers", str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and "--servers: cannot read" in r.stderr
