"""A torchrun-style launcher over the emulated fabric (book ch.14 "Job start").

One CPU PyTorch worker per emulated GPU, started inside its host's namespace with
torchrun's environment (NODE_RANK = host index, LOCAL_RANK = GPU index in the host,
RANK = node_rank x nproc_per_node + local_rank, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
plus where its GPU's NIC is (EMU_NIC_SOCK, EMU_NIC_IP, EMU_GPU, EMU_HOST, EMU_RAIL), the
time dilation (EMU_TDF), the ring order (EMU_RING, `emu run --ring`: "rail" or the
book's "rank", Fig 14-5) and the run's mark (EMU_RUN=<tag>, emucore.runmark: `emu clean`
finds the zygote, which lives outside every host namespace, and the workers by it).
MASTER_ADDR is as in the book (ch.14 Figs 14-1..14-3, L3487): 127.0.0.1 for the ranks
on the master's host (Host-1), Host-1's frontend address for the others; rank 0's
TCPStore listens on the wildcard address, so both reach it.
MASTER_PORT is `emu run --master-port` (default torchrun's 29500; the book's 12345).
Workers run through `python -m collectives.worker`, which makes the "emu" backend available
(and the default for CPU) before the user's script or module starts, so scripts need no
emu import.

Workers are forked from a zygote (collectives.zygote; issue 11 "Memory": torch is
imported once per job, not once per GPU) unless EMU_ZYGOTE=0, which starts each as its
own `python -m collectives.worker` with its host's Mininet popen (the runners:
collectives.runners). `emu run` and `emu lab run` (a lab with a torch workload) start the
zygote before they build the fabric (`Prestart`), so that torch's import runs beside the
build; run_job takes it only if it was started with exactly the environment the ranks share.

Each worker's output goes to RUNDIR/workers/rank<R>.log; rank 0's is also shown live.
A worker that fails stops the job: the others are terminated (by pid: only processes
this launcher started) and the tail of the failed rank's log is reported.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from collectives.rendezvous import global_rank, torchrun_env
from collectives.ring import RING_KINDS
from collectives.runners import REPO, Forked, Popened, Spawned, Split, shared_env, tail
from emucore.runmark import marked_env

MASTER_PORT = 29500  #: torchrun's default
LOOPBACK = "127.0.0.1"  #: MASTER_ADDR of the master host's own ranks (book L3487)

#: Threads of a worker's torch. One process per emulated GPU already puts N workers on
#: the machine's few cores, so torch's intra-op parallelism only oversubscribes them:
#: one OpenMP/MKL thread per worker. PASSIVE: a thread that finished a parallel region
#: (if a script raises the thread count itself) sleeps at once instead of spinning for
#: libgomp's GOMP_SPINCOUNT before it blocks. Measured with the local job harness, 8
#: ranks x 5 AllReduces of 16 MB on 2 cores: 2 threads 0.37 CPU-s per rank (1.5 s),
#: 2 threads PASSIVE 0.08 (0.55 s), 1 thread 0.06 (0.27 s).
WORKER_THREADS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                      "OMP_WAIT_POLICY": "PASSIVE"}


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


@dataclass(frozen=True)
class Slot:
    """Where one rank runs."""

    rank: int
    node_rank: int
    local_rank: int
    gpu: str
    host: str
    rail: int
    ip: str


def plan(fabric: Any) -> list[Slot]:
    """Ranks of every GPU: hosts in order are nodes, a host's GPUs in order local ranks."""
    hosts = sorted({g.host for g in fabric.gpus.values()}, key=_natural)
    per_host = {h: sorted((g for g in fabric.gpus.values() if g.host == h),
                          key=lambda g: g.index) for h in hosts}
    nproc = {len(v) for v in per_host.values()}
    if len(nproc) != 1:
        raise ValueError("torchrun needs the same number of GPUs on every host, got "
                         + ", ".join(f"{h}: {len(v)}" for h, v in per_host.items()))
    n = nproc.pop()
    return [Slot(global_rank(i, n, j), i, j, g.name, h, g.rail, g.ip)
            for i, h in enumerate(hosts) for j, g in enumerate(per_host[h])]


def frontend_ip(fabric: Any, host: str) -> str:
    """The host's address on the frontend network (fe0)."""
    for (node, _), port in fabric.ports.items():
        if node == host and port.ifname == "fe0" and port.ip:
            return port.ip.split("/")[0]
    raise ValueError(f"{host} has no frontend interface")


