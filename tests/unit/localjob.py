"""Run a torch.distributed job with every rank a process on this machine (no fabric)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectives.launch import WORKER_THREADS_ENV
from collectives.rendezvous import torchrun_env

ROOT = Path(__file__).resolve().parents[2]


def run_ranks(n, target, tmp_path, backend="emu", timeout=180, env_extra=None, cwd=ROOT,
              check=True):
    """Start n ranks of `python -m collectives.worker TARGET...` in `cwd`; returns rank 0's
    output and each rank's rank<R>.json result (None where there is none); fails naming
    the ranks that are still running after `timeout` s (and kills them), and, with
    `check`, those that exited non-zero."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
        env.update(torchrun_env(0, n, r, 1, "127.0.0.1", port))
        env.update({"EMU_HOST": "local", "EMU_RESULT_DIR": str(tmp_path), "EMU_BACKEND": backend,
                    **WORKER_THREADS_ENV, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"})
        env.update(env_extra or {})
        procs.append(subprocess.Popen([sys.executable, "-m", "collectives.worker"] + target,
                                      cwd=cwd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:  # where each hung rank is: faulthandler dumps every thread on SIGABRT
            if p.poll() is None:
                p.send_signal(signal.SIGABRT)
        time.sleep(2.0)
        for p in procs:  # leave nothing behind: a hung rank would hold its shared memory
            p.kill()
        tails = [f"rank {r}: {(p.communicate()[0] or '')[-4000:]}" for r, p in enumerate(procs)]
        pytest.fail(f"ranks still running after {timeout} s:\n" + "\n".join(tails))
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert not check or p.returncode == 0, f"rank {r} exited {p.returncode}:\n{out[-3000:]}"
    return outs[0], [json.loads((tmp_path / f"rank{r}.json").read_text())
                     if (tmp_path / f"rank{r}.json").exists() else None for r in range(n)]
