"""A torchrun-style launcher over the emulated fabric (book ch.14 "Job start").

One CPU PyTorch worker per emulated GPU, started inside its host's namespace with
torchrun's environment (NODE_RANK = host index, LOCAL_RANK = GPU index in the host,
RANK = node_rank x nproc_per_node + local_rank, WORLD_SIZE, MASTER_ADDR = Host-1's
frontend address, MASTER_PORT) plus where its GPU's NIC is (EMU_NIC_SOCK, EMU_NIC_IP,
EMU_GPU, EMU_HOST, EMU_RAIL) and the time dilation (EMU_TDF). Workers run through
`python -m collectives.run`, which makes the "emu" backend available (and the default
for CPU) before the user's script or module starts, so scripts need no emu import.

Each worker's output goes to RUNDIR/workers/rank<R>.log; rank 0's is also shown live.
A worker that fails stops the job: the others are terminated (by pid: only processes
this launcher started) and the tail of the failed rank's log is reported.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from collectives.rendezvous import global_rank, torchrun_env

REPO = Path(__file__).resolve().parent.parent
MASTER_PORT = 29500  #: torchrun's default

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


def worker_env(fabric: Any, slot: Slot, nproc: int, nnodes: int, nic_sock: str,
               result_dir: Path, job: str, port: int = MASTER_PORT) -> dict[str, str]:
    """The environment of one worker (torchrun's variables + where its NIC is)."""
    env = {k: v for k, v in os.environ.items()  # EMU_SLOT passes through
           if k == "EMU_SLOT" or not k.startswith(("EMU_", "MASTER_"))}
    env.update(torchrun_env(slot.node_rank, nproc, slot.local_rank, nnodes,
                            frontend_ip(fabric, plan(fabric)[0].host), port))
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d: "hostname of the client socket cannot be retrieved" in a namespace
    env.update({"EMU_GPU": slot.gpu, "EMU_HOST": slot.host, "EMU_RAIL": str(slot.rail),
                "EMU_NIC_IP": slot.ip, "EMU_NIC_SOCK": nic_sock, "EMU_TDF": f"{fabric.tdf:g}",
                "EMU_JOB": job, "EMU_RESULT_DIR": str(result_dir), "EMU_BACKEND": "emu",
                "TORCHELASTIC_RUN_ID": job, **WORKER_THREADS_ENV,
                "GLOO_SOCKET_IFNAME": "fe0",  # gloo (for comparison) over the frontend
                "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in
                                               env.get("PYTHONPATH", "").split(os.pathsep) if p]),
                "PYTHONUNBUFFERED": "1"})
    return env


def run_job(fnet: Any, target: list[str], sockets: dict[str, str], out_dir: Path,
            timeout: float = 1800.0, echo: Callable[[str], None] | None = print,
            port: int = MASTER_PORT) -> dict:
    """Start `python -m collectives.run TARGET...` on every GPU and wait for all.

    target: ["--module", "collectives.workloads.train", args...] or [script, args...].
    Returns {"ok", "returncodes", "seconds_lab", "results" (rank -> JSON the worker
    wrote), "backend" (rank -> the emu backend's record), "failed": [...]}.
    """
    fab = fnet.fabric
    slots = plan(fab)
    nnodes = len({s.host for s in slots})
    nproc = len(slots) // nnodes
    out_dir.mkdir(parents=True, exist_ok=True)
    job = f"emu-{fnet.tag}-{int(time.time())}"
    procs: dict[int, subprocess.Popen] = {}
    logs = {}
    t0 = time.monotonic()
    threads = []
    try:
        for s in slots:
            env = worker_env(fab, s, nproc, nnodes, sockets[s.gpu], out_dir, job, port)
            log_path = out_dir / f"rank{s.rank}.log"
            logs[s.rank] = log_path
            argv = [sys.executable, "-m", "collectives.run"] + list(target)
            f = open(log_path, "w")
            p = fnet.host(s.host).popen(argv, cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, bufsize=1)
            procs[s.rank] = p
            t = threading.Thread(target=_tee, args=(p, f, echo if s.rank == 0 else None),
                                 daemon=True)
            t.start()
            threads.append(t)
        failed: list[int] = []
        deadline = time.monotonic() + timeout
        while True:
            codes = {r: p.poll() for r, p in procs.items()}
            failed = [r for r, c in codes.items() if c not in (None, 0)]
            if failed or all(c == 0 for c in codes.values()):
                break
            if time.monotonic() > deadline:
                failed = [r for r, c in codes.items() if c is None]
                break
            time.sleep(0.2)
    finally:
        for p in procs.values():  # only what we started, by pid
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in threads:
            t.join(5)
    elapsed = time.monotonic() - t0
    results, backend = {}, {}
    for s in slots:
        rp = out_dir / f"rank{s.rank}.json"
        if rp.exists():
            results[s.rank] = json.loads(rp.read_text())
        for bp in sorted(out_dir.glob(f"emu-rank{s.rank}-g*.json")):
            backend.setdefault(s.rank, []).append(json.loads(bp.read_text()))
    tails = {r: _tail(logs[r]) for r in failed}
    return {"ok": not failed, "returncodes": {r: p.returncode for r, p in procs.items()},
            "seconds_lab": elapsed, "results": results, "backend": backend, "failed": failed,
            "failed_tails": tails, "slots": [s.__dict__ for s in slots], "job": job,
            "master": f"{frontend_ip(fab, slots[0].host)}:{port}"}


def _tee(p: subprocess.Popen, f, echo: Callable[[str], None] | None) -> None:
    with f:
        for line in p.stdout:
            f.write(line)
            if echo is not None:
                echo("  [rank 0] " + line.rstrip("\n"))


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"