def master_addr(fabric: Any, slot: Slot) -> str:
    """MASTER_ADDR of a rank: loopback on the master's host (rank 0's), else the master's
    frontend address (book L3487: local ranks 1-3 via 127.0.0.1, ranks 4-7 via .101)."""
    master = plan(fabric)[0].host
    return LOOPBACK if slot.host == master else frontend_ip(fabric, master)


def worker_env(fabric: Any, slot: Slot, nproc: int, nnodes: int, nic_sock: str,
               result_dir: Path, job: str, port: int = MASTER_PORT,
               ring: str = "rail", run: str = "", backend: str = "emu",
               gpu: str = "none") -> dict[str, str]:
    """The environment of one worker (torchrun's variables + where its NIC is); `run`,
    the emu run's tag, marks the worker and the zygote (EMU_RUN, emucore.runmark);
    `backend` (EMU_BACKEND) is what the script's collectives run on, whatever it names
    (collectives.aliases): "emu" or torch's "gloo"; `gpu` the compute model
    (EMU_GPU_MODEL: "none" or "h100", collectives.compute)."""
    env = {k: v for k, v in os.environ.items()  # EMU_SLOT passes through
           if k == "EMU_SLOT" or not k.startswith(("EMU_", "MASTER_"))}
    env.update(torchrun_env(slot.node_rank, nproc, slot.local_rank, nnodes,
                            master_addr(fabric, slot), port))
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d: "hostname of the client socket cannot be retrieved" in a namespace
    env.update({"EMU_GPU": slot.gpu, "EMU_HOST": slot.host, "EMU_RAIL": str(slot.rail),
                "EMU_NIC_IP": slot.ip, "EMU_NIC_SOCK": nic_sock, "EMU_TDF": f"{fabric.tdf:g}",
                "EMU_JOB": job, "EMU_RESULT_DIR": str(result_dir), "EMU_BACKEND": backend,
                "EMU_GPU_MODEL": gpu,
                "EMU_RING": ring,
                "TORCHELASTIC_RUN_ID": job, **WORKER_THREADS_ENV,
                "GLOO_SOCKET_IFNAME": "fe0",  # gloo (for comparison) over the frontend
                "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in
                                               env.get("PYTHONPATH", "").split(os.pathsep) if p]),
                "PYTHONUNBUFFERED": "1"})
    return marked_env(run, env)  # unchanged when `run` is no run tag


def job_name(tag: str) -> str:
    """A job's name (EMU_JOB, TORCHELASTIC_RUN_ID): the run's tag and the time."""
    return f"emu-{tag}-{int(time.time())}"


def job_envs(fnet: Any, slots: list[Slot], sockets: dict[str, str], far: dict[str, str],
             out_dir: Path, job: str, port: int, ring: str, backend: str,
             gpu: str) -> dict[int, dict]:
    """rank -> its worker's environment (`worker_env`); `sockets`: GPU -> its NIC's
    control socket where the worker runs; `far`: host -> the directory on its server."""
    fab = fnet.fabric
    nnodes = len({s.host for s in slots})
    return {s.rank: worker_env(fab, s, len(slots) // nnodes, nnodes, sockets[s.gpu],
                               Path(far.get(s.host, out_dir)), job, port, ring,
                               run=fnet.tag, backend=backend, gpu=gpu)
            for s in slots}


class Prestart:
    """A job's zygote started before its fabric is built (`emu run`, emu.run.build): its
    torch import (~3.5 s of one core) runs beside the build, LLDP and the reachability
    check instead of after them. It is built from the environments run_job will give the
    ranks (the NICs' sockets where start_nics puts them); run_job takes it only when the
    environment the zygote was started with is exactly the one it would start (otherwise
    it stops this one and starts its own), so a prestarted job runs as any other.
    `discard` stops it if no job took it (idempotent)."""

    def __init__(self, fnet: Any, out_dir: Path, port: int = MASTER_PORT, ring: str = "rail",
                 backend: str = "emu", gpu: str = "none", timeout: float = 600.0) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.job = job_name(fnet.tag)
        slots = plan(fnet.fabric)
        socks = {s.gpu: str(Path(fnet.state_dir) / f"nic-{s.gpu}.sock") for s in slots}
        out_dir.mkdir(parents=True, exist_ok=True)
        envs = job_envs(fnet, slots, socks, {}, out_dir, self.job, port, ring, backend, gpu)
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._future = self._pool.submit(Forked, fnet, [envs[s.rank] for s in slots],
                                         out_dir / "zygote.log", timeout)
        self._claimed = False
        self.taken = False  #: a job took it (its result's "zygote": "prestarted")

    def _claim(self) -> Forked | None:
        """The started zygote's runner, once (None after, or if it failed to start)."""
        if self._claimed:
            return None
        self._claimed = True
        try:
            return self._future.result()
        except Exception:  # it failed to start: run_job starts its own, and says why
            return None
        finally:
            self._pool.shutdown()

    def take(self, envs: list[dict]) -> Forked | None:
        """The started zygote's runner, if it was started with exactly the environment
        `envs` share and started well; else None, having stopped it."""
        forked = self._claim()
        if forked is not None and forked.env != shared_env(envs):
            forked.stop()
            return None
        self.taken = forked is not None
        return forked

    def discard(self) -> None:
        """Stop the zygote if no job took it."""
        forked = self._claim()
        if forked is not None:
            forked.stop()


