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
    assert a.spines is None and a.tdf is None and not a.cli


def test_pcap_selection():
    import topologies
    from emu.capture import select

    fab = topologies.load("rail2x4")
    assert len(select(fab, "hosts")) == 8
    assert select(fab, "none") == []
    assert len(select(fab, "all")) == 28  # 24 fabric ports + 4 host frontends, not the bridge
    assert select(fab, "rail1:eth5,h1:nic1") == [("rail1", "eth5"), ("h1", "nic1")]
    with pytest.raises(ValueError, match="rail9:eth1"):
        select(fab, "rail9:eth1")
