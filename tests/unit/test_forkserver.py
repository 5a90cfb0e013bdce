"""The fabric's fork server (emu.realise.forkserver, emu.realise.spawner): a child forked
from it is what `python -m MODULE ARGS` would be - its argv, exactly its env, its cwd, its
own session, its exit code (or the signal that ended it) - without root or namespaces
(netns_pid None); emu.realise.procs.run_module forks from a node's server."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emu.realise import procs, spawner
from emu.realise.spawner import Spawner

ROOT = Path(__file__).resolve().parents[2]

#: a stand-in product process: reports what it sees, then sleeps or exits with CODE
PROBE = """\
import json, os, sys, time
out = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
       "sid": os.getsid(0) == os.getpid(), "name": __name__,
       "preloaded": "switch_agent.agent" in sys.modules,
       "comm": open("/proc/self/comm").read().strip()}
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
if os.environ.get("SLEEP"):
    time.sleep(float(os.environ["SLEEP"]))
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture
def server(tmp_path):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    with open(tmp_path / "server.log", "wb") as log:
        s = Spawner(ROOT, env=env, stdout=log, modules=spawner.MODULES + ("probe_mod",))
    yield s
    s.close()


def wait_file(path: Path, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} not written")


def test_a_child_runs_its_module_as_main_with_exactly_its_env_and_cwd(server, tmp_path):
    out = tmp_path / "out.json"
    p = server.spawn("probe_mod", [str(out), "x y"], {"CODE": "7", "ONLY": "this"},
                     cwd=tmp_path)
    assert p.wait(30) == 7 and p.returncode == 7 and p.poll() == 7
    seen = wait_file(out)
    assert seen["argv"] == [str(out), "x y"] and seen["name"] == "__main__"
    assert seen["env"] == {"CODE": "7", "ONLY": "this"}
    assert seen["cwd"] == str(tmp_path) and seen["sid"]
    assert seen["preloaded"]  # it inherited the server's imports
    assert seen["comm"] == "probe_mod"  # ps names its module, not the server


@pytest.mark.parametrize("module", ["switch_agent", "traffic.tools.lldp_host"])
def test_a_preloaded_module_runs_as_main_without_runpys_warning(server, tmp_path, module):
    """The server imported these (a package's __main__, a plain module) for their
    dependencies; run as __main__ they must not warn "found in sys.modules ... prior to
    execution" into every run's output, as they did before forget_preloaded."""
    p = server.spawn(module, ["--help"], {"PATH": os.environ["PATH"]}, cwd=ROOT)
    assert p.wait(30) == 0
    log = (tmp_path / "server.log").read_text()
    assert "usage" in log.lower() and "RuntimeWarning" not in log, log


def test_terminate_and_wait_as_popen(server, tmp_path):
    out = tmp_path / "out.json"
    p = server.spawn("probe_mod", [str(out)], {"SLEEP": "60"})
    wait_file(out)
    assert p.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(0.1)
    p.terminate()
    assert p.wait(30) == -signal.SIGTERM
    p.kill()  # ended: signals nothing


def test_only_the_preloaded_modules_are_forked(server):
    with pytest.raises(ValueError, match="not one of"):
        server.spawn("http.server", [], {})


def test_a_child_outlives_its_server_as_a_popen_child_its_launcher(server, tmp_path):
    """After a `kill -9` of `emu run` its agents are `emu clean`'s to end (issue 14)."""
    out = tmp_path / "out.json"
    p = server.spawn("probe_mod", [str(out)], {"SLEEP": "60"})
    wait_file(out)
    server.close()
    assert server.proc.returncode == 0
    assert p.poll() is None and spawner.running(p.pid)
    p.terminate()  # by pid, with the server gone
    assert p.wait(30) == spawner.LOST  # its code went to its new parent
    assert not spawner.running(p.pid)


def test_run_module_forks_from_the_nodes_server_unless_asked_for_pipes():
    calls = []

    class Server:
        def spawn(self, module, args, env, netns_pid=None, cwd=None):
            calls.append(("spawn", module, args, env["EMU_RUN"], netns_pid, cwd))

    class Node:
        tag, pid, spawner = "00af", 4242, Server()

        def popen(self, argv, **kw):
            calls.append(("popen", argv[1:3], kw))

    procs.run_module(Node(), "switch_agent", [Path("/run/emu/t1/rail1.json"), "--log", "x"],
                     stdin=None, stdout=None, stderr=None)
    procs.run_module(Node(), "traffic.nic", [Path("/run/emu/t1/nic.json")],
                     stdout=subprocess.PIPE)
    procs.run_module(Node(), "traffic.tools.rawgen", [])
    assert calls == [
        ("spawn", "switch_agent", ["/run/emu/t1/rail1.json", "--log", "x"], "00af", 4242,
         procs.REPO),
        ("popen", ["-m", "traffic.nic"], {"cwd": str(procs.REPO), "stdout": subprocess.PIPE}),
        ("popen", ["-m", "traffic.tools.rawgen"], {"cwd": str(procs.REPO)})]


def test_the_server_is_optional(monkeypatch):
    monkeypatch.setenv(spawner.ENV, "0")
    assert not spawner.enabled()
    monkeypatch.delenv(spawner.ENV)
    assert spawner.enabled()


def test_the_server_refuses_a_bad_command_line():
    r = subprocess.run([sys.executable, "-m", "emu.realise.forkserver"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "fork server" in r.stdout
