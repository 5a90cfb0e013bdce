"""Ranks on another server forked from a zygote there (emu.cluster.farzygote), without
root, SSH or namespaces: the "ssh" to the other server is a local shell, the other
server's directory a local one; run_job's contract is the one it keeps here
(tests/unit/test_zygote.py)."""

import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from collectives import launch
from emu.cluster import farzygote
from emu.cluster.proxies import RemoteNode
from tests.unit import test_zygote
from tests.unit.test_zygote import fake_net

#: test_zygote's JOB, but ranks write where they run: rank 2 (there) finds the pids of
#: ranks 0 and 1 in the launcher's directory (JOB_HERE), rank 3's in its own
MINE = 'others = [out / f"pid{r}" for r in (0, 1, 3)]'
JOB = test_zygote.JOB.replace(MINE, 'here = Path(os.environ["JOB_HERE"]); others = '
                              '[here / "pid0", here / "pid1", out / "pid3"]')
assert MINE in test_zygote.JOB

#: stands in for `ssh ... user@host`: runs the command line after "--" here
#: (exec: the command is the ssh client's process, killed with it)
LOCAL_SSH = ["sh", "-c", 'eval "exec $2"', "sh"]


def test_the_relay_runs_the_zygote_with_the_ranks_env_and_the_parts_mark():
    argv = farzygote.relay_argv({"A": "1", "EMU_RUN": "ab12", "P": "x y"}, "cd34")
    assert argv == ["env", "-i", "-C", str(farzygote.REPO), "A=1", "EMU_RUN=cd34", "P=x y",
                    sys.executable, "-m", "emu.cluster.farzygote"]


def test_a_ranks_log_streams_until_the_rank_has_ended():
    assert farzygote.tail_argv(4242, "/run/emu/ab12/workers-j/rank5.log") == [
        "tail", "-c", "+1", "-s", "0.2", "--pid=4242", "-F",
        "/run/emu/ab12/workers-j/rank5.log"]


def far_net(tmp_path: Path) -> SimpleNamespace:
    """fake_net whose host h2 is on another server: a part reached by LOCAL_SSH, its
    scratch directory under tmp_path/b, its files read there."""
    net = fake_net()
    part = SimpleNamespace(ssh=lambda: list(LOCAL_SSH), run="test", tag="cd34",
                           server=SimpleNamespace(name="b"))
    (tmp_path / "b").mkdir()

    def popen(argv):
        return subprocess.Popen(argv)

    def files(d, glob):
        return {p.name: p.read_text() for p in Path(d).glob(glob)}

    far = SimpleNamespace(netns=None, part=part, spawn=None, popen=popen, files=files,
                          scratch=lambda name: str(tmp_path / "b" / name))
    far.forked = lambda *a: RemoteNode.forked(far, *a)
    here = SimpleNamespace(netns=None)
    net.host = lambda h: far if h == "h2" else here
    return net


def test_run_job_forks_the_ranks_of_another_server_there(tmp_path, monkeypatch):
    """h2's ranks (2, 3) run from the other server's zygote: their results come back,
    rank 2's failure is named with its status and the tail of its log, which streamed
    here; the relay and the log streams have ended when run_job returns."""
    monkeypatch.delenv("EMU_ZYGOTE", raising=False)
    (tmp_path / "job.py").write_text(JOB)
    out = tmp_path / "workers"
    monkeypatch.setenv("JOB_HERE", str(out))
    started = []
    real = farzygote._ssh_popen

    def spy(argv, tag, **kw):
        started.append((argv, real(argv, tag, **kw)))
        return started[-1][1]

    monkeypatch.setattr(farzygote, "_ssh_popen", spy)
    net = far_net(tmp_path)
    job = launch.run_job(net, [str(tmp_path / "job.py")], {g: "/nonexistent" for g in
                         net.fabric.gpus}, out, timeout=120, echo=None)
    assert job["returncodes"] == {0: 0, 1: 0, 2: 5, 3: 0}
    assert job["failed"] == [2] and not job["ok"] and "rank 2 gives up" in job["failed_tails"][2]
    assert sorted(job["results"]) == [0, 1, 2, 3]
    assert "hello from 3 of 4 on h2" in (out / "rank3.log").read_text()
    far_dir = next((tmp_path / "b").iterdir())
    assert sorted(p.name for p in far_dir.glob("rank*.log")) == ["rank2.log", "rank3.log"]
    assert (out / "zygote.log").exists() and (out / "zygote-b.log").exists()
    # one relay, one log stream per rank there; all ended
    kinds = [shlex.split(a[-1])[-1 if "tail" not in a[-1] else 0] for a, _ in started]
    assert sorted(kinds) == ["emu.cluster.farzygote", "tail", "tail"]
    assert all(p.poll() is not None for _, p in started)
