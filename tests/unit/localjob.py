"""Run a torch.distributed job with every rank a process on this machine (no fabric).

The ranks are forked from one zygote per job (collectives.zygote through runners.Zygote,
as the launcher does): torch is imported once per job, not once per rank (issue 30: 65
fresh workers of 3.8 s CPU each were ~250 s of the unit suite's ~570 s CPU)."""

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from collectives.launch import WORKER_THREADS_ENV
from collectives.rendezvous import torchrun_env
from collectives.runners import Zygote

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.05  #: seconds between two status requests to the zygote


def run_ranks(n, target, tmp_path, backend="emu", timeout=180, env_extra=None, cwd=ROOT,
              check=True):
    """Start n ranks of `python -m collectives.worker TARGET...` in `cwd`, forked from one
    zygote (its environment: the variables every rank's shares), each rank's output in
    tmp_path/ranks/rank<R>.log; returns rank 0's output and each rank's rank<R>.json
    result (None where there is none); fails naming the ranks that are still running
    after `timeout` s (and kills them), and, with `check`, those that exited non-zero."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    envs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
        env.update(torchrun_env(0, n, r, 1, "127.0.0.1", port))
        env.update({"EMU_HOST": "local", "EMU_RESULT_DIR": str(tmp_path), "EMU_BACKEND": backend,
                    **WORKER_THREADS_ENV, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"})
        env.update(env_extra or {})
        envs.append(env)
    deadline = time.monotonic() + timeout
    logs = tmp_path / "ranks"
    logs.mkdir(exist_ok=True)
    shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    z = Zygote(shared, logs / "zygote.log", cwd=cwd, timeout=timeout)
    try:
        pids = [z.spawn(target, env, logs / f"rank{r}.log", cwd) for r, env in enumerate(envs)]
        status = z.status()
        while None in (status[p] for p in pids) and time.monotonic() < deadline:
            time.sleep(POLL)
            status = z.status()
        live = [r for r, p in enumerate(pids) if status[p] is None]
        # where each hung rank is: faulthandler dumps every thread on SIGABRT (the zygote
        # reaps only when asked: a pid it reported running is still that rank's)
        for r in live:
            os.kill(pids[r], signal.SIGABRT)
        if live:
            time.sleep(2.0)
            z.terminate(grace=2.0)  # leave nothing behind: a hung rank holds shared memory
        outs = [(logs / f"rank{r}.log").read_text(errors="replace")
                if (logs / f"rank{r}.log").exists() else "" for r in range(n)]
    finally:
        z.close()
    if live:
        tails = [f"rank {r}: {out[-4000:]}" for r, out in enumerate(outs)]
        pytest.fail(f"ranks {live} still running after {timeout} s:\n" + "\n".join(tails))
    for r, (p, out) in enumerate(zip(pids, outs)):
        assert not check or status[p] == 0, f"rank {r} exited {status[p]}:\n{out[-3000:]}"
    return outs[0], [json.loads((tmp_path / f"rank{r}.json").read_text())
                     if (tmp_path / f"rank{r}.json").exists() else None for r in range(n)]
