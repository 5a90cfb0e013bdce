"""Starting `python -m emu run` from a benchmark as a user would (shared by the benches)."""

from __future__ import annotations

import signal
import subprocess
import sys

from emu.realise.procs import REPO


def emu_run(argv: list[str]) -> int:
    """`python -m emu run *argv` as a user would, its exit code. Interrupted (Ctrl-C, or
    SIGINT/SIGTERM to this process alone), the run gets SIGTERM and the time to tear its
    fabric down; subprocess.run would SIGKILL it and leave the fabric behind."""
    child = subprocess.Popen([sys.executable, "-m", "emu", "run", *argv], cwd=str(REPO),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = child.communicate()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=120)
        raise
    if child.returncode not in (0, 1, 3):  # 1, 3: a verdict or the guard, in summary.json
        print(f"    emu run exited {child.returncode}: {err.strip()[-500:]}", flush=True)
    return child.returncode
