"""`kill -9` of `emu run` in any phase, then `emu clean` (root, issue 14): no namespace,
process, shared-memory segment or state of the run is left, and a foreign namespace and
foreign segments are untouched.

Only the `emu run` process is killed, by pid: what it started (agents, NICs, LLDP
speakers, captures, pings, the worker zygote and its workers) survives it, which is the
point. The run's processes are found the way `emu clean` finds them (emu.realise.leftovers: its
namespaces and the EMU_RUN=<tag> mark), its segments by name (/dev/shm/emu-<tag>-*).
Four runs of rail2x4 at a fixed TDF (no calibration), each killed as soon as its phase
is reached, none waiting for a workload to finish: the file stays within ~4 minutes.
"""

import os
import secrets
import subprocess
import sys
from multiprocessing import shared_memory
from pathlib import Path

import pytest

from emu.realise import leftovers, nsutil
from traffic.nic.client import NicError, request

from .polling import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
AGENTS = 4  #: rail2x4's switches (2 rails, 2 spines): agents never end by themselves
TDF = "20000"  #: given, so no calibration; a 200G link runs at 10 Mb/s in the lab


@pytest.fixture
def foreign():
    """A namespace and shared-memory segments emu did not make, one named like emu's
    channels outside a run; removed by the test, never by `emu clean`."""
    ns = f"kill9-foreign-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    segs = []
    try:
        for name in (f"kill9-foreign-{secrets.token_hex(3)}", f"emu{secrets.token_hex(6)}-g9-0-1"):
            segs.append(shared_memory.SharedMemory(name=name, create=True, size=4096))
        yield ns, [s.name for s in segs]
    finally:
        for s in segs:
            s.close()
            s.unlink()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def run_tag(p: subprocess.Popen, log: Path) -> str | None:
    """The tag of the run `p` started, once it recorded its state."""
    assert p.poll() is None, f"emu run exited {p.returncode}:\n{log.read_text()[-3000:]}"
    tags = [t for t, st in nsutil.run_states().items() if st.get("pid") == p.pid]
    return tags[0] if tags else None


def segments(tag: str, kind: str) -> list[str]:
    """The run's shared-memory segments of one kind (mr: NIC memory, ch: channels)."""
    return [n for n in leftovers.shm_segments().get(tag, [])
            if n.startswith(f"emu-{tag}-{kind}-")]


def root_ns_zygotes(tag: str) -> list[int]:
    """The run's worker zygote: marked, in the root network namespace (no host's)."""
    root = leftovers.ns_id(Path("/proc/self/ns/net"))  # the test runs where emu run does
    out = []
    for pid in leftovers.marked_pids().get(tag, []):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"collectives.zygote" in cmd and leftovers.ns_id(Path(f"/proc/{pid}/ns/net")) == root:
            out.append(pid)
    return out


def tx_frames(tag: str, gpu: str) -> int:
    """Frames the GPU's NIC sent so far (0 while it does not answer yet)."""
    try:
        return request(str(nsutil.STATE_DIR / tag / f"nic-{gpu}.sock"),
                       {"cmd": "counters"}).get("tx_frames", 0)
    except (OSError, ValueError, NicError):
        return 0


# phase -> (emu run options, the phase is reached when probe(tag, output) is true,
#           processes of the run alive after the kill at least: the agents, and the NICs
#           of the workload, never end by themselves; the zygote does, when its
#           connection to the killed launcher closes, after terminating its workers)
PHASES = {
    # the first namespace exists; the build (9 namespaces, 4 agents started and awaited,
    # LLDP/DCBX) takes seconds more, so the kill lands before "up in"
    "build": (["--pcap", "none"],
              lambda tag, out: nsutil.emu_namespaces(tag), 0),
    # pinging 56 GPU pairs, a capture per GPU NIC (--pcap hosts) running
    "reachability": (["--pcap", "hosts"],
                     lambda tag, out: "Checking reachability" in out, AGENTS),
    # 64 MB at 10 Mb/s lab is ~50 s: the source NIC has sent frames, far from done
    "rdma-write": (["--pcap", "none", "--workload", "write", "--src", "h1g1", "--dst", "h4g2",
                    "--size", "64MB"],
                   lambda tag, out: len(segments(tag, "mr")) >= 2 and tx_frames(tag, "h1g1"),
                   AGENTS + 2),
    # the zygote (root namespace) forked the ranks and they opened their channels:
    # same-host ones in shared memory, the others' MRs registered with their NICs; an
    # AllReduce of 16 MB sends 2(N-1)/N x 16 MB = 28 MB per rank, ~22 s at 10 Mb/s
    "torch-allreduce": (["--pcap", "none", "--workload", "allreduce", "--size", "16MB",
                         "--iters", "5"],
                        lambda tag, out: (segments(tag, "ch") and segments(tag, "mr")
                                          and root_ns_zygotes(tag)),
                        AGENTS + 8),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_kill9_then_clean_leaves_nothing_of_the_run(tmp_path, foreign, phase):
    args, reached, at_least = PHASES[phase]
    log = tmp_path / "emu-run.log"
    tag = None
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "emu", "run", "rail2x4", "--tdf", TDF,
                              "--out", str(tmp_path / "run"), *args], cwd=ROOT, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        tag = wait_for(lambda: run_tag(p, log), 60, "emu run to record its state", 0.02)
        wait_for(lambda: run_tag(p, log) and reached(tag, log.read_text()), 150,
                 f"emu run {tag} to reach the {phase} phase", 0.02)
        zygotes = root_ns_zygotes(tag)  # only marked: it lives in no namespace of the run
        assert len(zygotes) == (1 if phase == "torch-allreduce" else 0), zygotes
        p.kill()  # SIGKILL, to the emu run process only
        p.wait(10)
        if phase == "build":
            assert "up in" not in log.read_text(), log.read_text()[-2000:]
        names = nsutil.emu_namespaces(tag)
        assert names, "the run's namespaces outlive it"
        orphans = set(leftovers.marked_pids().get(tag, [])) | set(nsutil.pids_in(names))
        assert len([q for q in orphans if nsutil.alive(q)]) >= at_least, orphans

        r = subprocess.run([sys.executable, "-m", "emu", "clean"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        line = [ln for ln in r.stdout.splitlines() if ln.startswith(f"Removed run {tag}:")]
        assert line and f": {len(names)} namespaces, " in line[0], r.stdout
        removed = int(line[0].split(", ")[1].split()[0])
        assert removed >= at_least, r.stdout

        assert nsutil.emu_namespaces(tag) == []
        assert tag not in leftovers.marked_pids()  # nothing marked, in any namespace
        assert not [q for q in orphans | set(zygotes) if nsutil.alive(q)]
        assert tag not in leftovers.shm_segments()
        assert not (nsutil.STATE_DIR / tag).exists()
        ns, segs = foreign
        assert (Path("/run/netns") / ns).exists()
        assert all(Path("/dev/shm", s).exists() for s in segs)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        if tag is not None and (nsutil.emu_namespaces(tag) or leftovers.marked_pids().get(tag)
                                or (nsutil.STATE_DIR / tag).exists()):
            subprocess.run([sys.executable, "-m", "emu", "clean", "--run", tag], cwd=ROOT,
                           capture_output=True, timeout=120)