WATCH_S = 1.0  #: lab seconds between two asks of run_job's `watch`


def run_job(fnet: Any, target: list[str], sockets: dict[str, str], out_dir: Path,
            timeout: float = 1800.0, echo: Callable[[str], None] | None = print,
            port: int = MASTER_PORT, ring: str = "rail",
            watch: Callable[[], str | None] | None = None, cwd: Path | None = None,
            backend: str = "emu", gpu: str = "none") -> dict:
    """Start `python -m collectives.worker TARGET...` on every GPU and wait for all.

    target: ["--module", "collectives.workloads.train", args...] or [script, args...].
    port: MASTER_PORT; ring: EMU_RING (RING_KINDS); cwd: the workers' working directory
    (torchrun's is where it was started; default this process's); backend: EMU_BACKEND
    ("emu", or "gloo" to keep torch's). `watch()`, asked every WATCH_S lab
    seconds, names a failure that dooms the job (a NIC's QP in error: its peer is gone)
    - the job then stops at once instead of waiting for its ranks' timeouts (issue 14).
    Returns {"ok", "returncodes", "fabric_error",
    "seconds_lab", "results" (rank -> JSON the worker wrote), "backend" (rank -> the emu
    backend's record), "compute" (rank -> its compute record, with a compute model),
    "failed": [...], "slots", "master" (frontend address:port),
    "master_addr_by_rank"}.
    Workers are forked from a zygote in the launcher's namespaces (`Forked`, which says
    why there), or with EMU_ZYGOTE=0 started one by one in their hosts' (`Popened`).
    """
    if ring not in RING_KINDS or not 0 < port < 65536:
        raise ValueError(f"run_job: ring {ring!r} (one of {', '.join(RING_KINDS)}), "
                         f"port {port!r} (1..65535)")
    fab = fnet.fabric
    slots = plan(fab)
    out_dir.mkdir(parents=True, exist_ok=True)
    pre: Prestart | None = getattr(fnet, "zygote_prestart", None)
    job = pre.job if pre is not None else job_name(fnet.tag)
    # hosts on other servers (emu.cluster.net): their workers run there, with their NICs'
    # own sockets, and write their results there (fetched below)
    nodes = {h: fnet.host(h) for h in {s.host for s in slots}}
    far = {h: n.scratch(f"workers-{job}") for h, n in nodes.items() if hasattr(n, "spawn")}
    for h, d in far.items():
        nodes[h].popen(["mkdir", "-p", d]).wait(60)
    wsock = getattr(fnet, "worker_sockets", None) or {}
    envs = job_envs(fnet, slots, {g: wsock.get(g, p) for g, p in sockets.items()}, far,
                    out_dir, job, port, ring, backend, gpu)
    cwd = Path(cwd or os.getcwd())
    logs = {s.rank: out_dir / f"rank{s.rank}.log" for s in slots}
    for path in logs.values():
        path.write_text("")
    t0 = time.monotonic()
    workers = Split(_runners(fnet, slots, envs, far, out_dir, timeout, pre))
    done = threading.Event()
    follow = threading.Thread(target=_follow, args=(logs[0], echo, done), daemon=True)
    if echo is not None:
        follow.start()
    failed: list[int] = []
    fabric_error = None
    try:
        for s in slots:
            workers.start(s.rank, s.host, list(target), envs[s.rank], logs[s.rank], cwd)
        deadline = time.monotonic() + timeout
        next_watch = time.monotonic() + WATCH_S
        while True:
            codes = workers.poll()
            failed = [r for r, c in codes.items() if c not in (None, 0)]
            if failed or all(c == 0 for c in codes.values()):
                break
            if time.monotonic() > deadline:
                failed = [r for r, c in codes.items() if c is None]
                break
            if watch is not None and time.monotonic() >= next_watch:
                next_watch = time.monotonic() + WATCH_S
                fabric_error = watch()
                if fabric_error:
                    break
            time.sleep(0.2)
    finally:
        returncodes = workers.stop()  # only what we started, by pid
        done.set()
        if echo is not None:
            follow.join(5)
    elapsed = time.monotonic() - t0
    for h, d in far.items():  # what the workers there wrote, next to the others'
        for name, text in nodes[h].files(d, "*.json").items():
            (out_dir / name).write_text(text)
    results, backend, compute = {}, {}, {}
    for s in slots:
        rp = out_dir / f"rank{s.rank}.json"
        if rp.exists():
            results[s.rank] = json.loads(rp.read_text())
        cp = out_dir / f"compute-rank{s.rank}.json"
        if cp.exists():
            compute[s.rank] = json.loads(cp.read_text())
        for bp in sorted(out_dir.glob(f"emu-rank{s.rank}-g*.json")):
            backend.setdefault(s.rank, []).append(json.loads(bp.read_text()))
    tails = {r: tail(logs[r]) for r in failed}
    return {"ok": not failed and not fabric_error, "fabric_error": fabric_error,
            "returncodes": returncodes,
            "seconds_lab": elapsed, "results": results, "backend": backend, "compute": compute,
            "failed": failed,
            "failed_tails": tails, "slots": [s.__dict__ for s in slots], "job": job,
            "zygote": ("prestarted" if pre is not None and pre.taken else "started")
            if os.environ.get("EMU_ZYGOTE", "1") != "0" else "per rank",
            "master": f"{frontend_ip(fab, slots[0].host)}:{port}",
            "master_addr_by_rank": {r: e["MASTER_ADDR"] for r, e in envs.items()}}


