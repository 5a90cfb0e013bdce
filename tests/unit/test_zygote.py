"""The worker zygote (issue 11 "Memory"): children forked from one process that imported
torch, without root or namespaces (netns null), and run_job over a stand-in fabric."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from collectives import launch, zygote
from collectives.launch import WORKER_THREADS_ENV
from collectives.runners import Zygote, ZygoteError

ROOT = Path(__file__).resolve().parents[2]

#: reports what it sees at its first line (before any import of its own), then exits CODE
SCRIPT = """\
import json, os, resource, sys
ru = resource.getrusage(resource.RUSAGE_SELF)
out = {"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "ppid": os.getppid(),
       "sid": os.getsid(0) == os.getpid(), "torch": "torch" in sys.modules,
       "cpu_s": ru.ru_utime + ru.ru_stime, "seed": sys.modules["torch"].initial_seed(),
       "threads": len(os.listdir("/proc/self/task"))}
print("rank", os.environ["RANK"], "started")
with open(os.path.join(os.environ["OUT"], "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(out, f)
print("rank", os.environ["RANK"], "done", file=sys.stderr)
if os.environ.get("SLEEP"):
    if os.environ.get("IGNORE_TERM"):
        signal = __import__("signal"); signal.signal(signal.SIGTERM, signal.SIG_IGN)
    __import__("time").sleep(float(os.environ["SLEEP"]))
if os.environ.get("RAISE"):
    1 / 0
sys.exit(int(os.environ.get("CODE", "0")))
"""


def zygote_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    return {**env, **WORKER_THREADS_ENV, "PYTHONPATH": str(ROOT)}


def cpu_seconds(pid: int) -> float:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def wait(z: Zygote, pids: list[int], timeout: float = 120) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = z.status()
        if all(st[p] is not None for p in pids):
            return {p: st[p] for p in pids}
        time.sleep(0.05)
    pytest.fail(f"children still running after {timeout} s: {z.status()}")


def wait_for(path: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{path} never said {text!r}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def zyg(tmp_path_factory):
    d = tmp_path_factory.mktemp("zygote")
    z = Zygote(zygote_env(), d / "zygote.log", timeout=600)
    yield z
    z.close()


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "worker.py"
    p.write_text(SCRIPT)
    return p


def spawn(z, script, tmp_path, rank, **extra):
    env = {"RANK": str(rank), "OUT": str(tmp_path), f"ONLY_{rank}": "yes", **extra}
    return z.spawn([str(script), "a", str(rank)], env, tmp_path / f"rank{rank}.log", tmp_path)


def test_children_run_with_their_own_env_log_and_seed(zyg, script, tmp_path):
    pids = [spawn(zyg, script, tmp_path, r) for r in range(3)]
    assert wait(zyg, pids) == dict.fromkeys(pids, 0)
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    for r, s in enumerate(seen):
        assert s["env"] == {"RANK": str(r), "OUT": str(tmp_path), f"ONLY_{r}": "yes"}
        assert s["argv"] == [str(script), "a", str(r)] and s["cwd"] == str(tmp_path)
        assert s["ppid"] == zyg.pid and s["sid"] and s["threads"] == 1
        log = (tmp_path / f"rank{r}.log").read_text()
        assert f"rank {r} started" in log and f"rank {r} done" in log  # stdout and stderr
    assert len({s["seed"] for s in seen}) == 3, "every child reseeds torch's generator"
    # torch was imported once, by the zygote: a child starts with it, at a sliver of the CPU
    assert all(s["torch"] for s in seen)
    cpu = [s["cpu_s"] for s in seen]
    assert sum(cpu) < cpu_seconds(zyg.pid) / 2, (cpu, cpu_seconds(zyg.pid))


SHM_SCRIPT = """\
import json, os, sys
from multiprocessing import resource_tracker, shared_memory
m = shared_memory.SharedMemory(create=True, size=4096)
json.dump({"tracker": resource_tracker._resource_tracker._pid}, open(sys.argv[1], "w"))
m.close(); m.unlink()
"""


def test_children_share_the_zygotes_shared_memory_tracker(zyg, tmp_path):
    # without it each child's first SharedMemory starts its own tracker process
    p = tmp_path / "shm.py"
    p.write_text(SHM_SCRIPT)
    pids = [zyg.spawn([str(p), str(tmp_path / f"t{r}.json")], {}, tmp_path / f"s{r}.log",
                      tmp_path) for r in range(2)]
    assert wait(zyg, pids) == dict.fromkeys(pids, 0), [
        (tmp_path / f"s{r}.log").read_text() for r in range(2)]
    trackers = {json.loads((tmp_path / f"t{r}.json").read_text())["tracker"] for r in range(2)}
    assert len(trackers) == 1
    [t] = trackers  # the zygote's own, started before any fork
    ppid = int(Path(f"/proc/{t}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert ppid == zyg.pid


EXIT_SCRIPT = """\
import atexit, concurrent.futures, os, sys, threading, time
atexit.register(lambda: print("atexit ran"))
def late():
    time.sleep(0.2)
    print("thread done")
threading.Thread(target=late).start()                   # non-daemon: joined before exit
pool = concurrent.futures.ThreadPoolExecutor(1)         # never shut down: its idle
pool.submit(print, "pool ran").result()                 # worker must still be told to stop
sys.stderr.write("unterminated")
how = os.environ["HOW"]
if how == "text":
    sys.exit("bye")
if how == "none":
    sys.exit(None)
if how == "return":
    pass
"""


@pytest.mark.parametrize("how, status", [("text", 1), ("none", 0), ("return", 0)])
def test_a_child_leaves_as_the_interpreter_does(zyg, tmp_path, how, status):
    # collectives.zygote.leave: os._exit without the teardown, after what the interpreter's
    # exit does that a job can see - SystemExit's status, threads joined (concurrent.futures'
    # idle workers told to stop), atexit handlers, stdio flushed
    p = tmp_path / "leave.py"
    p.write_text(EXIT_SCRIPT)
    pid = zyg.spawn([str(p)], {"HOW": how}, tmp_path / "leave.log", tmp_path)
    assert wait(zyg, [pid]) == {pid: status}
    log = (tmp_path / "leave.log").read_text()
    for said in ("pool ran", "thread done", "atexit ran", "unterminated"):
        assert said in log, log
    assert ("bye" in log) == (how == "text")
    assert log.index("thread done") < log.index("atexit ran")  # joined first, as Python


@pytest.mark.parametrize("code, status, printed", [
    (None, 0, ""), (0, 0, ""), (3, 3, ""), (-1, 255, ""), ("bye", 1, "bye\n"), ([2], 1, "[2]\n")])
def test_exit_status_is_the_interpreters(code, status, printed, capsys):
    assert zygote.exit_status(code) == status
    assert capsys.readouterr().err == printed


def test_exit_codes_of_failing_and_killed_children(zyg, script, tmp_path):
    code = spawn(zyg, script, tmp_path, 0, CODE="3")
    raised = spawn(zyg, script, tmp_path, 1, RAISE="1")
    assert wait(zyg, [code, raised]) == {code: 3, raised: 1}
    assert "ZeroDivisionError" in (tmp_path / "rank1.log").read_text()
    sleeper = spawn(zyg, script, tmp_path, 2, SLEEP="300")
    stubborn = spawn(zyg, script, tmp_path, 3, SLEEP="300", IGNORE_TERM="1")
    wait_for(tmp_path / "rank3.log", "done")
    st = zyg.terminate(grace=0.5)
    assert (st[sleeper], st[stubborn]) == (-signal.SIGTERM, -signal.SIGKILL)
    assert zyg.status()[code] == 3  # what ended before stays known


def test_sigterm_ends_the_zygote_and_its_children(script, tmp_path):
    z = Zygote(zygote_env(), tmp_path / "zygote.log", timeout=600)
    try:
        pids = [spawn(z, script, tmp_path, r, SLEEP="300") for r in range(2)]
        for r in range(2):
            wait_for(tmp_path / f"rank{r}.log", "done")
        started = {p: start_time(p) for p in pids}
        os.kill(z.pid, signal.SIGTERM)
        assert z.proc.wait(60) == 0
    finally:
        z.close()
    assert [p for p in pids if start_time(p) == started[p]] == [], "a child outlived it"


def start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError):
        return None


def test_the_zygote_refuses_to_run_or_fork_with_threads(tmp_path):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    a, b = socket.socketpair()
    server = zygote.Server(a)
    try:
        assert zygote.main(["--fd", str(b.fileno())]) == 3
        reply = server._answer({"op": "spawn", "netns": None, "cwd": str(tmp_path), "env": {},
                                "argv": ["x"], "log": str(tmp_path / "x.log")})
        assert "threads" in reply["error"] and not server.children
    finally:
        signal.signal(signal.SIGTERM, server.sigterm)
        stop.set()
        a.close()
        b.close()


def test_a_zygote_that_cannot_start_says_why(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('no torch in this test')\n")
    with pytest.raises(ZygoteError, match="stopped"):
        Zygote({**zygote_env(), "PYTHONPATH": f"{tmp_path}:{ROOT}"}, tmp_path / "z.log")
    assert "no torch in this test" in (tmp_path / "z.log").read_text()


def fake_net(hosts: int = 2, gpus: int = 2) -> SimpleNamespace:
    """What run_job reads of a FabricNet, with no namespace (netns None)."""
    gpu = {f"h{h}g{g}": SimpleNamespace(name=f"h{h}g{g}", host=f"h{h}", index=g, rail=g,
                                        ip=f"10.{g}.0.{h}") for h in range(1, hosts + 1)
           for g in range(1, gpus + 1)}
    ports = {(f"h{h}", 0): SimpleNamespace(ifname="fe0", ip=f"127.0.0.{h}/8")
             for h in range(1, hosts + 1)}
    fab = SimpleNamespace(gpus=gpu, ports=ports, tdf=5000.0)
    return SimpleNamespace(fabric=fab, tag="test", host=lambda h: SimpleNamespace(netns=None))


JOB = """\
import json, os, sys, time
from pathlib import Path
rank, out = int(os.environ["RANK"]), Path(os.environ["EMU_RESULT_DIR"])
print(f"hello from {rank} of {os.environ['WORLD_SIZE']} on {os.environ['EMU_HOST']}")
(out / f"pid{rank}").write_text(str(os.getpid()))
(out / f"rank{rank}.json").write_text(json.dumps({"ok": True, "rank": rank}))
if rank == 2:  # fails once the others have ended: their codes are 0, not SIGTERM's
    others = [out / f"pid{r}" for r in (0, 1, 3)]
    while not all(p.exists() and not os.path.exists(f"/proc/{p.read_text()}/cwd")
                  for p in others):  # gone, or a zombie (which has no cwd)
        time.sleep(0.05)
    print("rank 2 gives up", file=sys.stderr)
    sys.exit(5)
"""


def test_run_job_forks_every_rank_and_keeps_its_contract(tmp_path, monkeypatch):
    monkeypatch.delenv("EMU_ZYGOTE", raising=False)
    (tmp_path / "job.py").write_text(JOB)
    echoed: list[str] = []
    out = tmp_path / "workers"
    job = launch.run_job(fake_net(), [str(tmp_path / "job.py")], {g: "/nonexistent" for g in
                         fake_net().fabric.gpus}, out, timeout=300, echo=echoed.append)
    assert job["returncodes"] == {0: 0, 1: 0, 2: 5, 3: 0}
    assert job["failed"] == [2] and not job["ok"] and "rank 2 gives up" in job["failed_tails"][2]
    assert "  [rank 0] hello from 0 of 4 on h1" in echoed
    assert sorted(job["results"]) == [0, 1, 2, 3] and job["master"] == "127.0.0.1:29500"
    assert job["zygote"] == "started"
    assert (out / "zygote.log").exists() and "hello from 3 of 4 on h2" in (
        out / "rank3.log").read_text()


# -- measurement (not a test): python -m tests.unit.test_zygote [N] -------------------
TENSOR = """\
import os, sys, time, torch
x = torch.ones(1 << 20); s = float(x.sum())
open(os.path.join(sys.argv[1], f"up{sys.argv[2]}"), "w").write(str(s))
while not os.path.exists(os.path.join(sys.argv[1], "stop")): time.sleep(0.05)
"""


def proc_kb(pid: int, name: str, key: str) -> int:
    """A "Key:  N kB" line of /proc/PID/<name> (smaps_rollup: Pss, status: VmRSS)."""
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def measure(n: int = 8) -> dict:
    """Start n processes that import torch and sum a 4 MB tensor, as zygote children and
    as separate `python -c` processes: wall seconds until all have summed, then the total
    CPU seconds, PSS and RSS (which counts shared pages in every process) of every
    process involved, the zygote included."""
    out = {}
    env = zygote_env()
    for mode in ("zygote", "separate"):
        d = Path(tempfile.mkdtemp(prefix=f"zyg-{mode}-"))
        (d / "t.py").write_text(TENSOR)
        t0 = time.monotonic()
        if mode == "zygote":
            z = Zygote(env, d / "zygote.log")
            pids = [z.pid] + [z.spawn([str(d / "t.py"), str(d), str(i)], env, d / f"{i}.log", d)
                              for i in range(n)]
        else:
            procs = [subprocess.Popen([sys.executable, "-c", TENSOR, str(d), str(i)], env=env)
                     for i in range(n)]
            pids = [p.pid for p in procs]
        while len(list(d.glob("up*"))) < n:
            time.sleep(0.02)
        wall = time.monotonic() - t0
        out[mode] = {"start_s": round(wall, 2), "processes": len(pids),
                     "cpu_s": round(sum(map(cpu_seconds, pids)), 2), **{
                         f"{key.lower()}_mb": round(sum(proc_kb(p, f, key) for p in pids) / 1024)
                         for f, key in (("smaps_rollup", "Pss"), ("status", "VmRSS"))}}
        (d / "stop").write_text("")
        if mode == "zygote":
            z.close()
        else:
            for p in procs:
                p.wait()
    return out


if __name__ == "__main__":
    for mode, row in measure(int(sys.argv[1]) if len(sys.argv) > 1 else 8).items():
        print(f"{mode:>9}: {row}")


# -- a zygote started before the fabric is built (launch.Prestart) ------------------------

def test_run_job_takes_a_prestarted_zygote_whose_environment_is_the_jobs(tmp_path, monkeypatch):
    """`emu run` starts the job's zygote beside the build (emu.run.build); run_job forks
    the ranks from it when it was started with exactly the environment the ranks share,
    under the prestart's job name, and starts no other."""
    monkeypatch.delenv("EMU_ZYGOTE", raising=False)
    (tmp_path / "job.py").write_text(
        "import json, os\nfrom pathlib import Path\n"
        "rank, out = int(os.environ['RANK']), Path(os.environ['EMU_RESULT_DIR'])\n"
        "(out / f'ppid{rank}').write_text(str(os.getppid()))\n"
        "(out / f'rank{rank}.json').write_text(json.dumps({'ok': True}))\n")
    net = fake_net()
    net.state_dir = tmp_path / "state"
    out = tmp_path / "workers"
    pre = launch.Prestart(net, out)
    started = []
    monkeypatch.setattr(launch, "Forked", lambda *a: started.append(a))  # no second zygote
    net.zygote_prestart = pre
    job = launch.run_job(net, [str(tmp_path / "job.py")],
                         {g: str(net.state_dir / f"nic-{g}.sock") for g in net.fabric.gpus},
                         out, timeout=300, echo=None)
    assert job["ok"] and job["returncodes"] == {0: 0, 1: 0, 2: 0, 3: 0}, job
    assert job["job"] == pre.job and started == [] and job["zygote"] == "prestarted"
    zpid = pre._future.result().zygote.pid
    assert [int((out / f"ppid{r}").read_text()) for r in range(4)] == [zpid] * 4
    pre.discard()  # taken (and stopped by run_job): nothing more


class StubForked:
    """What Prestart starts, without torch: its env is the shared env of `envs`."""
    stopped: list = []

    def __init__(self, fnet, envs, log, timeout):
        if envs[0].get("FAIL"):
            raise RuntimeError("no zygote")
        self.env = launch.shared_env(envs)

    def stop(self, grace: float = 10.0) -> dict:
        StubForked.stopped.append(self)
        return {}


@pytest.mark.parametrize("given, taken, stops", [
    ({}, True, 0),  # the environment run_job computes: taken, not stopped
    ({"EMU_RING": "rank"}, False, 1),  # another ring: stopped, run_job starts its own
    ({"FAIL": "1"}, False, 0),  # it did not start: nothing to stop
])
def test_prestart_is_taken_only_with_the_jobs_environment(tmp_path, monkeypatch, given, taken,
                                                          stops):
    monkeypatch.setattr(launch, "Forked", StubForked)
    StubForked.stopped = []
    net = fake_net()
    net.state_dir = tmp_path
    if "FAIL" in given:
        monkeypatch.setenv("FAIL", "1")
    pre = launch.Prestart(net, tmp_path / "w")
    slots = launch.plan(net.fabric)
    envs = launch.job_envs(net, slots, {s.gpu: str(tmp_path / f"nic-{s.gpu}.sock")
                                        for s in slots}, {}, tmp_path / "w", pre.job,
                           launch.MASTER_PORT, "rail", "emu", "none")
    envs = [{**e, **{k: v for k, v in given.items() if k != "FAIL"}} for e in envs.values()]
    got = pre.take(envs)
    assert (got is not None) == taken == pre.taken and len(StubForked.stopped) == stops
    pre.discard()  # once taken or stopped, never again
    pre.discard()
    assert len(StubForked.stopped) == stops


def test_an_untaken_prestart_is_stopped_by_discard(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "Forked", StubForked)
    StubForked.stopped = []
    net = fake_net()
    net.state_dir = tmp_path
    pre = launch.Prestart(net, tmp_path / "w")
    pre.discard()
    pre.discard()
    assert len(StubForked.stopped) == 1
