"""Reachability of every GPU NIC pair through the fabric, and proof of the path taken.

Each ordered pair (src GPU, dst GPU) is pinged from the source's host, sourced from
its NIC address (so the per-NIC routing table sends it through its own rail). The
reply TTL tells the number of routed hops: 64 for intra-rail (layer 2 in the rail
VLAN, ch.13), 63 between two rails of one switch, 61 for cross-rail (Rail -> Spine ->
Rail, three routers), 59 between pods (Rail -> Spine -> Super-Spine -> Spine -> Rail,
five routers, ch.13 Fig 13-9). `expected_hops` derives the number from the fabric's
shortest switch path, so partially connected leaf-spines (longer paths) are judged too.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import time
from dataclasses import dataclass

from topologies.model import Fabric

PING_RE = re.compile(r"(\d+) packets transmitted, (\d+) received")
TTL_RE = re.compile(r"ttl=(\d+)")
TIME_RE = re.compile(r"time=([\d.]+) ms")


@dataclass(frozen=True)
class PairResult:
    """Outcome of pinging one ordered GPU pair."""

    src: str
    dst: str
    sent: int
    received: int
    ttl: int | None
    rtt_ms: float | None

    @property
    def ok(self) -> bool:
        """At least one echo reply came back."""
        return self.received > 0

    @property
    def hops(self) -> int | None:
        """Routed hops on the way back (64 - TTL)."""
        return None if self.ttl is None else 64 - self.ttl


def parse_ping(src: str, dst: str, text: str) -> PairResult:
    """Parse iputils ping output."""
    m = PING_RE.search(text)
    sent, recv = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    ttls = [int(t) for t in TTL_RE.findall(text)]
    rtts = [float(t) for t in TIME_RE.findall(text)]
    return PairResult(src, dst, sent, recv, min(ttls) if ttls else None,
                      min(rtts) if rtts else None)


def expected_hops(fabric: Fabric, src: str, dst: str) -> int | None:
    """Routers a packet crosses between two GPUs: 0 on one rail (switched in its VLAN),
    otherwise the switches on the shortest path between the two rail switches (1 between
    two rails of one switch, 3 for rail -> spine -> rail, 5 between pods); None when the
    pair must not be reachable over the fabric (rail-only designs, ch.13: cross-rail data
    first crosses NVLink to the GPU on the destination rail)."""
    a, b = fabric.gpus[src].rail, fabric.gpus[dst].rail
    if a == b:
        return 0
    hops = fabric.switch_distance(fabric.switch_of_rail(a), fabric.switch_of_rail(b))
    return None if hops is None else hops + 1


def via_fabric(fabric: Fabric, r: PairResult) -> bool:
    """A reply that crossed the fabric: between rails it passed a router (TTL < 64); a
    cross-rail reply with TTL 64 never left the host (two NICs of one host whose links are
    down: the kernel's local table answers), which is no fabric path."""
    same_rail = fabric.gpus[r.src].rail == fabric.gpus[r.dst].rail
    return r.ok and (same_rail or (r.hops or 0) > 0)


def as_expected(fabric: Fabric, r: PairResult) -> bool:
    """Reachable on the expected path, or unreachable where the design says so."""
    exp = expected_hops(fabric, r.src, r.dst)
    return (not r.ok) if exp is None else (r.ok and r.hops == exp)


def check_all(fnet, count: int = 3, timeout_s: float = 20.0, pairs=None,
              wait_s: float = 2.0) -> list[PairResult]:
    """Ping every ordered GPU pair (in parallel) and return the results: one shell per
    source host runs its pings side by side, each line tagged with its pair's number
    (one process per host, also where the host is on another server, emu.cluster.net).
    Each ping waits `wait_s` for its last reply (ping -W), all of them `timeout_s`."""
    fab = fnet.fabric
    if pairs is None:
        gpus = fab.gpu_list()
        pairs = [(a.name, b.name) for a in gpus for b in gpus if a is not b]
    by_host: dict[str, list[int]] = {}
    for i, (src, _dst) in enumerate(pairs):
        by_host.setdefault(fab.gpus[src].host, []).append(i)
    procs = []
    for host, idx in by_host.items():
        jobs = []
        for i in idx:
            g, d = fab.gpus[pairs[i][0]], fab.gpus[pairs[i][1]]
            argv = ["ping", "-n", "-c", str(count), "-i", "0.2", "-W", str(math.ceil(wait_s)),
                    "-I", g.ip, d.ip]
            jobs.append(f"{shlex.join(argv)} 2>&1 | sed 's/^/{i} /' &")
        procs.append(fnet.host(host).popen(["sh", "-c", " ".join(jobs) + " wait"],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    texts: dict[int, list[str]] = {i: [] for i in range(len(pairs))}
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        for line in out.decode(errors="replace").splitlines():
            num, _, rest = line.partition(" ")
            if num.isdigit() and int(num) in texts:
                texts[int(num)].append(rest)
    return [parse_ping(src, dst, "\n".join(texts[i])) for i, (src, dst) in enumerate(pairs)]


@dataclass(frozen=True)
class Verdicts:
    """The reachability results of a run, sorted by what they mean."""

    results: tuple[PairResult, ...]
    ok: tuple[PairResult, ...]  # got replies
    bad: tuple[PairResult, ...]  # not as the design expects (emu.observe.reach.as_expected)
    by_design: tuple[PairResult, ...]  # pairs the design gives no fabric path
    wrong_path: tuple[PairResult, ...]  # replied, but over an unexpected path

    @property
    def passed(self) -> bool:
        """Pairs were checked and every one was as expected."""
        return bool(self.results) and not self.bad


def judge(fabric: Fabric, results: list[PairResult]) -> Verdicts:
    """Sort ping results against the fabric's design."""
    ok = tuple(r for r in results if r.ok)
    bad = tuple(r for r in results if not as_expected(fabric, r))
    by_design = tuple(r for r in results if expected_hops(fabric, r.src, r.dst) is None)
    return Verdicts(tuple(results), ok, bad, by_design, tuple(r for r in ok if r in bad))


def min_rtt_ms(fabric: Fabric, results, same_rail: bool) -> float | None:
    """The smallest RTT among pairs on one rail (same_rail) or across rails."""
    vals = [r.rtt_ms for r in results if r.rtt_ms is not None
            and (fabric.gpus[r.src].rail == fabric.gpus[r.dst].rail) == same_rail]
    return min(vals) if vals else None