def _runners(fnet: Any, slots: list[Slot], envs: dict[int, dict], far: dict[str, str],
             out_dir: Path, timeout: float, pre: Prestart | None = None) -> dict[int, Any]:
    """rank -> what starts it: one zygote here (`Forked`; `pre`'s when it fits, `Prestart`)
    and one on every other server (its hosts' `forked`, emu.cluster.farzygote: each rank's
    log streamed here), all importing torch at once (~3 s each); with EMU_ZYGOTE=0 every
    rank its own process (`Popened` here, `Spawned` there). A zygote that fails stops the
    others."""
    from concurrent.futures import ThreadPoolExecutor

    here = [s.rank for s in slots if s.host not in far]
    there: dict[int, list[int]] = {}  # a server (its part's id) -> its ranks
    for s in slots:
        if s.host in far:
            there.setdefault(id(fnet.host(s.host).part), []).append(s.rank)
    ready = None
    if pre is not None and here and not far:
        ready = pre.take([envs[r] for r in here])
    elif pre is not None:
        pre.discard()
    if os.environ.get("EMU_ZYGOTE", "1") == "0":
        if ready is not None:
            ready.stop()
        spawned = Spawned(fnet)
        return {**dict.fromkeys(here, Popened(fnet)),
                **{r: spawned for ranks in there.values() for r in ranks}}
    if ready is not None:
        return dict.fromkeys(here, ready)
    host_of = {s.rank: s.host for s in slots}
    runners: list[tuple[list[int], Any]] = []
    mine = None
    try:  # the zygotes there started first, from this thread (FarZygote says why)
        for ranks in there.values():
            h = host_of[ranks[0]]
            runners.append((ranks, fnet.host(h).forked(fnet, [envs[r] for r in ranks],
                                                       out_dir, far[h])))
        with ThreadPoolExecutor(max_workers=1) as pool:
            mine = pool.submit(Forked, fnet, [envs[r] for r in here], out_dir / "zygote.log",
                               timeout) if here else None
            for _, runner in runners:
                runner.zygote.wait(timeout)
        if mine is not None:
            runners.append((here, mine.result()))
    except BaseException:
        for _, runner in runners:  # each stops what it started, by pid
            runner.stop()
        if mine is not None and mine.exception() is None:
            mine.result().stop()
        raise
    return {r: runner for ranks, runner in runners for r in ranks}


def _follow(path: Path, echo: Callable[[str], None], done: threading.Event) -> None:
    """Echo the lines of a log file as they are written, until `done` and its end."""
    buf = ""
    with open(path, errors="replace") as f:
        while True:
            finished = done.is_set()
            chunk = f.read()
            *lines, buf = (buf + chunk).split("\n")
            for line in lines:
                echo("  [rank 0] " + line)
            if finished:
                if buf:
                    echo("  [rank 0] " + buf)
                return
            if not chunk:
                done.wait(0.1)

