"""Opt-in end to end check of the lab VM (docs/VM.md): boot it, provision it, run emu in it.

    EMU_VM=1 ./setup.sh test tests/vm -s

Builds the local box when it is missing (vagrant/build-box.sh), then `vagrant up
--provider=libvirt` from vagrant/ (provisioned by `setup.sh provision`), runs `emu run
rail2x4` and `emu lab run L11.3` inside, and always destroys the VM. Prints each step's
time. A lab that did not keep up with the model at its file's TDF is run again at the TDF
its fidelity guard names, as the lab tells a user to ("Rerun with --tdf N"), at most three
times; the last run must keep up and pass. Under software emulation (TCG, no clock but the
HPET: a clock read costs ~2.8 us against ~0.09 us on the host) L11.3 needs that: at TDF
10000 the receiving NIC fell 1.95 ms model behind, at 100000 it kept up (docs/VM.md). So
under EMU_VM_DRIVER=qemu the lab starts at TDF 100000 (EMU_VM_LAB_TDF overrides it; 0 means
the lab file's TDF); its guard still judges that run, and still asks for a rerun if needed.
Needs root, /dev/kvm (or EMU_VM_DRIVER=qemu), libvirtd running, vagrant-libvirt,
about 10 GB of disk. EMU_BOX picks the box (default here: local); the VM's Vagrant state
lives in a temporary folder, so a VM of the user's own in vagrant/.vagrant is left alone.
"""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

VAGRANT_DIR = Path(__file__).resolve().parents[2] / "vagrant"
LOCAL_BOX = "emu/bookworm-local"

pytestmark = pytest.mark.skipif(os.environ.get("EMU_VM") != "1",
                                reason="opt-in: EMU_VM=1 boots a VM (docs/VM.md: KVM, ~10 GB disk)")


def _run(cmd, env, timeout, timings, step):
    start = time.monotonic()
    r = subprocess.run(cmd, cwd=VAGRANT_DIR, env=env, capture_output=True, text=True, timeout=timeout)
    timings[step] = time.monotonic() - start
    print(f"[vm] {step}: {timings[step]:.0f} s, exit {r.returncode}", flush=True)
    return r


def _tail(r, lines=40):
    return "\n".join((r.stdout + r.stderr).splitlines()[-lines:])


RERUN = re.compile(r"Rerun with --tdf (\d+(?:\.\d+)?(?:e[+-]?\d+)?)")
LAB_RERUNS = 3
TCG_LAB_TDF = 100000  # L11.3 kept up (p99 0.75 us) and passed at it in the TCG VM (docs/VM.md)


def first_lab_tdf(env):
    """The TDF the lab's first run gets: EMU_VM_LAB_TDF, else TCG_LAB_TDF under software
    emulation, else None (the lab file's own TDF)."""
    given = env.get("EMU_VM_LAB_TDF")
    if given is not None:
        try:
            tdf = float(given)
        except ValueError:
            raise ValueError(f"EMU_VM_LAB_TDF must be a number (0: the lab's own TDF), not {given!r}")
        return tdf or None
    return TCG_LAB_TDF if env.get("EMU_VM_DRIVER") == "qemu" else None


def lab_rerun_tdf(output):
    """The TDF a lab that fell behind asks to be rerun at, or None when it kept up."""
    m = RERUN.search(output)
    return float(m.group(1)) if m else None


def _print_fidelity(out, env, timings):
    """Each variant's guard line, and lab.json's per-variant figures (TDF, kept up, p99 lag,
    suggested TDF) read from inside the VM before it is destroyed."""
    for line in out.splitlines():
        if "fidelity guard:" in line:
            print("[vm]  " + line.strip(), flush=True)
    m = re.search(r"Run directory: (\S+)", out)
    if m:
        r = _run(["vagrant", "ssh", "-c", f"cat /vagrant/{m.group(1)}/lab.json"], env, 120, timings,
                 "read lab.json")
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            return
        for name, v in doc.get("variants", {}).items():
            print(f"[vm]  {name}: " + ", ".join(f"{k} {x}" for k, x in v.items() if k != "flows"),
                  flush=True)


def _preflight():
    if os.geteuid() != 0:
        pytest.fail("needs root (libvirt's system instance, build-box.sh)")
    for tool in ("vagrant", "virsh", "qemu-img", "debootstrap"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: apt-get install vagrant-libvirt libvirt-daemon-system "
                        "qemu-system-x86 qemu-utils debootstrap extlinux syslinux-common fdisk")
    r = subprocess.run(["virsh", "-c", "qemu:///system", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("libvirtd is not answering (without systemd: virtlogd -d && libvirtd -d): " + r.stderr)


def test_vm_boots_provisions_and_runs_emu(tmp_path):
    _preflight()
    env = dict(os.environ, VAGRANT_DOTFILE_PATH=str(tmp_path / "dot"), VAGRANT_CHECKPOINT_DISABLE="1")
    env.setdefault("EMU_BOX", "local")
    timings = {}
    boxes = subprocess.run(["vagrant", "box", "list"], env=env, capture_output=True, text=True).stdout
    if env["EMU_BOX"] == "local" and LOCAL_BOX not in boxes:
        r = _run(["./build-box.sh"], env, 1800, timings, "box build")
        assert r.returncode == 0, _tail(r)
    try:
        r = _run(["vagrant", "up", "--provider=libvirt"], env, 3600, timings, "vagrant up + provision")
        assert r.returncode == 0, _tail(r)
        emu = "cd /vagrant && sudo .venv/bin/emu "
        r = _run(["vagrant", "ssh", "-c", emu + "run rail2x4"], env, 1800, timings, "emu run rail2x4")
        assert r.returncode == 0, _tail(r)
        tdf = first_lab_tdf(env)
        step = "emu lab run L11.3" + (f" --tdf {tdf:g}" if tdf else "")
        for attempt in range(1 + LAB_RERUNS):
            r = _run(["vagrant", "ssh", "-c", emu + "lab run L11.3" + (f" --tdf {tdf:g}" if tdf else "")],
                     env, 1800, timings, step)
            print(_tail(r, 25), flush=True)
            _print_fidelity(r.stdout, env, timings)
            tdf = lab_rerun_tdf(r.stdout + r.stderr)
            if tdf is None or attempt == LAB_RERUNS:
                break
            step = f"emu lab run L11.3 --tdf {tdf:g}"
        assert r.returncode == 0, _tail(r)
        assert tdf is None, f"L11.3 did not keep up even at the guard's TDF:\n{_tail(r)}"
    finally:
        r = _run(["vagrant", "destroy", "-f"], env, 600, timings, "vagrant destroy")
        print("[vm] timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()), flush=True)
    assert r.returncode == 0, _tail(r)
