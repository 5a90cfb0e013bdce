"""Paced streams in one process each or sharing processes: `python -m emu.bench.mergecost`.

Issue 30: a NIC process sends a paced frame on a wake-up of its own (one a frame at TDF
5000-20000, docs/PERFORMANCE.md "The NIC's loop per data frame"), and what a wake-up
costs is mostly the code touched afterwards on cold caches ("What a wake-up costs"). A
fabric runs one such process per NIC (8 on rail2x4, 32 on rail8x4). This bench asks what
sharing would save: `--streams` deadline streams, each due every `--period-us` from a
random phase (a NIC sending at its pacer rate), each event a fixed piece of Python
(`_work`, ~10 us warm, about a frame's handling around the C), run

* as one process per stream (today's NICs),
* as `--per` streams in each process (e.g. the two NICs of a host), and
* as all streams in one process,

each optionally with wake-ups on a grid (`--grid-us`: a wake-up serves every event due
by the next grid point; an event waits at most one grid step, as the NIC's receive
polls do, traffic.nic.wakeup), and reports the CPU per event (RUSAGE_CHILDREN, user +
system, the processes' whole CPU), events per wake-up and the mean wait past the due
time. Configurations alternate in rounds, so a loaded machine loads all alike.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import resource
import select
import socket
import time
from dataclasses import dataclass


class Schedule:
    """Deadlines of `streams` streams each due every `period` from `phases` (pure: the
    caller gives the time). `wake_at(grid)` is when to wake: the earliest deadline, or
    with a grid, the first grid point at or after it; `due(now)` pops every stream due
    by `now` and returns (stream, its due time), each stream's next deadline one period
    later."""

    def __init__(self, phases: list[float], period: float) -> None:
        if period <= 0:
            raise ValueError(f"period must be > 0, got {period!r}")
        self.period = period
        self.heap = [(t, i) for i, t in enumerate(phases)]
        heapq.heapify(self.heap)

    def wake_at(self, grid: float = 0.0) -> float:
        t = self.heap[0][0]
        if grid > 0:
            k = -(-t // grid)  # ceil without float drift for exact multiples
            return k * grid
        return t

    def due(self, now: float) -> list[tuple[int, float]]:
        out = []
        while self.heap and self.heap[0][0] <= now:
            t, i = heapq.heappop(self.heap)
            out.append((i, t))
            heapq.heappush(self.heap, (t + self.period, i))
        return out


def _work(d: dict, payload: bytes) -> int:
    """A fixed piece of Python touching a working set: ~100 dict reads and one 4 KB copy
    (a frame's bytes), about what a NIC does per frame around its C."""
    s = 0
    for i in range(0, 4000, 40):
        s += d[i]
    d[s % 4000] = s & 0xFFFF
    b = bytearray(4170)
    b[100:4100] = payload
    return s


@dataclass
class Result:
    events: int = 0
    wakes: int = 0
    wait_s: float = 0.0  # summed time past each event's due time

    def add(self, o: "Result") -> None:
        self.events += o.events
        self.wakes += o.wakes
        self.wait_s += o.wait_s


def loop(streams: int, period: float, grid: float, duration: float, seed: int) -> Result:
    """One process's loop: `streams` streams, sleeping in select (as the NIC does) until
    the next wake-up, serving every deadline of the first `duration` seconds (however
    late a busy machine makes it: the count is the schedule's, not the machine's)."""
    rng = random.Random(seed)
    d, payload = {i: i for i in range(4000)}, bytes(4000)
    r, _w = socket.socketpair()
    t0 = time.monotonic()
    end = t0 + duration
    sch = Schedule([t0 + rng.random() * period for _ in range(streams)], period)
    res = Result()
    while sch.heap[0][0] <= end:  # every deadline up to `end` is served, however late
        dt = sch.wake_at(grid) - time.monotonic()
        if dt > 0:
            select.select([r], [], [], dt)
        now = time.monotonic()
        got = sch.due(min(now, end))
        res.wakes += 1
        for _, due in got:
            _work(d, payload)
            res.wait_s += now - due
        res.events += len(got)
    return res


def run(procs: int, per: int, period: float, grid: float, duration: float,
        seed: int) -> tuple[Result, float]:
    """`procs` forked processes of `per` streams each; their summed Result and CPU s."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rd, wr = os.pipe()
    pids = []
    for k in range(procs):
        pid = os.fork()
        if pid == 0:  # the child: measure, report, leave without the parent's cleanup
            try:
                x = loop(per, period, grid, duration, seed * 1000 + k)
                os.write(wr, f"{x.events} {x.wakes} {x.wait_s!r}\n".encode())
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(wr)
    with os.fdopen(rd) as f:
        lines = f.read().split("\n")
    for p in pids:
        os.waitpid(p, 0)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = Result()
    for line in filter(None, lines):
        e, w, s = line.split()
        total.add(Result(int(e), int(w), float(s)))
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return total, cpu


def layouts(streams: int, per: int) -> list[tuple[int, int]]:
    """(processes, streams each): one per stream, `per` each, all in one; no repeats."""
    if streams < 1 or per < 1 or streams % per:
        raise ValueError(f"--per must divide --streams ({streams}), got {per}")
    out = [(streams, 1), (streams // per, per), (1, streams)]
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.bench.mergecost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=8, help="paced streams (NICs), default 8")
    ap.add_argument("--per", type=int, default=2, help="streams per process in the middle "
                    "layout (a host's NICs), default 2")
    ap.add_argument("--period-us", default="3300,830",
                    help="each stream's period, us, comma-separated (default 3300,830: a "
                         "4154-byte frame at a 200 G link's lab rate at TDF 20000 and 5000)")
    ap.add_argument("--grid-us", default="0,100",
                    help="wake-up grids, us, comma-separated; 0 = wake at each deadline")
    ap.add_argument("--seconds", type=float, default=3.0, help="per configuration and round")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    ap.add_argument("--seed", type=int, default=1, help="the streams' phases")
    a = ap.parse_args(argv)
    try:
        periods = [float(x) * 1e-6 for x in a.period_us.split(",") if x]
        grids = [float(x) * 1e-6 for x in a.grid_us.split(",") if x]
        lays = layouts(a.streams, a.per)
    except ValueError as exc:
        ap.error(str(exc))
    if any(p <= 0 for p in periods) or any(g < 0 for g in grids):
        ap.error("--period-us must be > 0 and --grid-us >= 0")
    cfgs = [(p, g, n, k) for p in periods for g in grids for n, k in lays]
    acc = {c: (Result(), [0.0]) for c in cfgs}
    for rnd in range(a.rounds):
        for c in cfgs:
            p, g, n, k = c
            print(f"  round {rnd + 1}/{a.rounds}: period {p * 1e6:g} us, grid {g * 1e6:g} us, "
                  f"{n} process(es) x {k} stream(s) ...", flush=True)
            res, cpu = run(n, k, p, g, a.seconds, a.seed + rnd)
            acc[c][0].add(res)
            acc[c][1][0] += cpu
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"{a.streams} paced streams: CPU per event (all processes, user + sys)")
    for h in ("period us", "grid us", "processes x streams", "events", "events / wake-up",
              "CPU us / event", "vs one each", "mean wait us"):
        t.add_column(h, justify="right")
    for p in periods:
        for g in grids:
            base = None
            for n, k in lays:
                res, cpu = acc[(p, g, n, k)][0], acc[(p, g, n, k)][1][0]
                per_ev = cpu / res.events * 1e6 if res.events else float("nan")
                base = per_ev if base is None else base
                t.add_row(f"{p * 1e6:g}", f"{g * 1e6:g}", f"{n} x {k}", str(res.events),
                          f"{res.events / res.wakes:.2f}" if res.wakes else "-",
                          f"{per_ev:.1f}", f"{per_ev / base:.2f}",
                          f"{res.wait_s / res.events * 1e6:.1f}" if res.events else "-")
    con = Console(width=max(120, Console().width))
    con.print(t)
    con.print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {os.uname().release}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
