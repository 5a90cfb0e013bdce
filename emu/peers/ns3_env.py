"""A separate venv with ns-3 for the peer of `emu bench speed` (issue 11), and one run of
emu/peers/ns3_fabric.py in it.

ns-3 (PyPI `ns3`, C++ with cppyy bindings) stays out of emu's own venv: `ensure_venv`
creates ~/.cache/emu/ns3-venv (or $EMU_NS3_VENV) and pip-installs NS3_PIN there once;
`run` feeds a spec (emu/peers/spec.py) to the script with that venv's Python and returns
its JSON. The peer's model omits PFC, ECN and RoCE (see ns3_fabric.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

NS3_PIN = "ns3==3.44.post0"
SCRIPT = Path(__file__).with_name("ns3_fabric.py")
INSTALL_TIMEOUT_S = 3600.0  # pip may build cppyy from source: minutes on 2 cores


def default_venv() -> Path:
    """$EMU_NS3_VENV, else ~/.cache/emu/ns3-venv."""
    return Path(os.environ.get("EMU_NS3_VENV") or Path.home() / ".cache" / "emu" / "ns3-venv")


def python_of(path: Path) -> Path:
    """The venv's interpreter."""
    return path / "bin" / "python"


def installed(path: Path | None = None) -> bool:
    """Whether the venv at `path` holds NS3_PIN (asks its metadata; does not import ns-3)."""
    py = python_of(path or default_venv())
    if not py.exists():
        return False
    want = NS3_PIN.split("==")[1]
    ask = "from importlib import metadata as m; print(m.version('ns3'))"
    r = subprocess.run([str(py), "-c", ask], capture_output=True, text=True, timeout=60)
    return r.returncode == 0 and r.stdout.strip() == want


def ensure_venv(path: Path | None = None, log=print) -> Path | None:
    """The venv with NS3_PIN, created and installed if missing (idempotent); None, with the
    reason logged, when it cannot be (no venv module, pip offline, the bindings fail)."""
    path = Path(path or default_venv())
    if installed(path):
        return path
    t0 = time.monotonic()
    py = python_of(path)
    if not py.exists():
        if path.exists() and any(path.iterdir()) and not (path / "pyvenv.cfg").exists():
            log(f"ns-3 peer: {path} exists and is no venv: not touching it")
            return None
        log(f"ns-3 peer: creating the venv {path}")
        try:
            venv.EnvBuilder(with_pip=True).create(path)
        except (OSError, subprocess.CalledProcessError) as e:
            log(f"ns-3 peer: cannot create the venv {path}: {e}")
            return None
    log(f"ns-3 peer: pip install {NS3_PIN} into {path} (may build cppyy: minutes)")
    try:
        r = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check",
                            "-q", NS3_PIN], capture_output=True, text=True,
                           timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"ns-3 peer: pip install {NS3_PIN} took over {INSTALL_TIMEOUT_S:g} s")
        return None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        log(f"ns-3 peer: pip cannot install {NS3_PIN} (offline?): {' | '.join(tail)}")
        return None
    r = subprocess.run([str(py), "-c", "from ns import ns; ns.NodeContainer()"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-3:]
        log(f"ns-3 peer: {NS3_PIN} installed but its bindings fail: {' | '.join(tail)}")
        return None
    log(f"ns-3 peer: ready in {time.monotonic() - t0:.0f} s")
    return path


def run(spec: dict, sim_ms: float, path: Path | None = None, timeout: float = 1800.0) -> dict:
    """Simulate `spec` for `sim_ms` model ms in the ns-3 venv; the script's JSON (sim_s,
    wall_s, slowdown, cpu_s, packets_*, events, ns3_version). RuntimeError if there is no
    venv (call ensure_venv first) or the script fails."""
    py = python_of(Path(path or default_venv()))
    if not py.exists():
        raise RuntimeError(f"no ns-3 venv at {py.parent.parent}: call ensure_venv() first")
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="emu-ns3-") as fh:
        json.dump(spec, fh)
        fh.flush()
        cmd = [str(py), str(SCRIPT), "--spec", fh.name, "--sim-ms", repr(float(sim_ms))]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        tail = r.stderr.strip().splitlines()[-5:]
        raise RuntimeError(f"ns-3 peer failed (exit {r.returncode}): {' | '.join(tail)}")
    return json.loads(lines[-1])


if __name__ == "__main__":  # python -m emu.peers.ns3_env: set the venv up
    sys.exit(0 if ensure_venv() else 1)
