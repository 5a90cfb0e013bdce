"""`emu clean` after a `kill -9` of `emu run` (issue 14), without root: which processes,
shared-memory segments, namespaces and state belong to a run, on directories of fake
/proc, /dev/shm, /run/netns and /run/emu entries (emu.realise.leftovers, emu.realise.nsutil.clean), and
where the run's marks are set (emucore.runmark: EMU_RUN=<tag>, emu-<tag>-<kind>-...)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

import topologies
from collectives.comm import Communicator
from collectives.launch import plan, worker_env
from collectives.rendezvous import PeerInfo
from emu.realise import leftovers, nsutil
from emu.cli import build_parser
from emu.commands.clean import clean_counts
from emu.realise.leftovers import Places
from emu.realise.nodes import EmuNode
from emucore.runmark import RUN_ENV, is_tag, marked_env, shm_name, shm_tag, tag_of_environ
from traffic.nic.client import NicClient, new_shm
from traffic.nic.nicconfig import NicConfig
from traffic.nic.ctl import NicControl

TAG, OTHER = "ab12", "cd34"


# -- the marks (emucore.runmark) ---------------------------------------------------------
@pytest.mark.parametrize("block,tag", [
    (b"PATH=/bin\0EMU_RUN=ab12\0HOME=/root\0", "ab12"),
    (b"EMU_RUN=ab12", "ab12"),                      # the last entry, no trailing NUL
    (b"EMU_RUN=cd34\0", "cd34"),
    (b"EMU_RUN=ab123\0", None),                     # not a tag
    (b"EMU_RUN=AB12\0", None),                      # tags are lower-case hex
    (b"EMU_RUN=\0", None),
    (b"XEMU_RUN=ab12\0", None),                     # another variable
    (b"FOO=EMU_RUN=ab12\0", None),                  # only inside a value
    (b"EMU_RUNS=ab12\0", None),
    (b"", None),                                    # zombies, kernel threads
])
def test_tag_of_environ(block, tag):
    assert tag_of_environ(block) == tag


@pytest.mark.parametrize("name,tag", [
    ("emu-ab12-mr-0011aabb", "ab12"),               # a NIC memory region (nic_client)
    ("emu-ab12-ch-0123456789ab-g0-1-0", "ab12"),    # a same-host channel (comm)
    ("emu-cd34-mr-deadbeef", "cd34"),
    ("emu0123456789ab-g0-1-0", None),               # a channel outside a run
    ("psm_0011aabb", None),                         # Python's own name
    ("kill9-foreign-1234", None),
    ("emu-ab12", None),                             # no kind, no unique part
    ("emu-ab12-mr-", None),
    ("emu-AB12-mr-0011aabb", None),
    ("emu-ab12-h1g1", None),                        # a namespace name, not a segment's
    ("xemu-ab12-mr-0011aabb", None),
])
def test_shm_tag(name, tag):
    assert shm_tag(name) == tag


def test_shm_name_carries_the_tag_and_only_a_tag():
    name = shm_name(TAG, "mr")
    assert name.startswith("emu-ab12-mr-") and len(name) == len("emu-ab12-mr-") + 8
    assert shm_tag(name) == TAG and shm_name(TAG, "mr") != name  # random unique part
    assert shm_name(TAG, "ch", "00ff-g1-2-3") == "emu-ab12-ch-00ff-g1-2-3"
    assert shm_name("", "mr") is None and shm_name("test", "mr") is None
    for kind, unique in (("MR", None), ("m-r", None), ("mr", "a/b"), ("mr", "")):
        with pytest.raises(ValueError):
            shm_name(TAG, kind, unique)


def test_marked_env():
    assert marked_env(TAG, {"A": "1"}) == {"A": "1", RUN_ENV: TAG}
    assert marked_env(TAG, {RUN_ENV: OTHER}) == {RUN_ENV: TAG}  # the run's own, not inherited
    assert marked_env(TAG)[RUN_ENV] == TAG and marked_env(TAG)["PATH"] == os.environ["PATH"]
    assert marked_env("", {"A": "1"}) == {"A": "1"} and marked_env("test") is None
    assert is_tag(TAG) and not is_tag("test") and not is_tag(None)


class _Node:
    def _popen(self, cmd, **params):
        return params


class _EmuNode(EmuNode, _Node):
    tag = TAG


@pytest.mark.parametrize("params,env", [
    ({"env": {"A": "1"}}, {"A": "1", RUN_ENV: TAG}),
    ({"cwd": "/"}, None),  # the orchestrator's environment, marked
])
def test_every_process_of_a_node_is_marked(params, env):
    # Mininet starts a node's shell and every popen (agents, NICs, LLDP, dumpcap, ping)
    # through Node._popen
    got = _EmuNode()._popen(["true"], **params)
    assert got["env"][RUN_ENV] == TAG
    if env is not None:
        assert got["env"] == env


def test_workers_and_zygote_are_marked(monkeypatch, tmp_path):
    monkeypatch.setenv(RUN_ENV, "ffff")  # never inherited: the run names its own
    fab = topologies.load("rail2x4")
    s = plan(fab)[0]
    assert worker_env(fab, s, 2, 4, "/n.sock", tmp_path, "j", run=TAG)[RUN_ENV] == TAG
    assert RUN_ENV not in worker_env(fab, s, 2, 4, "/n.sock", tmp_path, "j")
    assert RUN_ENV not in worker_env(fab, s, 2, 4, "/n.sock", tmp_path, "j", run="test")


def test_nic_config_names_its_run():
    base = dict(gpu="h1g1", ifname="nic1", ip="10.0.1.11", mac="02:00:00:00:01:01",
                gateway_mac="02:00:00:00:05:00", control="/tmp/x.sock")
    assert NicConfig(**base).run == "" and NicConfig(**base, run=TAG).run == TAG
    assert NicConfig.from_json(NicConfig(**base, run=TAG).to_json()).run == TAG
    with pytest.raises(ValueError, match="run"):
        NicConfig(**base, run="emu-ab12")


class _FakeNic:
    """What NicControl needs of a NIC to answer ping and reg_mr."""

    def __init__(self, control: str, run: str) -> None:
        self.cfg = SimpleNamespace(gpu="h1g1", ip="10.0.1.11", control=control, run=run)
        self.lock = threading.Lock()
        self.registered: list[str] = []

    def reg_mr(self, pd, shm, length, access):
        self.registered.append(shm)
        return {"lkey": 1, "rkey": 2, "addr": 0}


@pytest.mark.parametrize("run,prefix", [(TAG, "emu-ab12-mr-"), ("", "psm_")])
def test_memory_registered_with_a_nic_is_named_after_its_run(tmp_path, run, prefix):
    nic = _FakeNic(str(tmp_path / "n.sock"), run)
    server = NicControl(nic)
    server.start()
    try:
        with NicClient(nic.cfg.control, timeout=5) as client:
            assert client.run == run
            mr = client.reg_mr(1, 4096)
            try:
                assert mr.shm.name.startswith(prefix) and nic.registered == [mr.shm.name]
                assert shm_tag(mr.shm.name) == (run or None)
            finally:
                mr.close()  # unlinks
    finally:
        server.close()


@pytest.mark.parametrize("run,prefix", [(TAG, "emu-ab12-ch-"), ("", "emu")])
def test_same_host_channels_are_named_after_the_run(run, prefix):
    uid = os.urandom(16)
    names = [f"{prefix}{uid[:6].hex()}-g0-{a}-{b}" for a, b in ((0, 1), (1, 0))]
    peers = [PeerInfo("j", r, 2, gpu=f"h1g{r + 1}", host="h1") for r in range(2)]
    comms = [Communicator(peers, r, uid, timeout=10.0, run=run) for r in range(2)]
    try:
        for r, c in enumerate(comms):
            c.ensure([1 - r])
        assert all(Path("/dev/shm", n).exists() for n in names)
        assert [shm_tag(n) for n in names] == [run or None] * 2
    finally:
        for c in comms:
            c.close()
    assert not any(Path("/dev/shm", n).exists() for n in names)


def test_new_shm_is_named_after_the_run():
    shm = new_shm(TAG, 64)
    try:
        assert shm_tag(shm.name) == TAG and shm.size >= 64
    finally:
        shm.close()
        shm.unlink()


# -- selection on fake directories (emu.realise.leftovers) ----------------------------------------
def _places(root: Path) -> Places:
    p = Places(proc=root / "proc", shm=root / "shm", state=root / "state",
               netns=root / "netns")
    for d in (p.proc, p.shm, p.state, p.netns, root / "ns"):
        d.mkdir(parents=True, exist_ok=True)
    return p


def _ns(root: Path, places: Places, ns: str, name: str | None = None) -> None:
    """A network namespace `ns` (a file in root/ns), named `name` under netns/."""
    f = root / "ns" / ns
    f.touch()
    if name:
        (places.netns / name).symlink_to(f)


def _proc(root: Path, places: Places, pid: int, environ: bytes | None = b"",
          ns: str | None = "init", state: str = "S", ppid: int = 1,
          comm: str = "python3") -> None:
    d = places.proc / str(pid)
    (d / "ns").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1\n")
    if environ is not None:  # None: unreadable (gone, or a kernel thread's)
        (d / "environ").write_bytes(environ)
    if ns is not None:
        (root / "ns" / ns).touch()
        (d / "ns" / "net").symlink_to(root / "ns" / ns)


def _env(tag: str) -> bytes:
    return f"PATH=/bin\0{RUN_ENV}={tag}\0".encode()


#: pid, environ, namespace file, state, selected for run ab12 (namespaces A and B)
PROCS = [
    (101, _env(TAG), "init", "S", True),       # the zygote: root namespace, marked
    (102, b"PATH=/bin\0", "A", "S", True),     # an agent in the run's namespace
    (103, _env(TAG), "B", "S", True),          # a NIC: both
    (104, _env(TAG), None, "S", True),         # a shell whose namespace has no name yet
    (105, _env(OTHER), "init", "S", False),    # another run's zygote
    (106, b"PATH=/bin\0", "C", "S", False),    # another run's agent
    (107, b"PATH=/bin\0", "F", "S", False),    # in the foreign namespace
    (108, b"PATH=/bin\0", "init", "S", False),  # anybody else
    (109, b"FOO=EMU_RUN=ab12\0", "init", "S", False),
    (110, b"EMU_RUN=ab123\0", "init", "S", False),
    (111, None, None, "S", False),             # a kernel thread / gone meanwhile
    (112, b"", None, "Z", False),              # a zombie has no environment or namespace
]


@pytest.fixture
def fake(tmp_path):
    places = _places(tmp_path)
    _ns(tmp_path, places, "A", f"emu-{TAG}-h1")
    _ns(tmp_path, places, "B", f"emu-{TAG}-rail1")
    _ns(tmp_path, places, "C", f"emu-{OTHER}-h1")
    _ns(tmp_path, places, "F", "kill9-foreign-1")
    for pid, environ, ns, state, _ in PROCS:
        _proc(tmp_path, places, pid, environ, ns, state)
    (places.proc / "self").mkdir()
    (places.proc / "sys").mkdir()
    return places


def test_run_pids_selects_exactly_the_runs_processes(fake):
    ids = {leftovers.ns_id(fake.netns / n) for n in nsutil.emu_namespaces(TAG, fake.netns)}
    assert nsutil.emu_namespaces(TAG, fake.netns) == [f"emu-{TAG}-h1", f"emu-{TAG}-rail1"]
    assert leftovers.run_pids(TAG, ids, fake.proc) == [p for p, *_, sel in PROCS if sel]
    assert nsutil.pids_in([f"emu-{TAG}-h1"], fake.netns, fake.proc) == [102]
    assert leftovers.marked_pids(fake.proc) == {TAG: [101, 103, 104], OTHER: [105]}


@pytest.mark.parametrize("pid,alive", [(101, True), (112, False), (999, False), (0, False)])
def test_alive(fake, pid, alive):
    assert nsutil.alive(pid, fake.proc) is alive


def test_proc_stat_reads_past_a_command_with_spaces_and_parens(tmp_path):
    places = _places(tmp_path)
    _proc(tmp_path, places, 7, comm="a b) S 9 (c", state="R", ppid=5)
    assert leftovers.proc_stat(7, places.proc) == ("R", 5)


def test_lineage_is_the_process_and_its_ancestors(tmp_path):
    places = _places(tmp_path)
    for pid, ppid in ((10, 1), (20, 10), (30, 20), (40, 10)):
        _proc(tmp_path, places, pid, ppid=ppid)
    assert leftovers.lineage(30, places.proc) == {30, 20, 10, 1}
    assert leftovers.lineage(99, places.proc) == {99}


def test_shm_segments_by_run(tmp_path):
    places = _places(tmp_path)
    names = ["emu-ab12-mr-0011aabb", "emu-ab12-ch-0123456789ab-g0-1-0", "emu-cd34-mr-00000000",
             "emu0123456789ab-g0-1-0", "psm_0011aabb", "kill9-foreign-1"]
    for n in names:
        (places.shm / n).write_bytes(b"\0" * 64)
    assert leftovers.shm_segments(places.shm) == {
        TAG: ["emu-ab12-ch-0123456789ab-g0-1-0", "emu-ab12-mr-0011aabb"],
        OTHER: ["emu-cd34-mr-00000000"]}
    assert leftovers.shm_segments(tmp_path / "none") == {}


def test_remove_state_counts_the_sockets(tmp_path):
    d = tmp_path / TAG
    (d / "sub").mkdir(parents=True)
    for name in ("rail1.sock", "nic-h1g1.sock", "sub/x.sock"):
        os.mknod(d / name, stat.S_IFSOCK | 0o600)
    for name in ("state.json", "rail1.json", "qos.json"):
        (d / name).write_text("{}")
    assert leftovers.remove_state(d) == 3 and not d.exists()
    assert leftovers.remove_state(d) == 0


# -- clean on fake directories (emu.realise.nsutil.clean) ------------------------------------------
class _Ender:
    """Stands in for kill_pids: records the pids and makes them vanish from fake /proc."""

    def __init__(self, proc: Path) -> None:
        self.proc, self.ended = proc, []

    def __call__(self, pids: list[int]) -> None:
        self.ended.append(sorted(pids))
        for pid in pids:
            d = self.proc / str(pid)
            for f in sorted(d.rglob("*"), reverse=True):
                if f.is_dir() and not f.is_symlink():
                    f.rmdir()
                else:
                    f.unlink()
            d.rmdir()


def _state(places: Places, tag: str, pid: int, sockets: tuple[str, ...] = ()) -> None:
    d = places.state / tag
    d.mkdir()
    (d / "state.json").write_text(f'{{"tag": "{tag}", "pid": {pid}}}')
    for s in sockets:
        os.mknod(d / s, stat.S_IFSOCK | 0o600)


@pytest.fixture
def runs(fake, tmp_path):
    """ab12: dead (its orchestrator 900 is gone); cd34: live (orchestrator 500);
    ef56: no state any more, one marked process and one segment left."""
    _state(fake, TAG, 900, ("rail1.sock", "nic-h1g1.sock", "nic-h2g1.sock.tmp"))
    _proc(tmp_path, fake, 500, b"PATH=/bin\0")
    _state(fake, OTHER, 500, ("rail1.sock",))
    _proc(tmp_path, fake, 601, _env("ef56"))
    # never ended: the cleaner and what it runs under, a live run's orchestrator
    # (even when marked: an `emu run` started from a node's shell)
    _proc(tmp_path, fake, os.getpid(), _env(TAG), ppid=700)
    _proc(tmp_path, fake, 700, _env(TAG), ns="A")
    (fake.proc / "500" / "environ").write_bytes(_env(TAG))
    for n in ("emu-ab12-mr-0011aabb", "emu-ab12-ch-0123456789ab-g0-1-0", "emu-cd34-mr-00000000",
              "emu-ef56-mr-00000000", "emu0123456789ab-g0-1-0", "psm_0011aabb",
              "kill9-foreign-1"):
        (fake.shm / n).write_bytes(b"\0" * 64)
    return fake


def test_clean_removes_exactly_the_dead_runs_leftovers(runs, tmp_path):
    end = _Ender(runs.proc)
    removed = nsutil.clean(places=runs, end=end)
    assert removed["runs"] == [TAG, "ef56"] and removed["skipped"] == [OTHER]
    assert removed["by_run"] == {
        TAG: {"namespaces": 2, "processes": 4, "shm": 2, "sockets": 3},
        "ef56": {"namespaces": 0, "processes": 1, "shm": 1, "sockets": 0}}
    assert end.ended == [[101, 102, 103, 104], [601]]
    assert sorted(removed["processes"]) == [101, 102, 103, 104, 601]
    assert removed["namespaces"] == [f"emu-{TAG}-h1", f"emu-{TAG}-rail1"]
    assert sorted(p.name for p in runs.netns.iterdir()) == [f"emu-{OTHER}-h1", "kill9-foreign-1"]
    assert sorted(p.name for p in runs.shm.iterdir()) == [
        "emu-cd34-mr-00000000", "emu0123456789ab-g0-1-0", "kill9-foreign-1", "psm_0011aabb"]
    assert [p.name for p in runs.state.iterdir()] == [OTHER]
    left = {int(p.name) for p in runs.proc.iterdir() if p.name.isdigit()}
    assert left == {500, 700, os.getpid()} | {p for p, *_, sel in PROCS if not sel}
    assert "2 namespaces, 4 processes, 2 shared-memory segments, 3 sockets" == clean_counts(
        removed["by_run"][TAG])


def test_clean_one_run_and_a_live_one_on_request(runs):
    end = _Ender(runs.proc)
    removed = nsutil.clean(TAG, places=runs, end=end)
    assert removed["runs"] == [TAG] and end.ended == [[101, 102, 103, 104]]
    assert (runs.shm / "emu-ef56-mr-00000000").exists() and (runs.proc / "601").exists()
    removed = nsutil.clean(OTHER, include_live=True, places=runs, end=end)
    # the live run's zygote (marked) and agent (its namespace) and its segment; its
    # orchestrator stays
    assert removed["by_run"] == {OTHER: {"namespaces": 1, "processes": 2, "shm": 1,
                                         "sockets": 1}}
    assert end.ended[-1] == [105, 106] and (runs.proc / "500").exists()
    assert nsutil.clean("ffff", places=runs, end=end)["runs"] == []


def test_clean_ends_what_appears_while_it_ends(runs, tmp_path):
    forks = iter([700 + 1])

    def end(pids):  # the zygote forks a worker while it is being ended
        _Ender(runs.proc)(pids)
        for pid in forks:
            _proc(tmp_path, runs, pid, _env(TAG))

    removed = nsutil.clean(TAG, places=runs, end=end)
    assert sorted(removed["processes"]) == [101, 102, 103, 104, 701]


def test_new_tag_avoids_every_leftover(runs, monkeypatch):
    draws = iter(["ab12", "cd34", "ef56", "0042"])  # ef56: only a process and a segment
    monkeypatch.setattr(nsutil.secrets, "token_hex", lambda n: next(draws))
    assert nsutil.new_tag(runs) == "0042"


@pytest.mark.parametrize("text,ok", [("ab12", True), ("0000", True), ("AB12", False),
                                     ("ab1", False), ("emu-ab12", False)])
def test_clean_run_option_takes_a_tag(text, ok, capsys):
    if ok:
        assert build_parser().parse_args(["clean", "--run", text]).run == text
    else:
        with pytest.raises(SystemExit):
            build_parser().parse_args(["clean", "--run", text])
        assert "4 hex digits" in capsys.readouterr().err
