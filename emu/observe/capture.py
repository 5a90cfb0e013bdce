"""Per-interface packet captures of a run, for Wireshark (dumpcap in each namespace).

Captures run in the kernel (BPF + dumpcap, from Debian's wireshark packages), not in the
Python data plane, so they cost the agents nothing. Each file is bounded
(`-a filesize:`) so a long run cannot fill the disk; frames are cut at `snaplen` bytes
(default 512: every header Wireshark needs for RoCEv2 — Eth/IPv4/UDP/BTH/RETH/AETH —
and for PFC/LLDP fits; payloads are truncated). Timestamps are lab time: model time =
lab time / TDF (the run's topology.json states the TDF).

Selection (`--pcap`): ``all`` (every interface of every node), ``hosts`` (the GPU NICs,
the default), ``none``, or a comma list of ``node:ifname``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from topologies.model import FRONTEND, Fabric

log = logging.getLogger("emu.observe.capture")

DEFAULT_SNAPLEN = 512
DEFAULT_BOUND_KB = 20_000  # per file
STOP_SETTLE_S = 0.6  #: > dumpcap's 250 ms read timeout: its last block reaches the file


def select(fabric: Fabric, spec: str) -> list[tuple[str, str]]:
    """(node, ifname) pairs to capture for a `--pcap` value; ValueError names bad parts."""
    spec = (spec or "").strip()
    if spec in ("", "none"):
        return []
    if spec == "all":
        return [(p.node, p.ifname) for p in fabric.ports.values()
                if fabric.nodes[p.node].kind != FRONTEND]
    if spec == "hosts":
        return [(g.host, g.nic) for g in fabric.gpu_list()]
    out = []
    for part in spec.split(","):
        node, _, ifname = part.strip().partition(":")
        if (node, ifname) not in fabric.ports:
            raise ValueError(f"--pcap: no interface {part.strip()!r} (use node:ifname, e.g. "
                             f"rail1:eth1 or h1:nic1; or all, hosts, none)")
        out.append((node, ifname))
    return out


@dataclass
class Captures:
    """Running dumpcap processes of one run."""

    directory: Path
    snaplen: int = DEFAULT_SNAPLEN
    bound_kb: int = DEFAULT_BOUND_KB
    procs: dict[tuple[str, str], subprocess.Popen] = field(default_factory=dict)
    #: (node, ifname) -> seconds to subtract from its timestamps (a capture on another
    #: server whose clock is off ours, emu.cluster.net): applied by editcap at stop
    shifts: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()  # dumpcap runs in a namespace

    def path(self, node: str, ifname: str) -> Path:
        """The pcap file of one interface."""
        return self.directory / f"{node}-{ifname}.pcap"

    def start(self, fnet, targets: list[tuple[str, str]]) -> None:
        """Start one bounded dumpcap per interface, inside the node's namespace."""
        if not targets:
            return
        exe = shutil.which("dumpcap")
        if exe is None:
            raise RuntimeError("dumpcap not found (Debian package wireshark-common / tshark; "
                               "./setup.sh installs it)")
        self.directory.mkdir(parents=True, exist_ok=True)
        for node, ifname in targets:
            argv = [exe, "-q", "-P", "-i", ifname, "-s", str(self.snaplen),
                    "-a", f"filesize:{self.bound_kb}", "-w"]
            runner = fnet.node(node)
            if hasattr(runner, "stream"):  # on another server: the pcap streams here
                with open(self.path(node, ifname), "wb") as out:
                    self.procs[(node, ifname)] = runner.stream(["dumpcap", *argv[1:], "-"], out)
                shift = fnet.clock_shift(node)
                if shift:
                    self.shifts[(node, ifname)] = shift
                continue
            self.procs[(node, ifname)] = runner.popen(
                argv + [str(self.path(node, ifname))], stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE)
        # dumpcap writes the file header once the capture is armed
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(self.path(*t).exists() and self.path(*t).stat().st_size > 0
                   for t in targets):
                break
            time.sleep(0.05)
        time.sleep(0.5)

    def stop(self) -> dict[str, dict]:
        """Stop all captures; return per-file size and whether the bound truncated it.

        First wait out dumpcap's read timeout: libpcap hands packets over a block at a
        time (TPACKET_V3, a block released when full or after the timeout, 250 ms in
        dumpcap), and a dumpcap terminated before then loses the last block - measured:
        of 3 pings across h4's NIC, 1 in 6 runs kept only the first."""
        out = {}
        if any(p.poll() is None for p in self.procs.values()):
            time.sleep(STOP_SETTLE_S)
        for (node, ifname), p in self.procs.items():
            if p.poll() is None and p.stdin is not None:  # streamed: it stops on EOF
                p.stdin.close()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            path = self.path(node, ifname)
            if (node, ifname) in self.shifts and path.exists():
                shifted = path.with_suffix(".shifted")
                subprocess.run(["editcap", "-t", f"{-self.shifts[(node, ifname)]:.9f}",
                                str(path), str(shifted)], check=True, capture_output=True,
                               timeout=120)
                shifted.replace(path)
            size = path.stat().st_size if path.exists() else 0
            out[path.name] = {"bytes": size,
                              "truncated": size >= self.bound_kb * 1000 * 0.99}
        self.procs.clear()
        return out
