"""What one timed sleep and wake-up costs the sleeping thread: `python -m emu.bench.wakecost`.

Issue 30: on the compiled path the NICs' loops (traffic.nic.datapath.Nic.run) are most of
a run's CPU, and most of a NIC's CPU per frame is its wake-ups, not its Python
(docs/PERFORMANCE.md "The NIC's loop per data frame"). This bench sleeps a thread again
and again for a fixed time with one wait primitive and one timer slack (prctl(2)
PR_SET_TIMERSLACK; the kernel's hrtimer slack, Documentation/timers/hrtimers.rst) and
reports, per wake-up:

* its thread CPU (CLOCK_THREAD_CPUTIME_ID, `time.thread_time`: the scheduler's exact
  runtime of the thread, sum_exec_runtime) and the user / system split of
  getrusage(RUSAGE_THREAD) (sampled at the tick: a split, not a second measure);
* "over 0": that CPU minus the same loop's with a zero timeout (the call that does not
  sleep) - what the sleep and the wake-up themselves add;
* context switches (voluntary / involuntary, getrusage);
* lateness: the wake-up's monotonic time after its deadline (mean, p99);
* "work": the thread CPU of a fixed small piece of Python run right after each wake-up
  (`_work`), and "again" the same piece run once more at once: the first run's excess
  over the second is the code running on cold caches after the sleep, apart from the
  system call.

Wait primitives (select(2), poll(2), epoll(7), epoll_pwait2(2), timerfd_create(2),
clock_nanosleep(2)): `select` (microsecond timeout, fd set built per call), `poll` and
`epoll` (Python 3.11 rounds their timeout up to a millisecond), `epoll_pwait2`
(nanosecond timeout, persistent registration; ctypes), `timerfd+epoll` (an absolute
CLOCK_MONOTONIC timerfd in a persistent epoll set, epoll_wait without timeout: timerfd
ignores the slack), `timerfd` (settime + a blocking read) and `sleep` (time.sleep,
clock_nanosleep). Configurations alternate in rounds, so a loaded machine loads all alike.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import resource
import select
import socket
import threading
import time
from dataclasses import dataclass, field

from emucore.rawsock import tighten_timer_slack

PRIMITIVES = ("select", "poll", "epoll", "epoll_pwait2", "timerfd+epoll", "timerfd", "sleep")
#: the primitives whose timeout the timer slack widens (a timerfd's does not)
SLACKED = ("select", "poll", "epoll", "epoll_pwait2", "sleep")
CLOCK_MONOTONIC, TFD_CLOEXEC, TFD_TIMER_ABSTIME = 1, 0o2000000, 1  # linux/time.h, timerfd.h


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def timespec(t: float) -> tuple[int, int]:
    """Seconds as (tv_sec, tv_nsec), rounded up to a nanosecond (a wait never ends
    early), not negative."""
    ns = max(0, math.ceil(t * 1e9))
    return ns // 1_000_000_000, ns % 1_000_000_000


@dataclass
class Sample:
    """Sums over one configuration's wake-ups (all rounds)."""

    n: int = 0
    cpu_s: float = 0.0
    utime_s: float = 0.0
    stime_s: float = 0.0
    nvcsw: int = 0
    nivcsw: int = 0
    work_s: float = 0.0
    work2_s: float = 0.0
    late_s: list = field(default_factory=list)

    def add(self, o: "Sample") -> None:
        """Add another chunk's sums."""
        self.n += o.n
        self.cpu_s += o.cpu_s
        self.utime_s += o.utime_s
        self.stime_s += o.stime_s
        self.nvcsw += o.nvcsw
        self.nivcsw += o.nivcsw
        self.work_s += o.work_s
        self.work2_s += o.work2_s
        self.late_s.extend(o.late_s)


def percentile(xs: list, q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of xs; 0.0 when empty."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def per_wake(s: Sample, zero: Sample | None) -> dict:
    """One table row, microseconds per wake-up; `zero` is the same primitive's zero-timeout
    sample (its CPU per call is subtracted for "over0_us", None where there is none)."""
    n = max(1, s.n)
    cpu = s.cpu_s / n * 1e6
    return {"wakes": s.n, "cpu_us": cpu,
            "over0_us": cpu - zero.cpu_s / max(1, zero.n) * 1e6 if zero is not None else None,
            "user_us": s.utime_s / n * 1e6, "sys_us": s.stime_s / n * 1e6,
            "vcsw": s.nvcsw / n, "ivcsw": s.nivcsw / n, "work_us": s.work_s / n * 1e6,
            "work2_us": s.work2_s / n * 1e6,
            "late_mean_us": sum(s.late_s) / n * 1e6, "late_p99_us": percentile(s.late_s, 99) * 1e6}


class Waiter:
    """One wait primitive: `wait(deadline)` sleeps until the monotonic `deadline`; nothing
    is ever readable on its socket."""

    def __init__(self, kind: str) -> None:
        if kind not in PRIMITIVES:
            raise ValueError(f"unknown wait primitive {kind!r}; one of {PRIMITIVES}")
        self.kind = kind
        self.r, self.w = socket.socketpair()
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.ep = self.tfd = None
        if kind == "poll":
            self.p = select.poll()
            self.p.register(self.r, select.POLLIN)
        if kind in ("epoll", "epoll_pwait2", "timerfd+epoll"):
            self.ep = select.epoll()
            self.ep.register(self.r, select.EPOLLIN)
            self.events = (ctypes.c_uint8 * 12 * 4)()  # struct epoll_event (packed, x86-64)
        if kind.startswith("timerfd"):
            self.tfd = self.libc.timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC)
            if self.tfd < 0:
                raise OSError(ctypes.get_errno(), "timerfd_create")
            if self.ep is not None:
                self.ep.register(self.tfd, select.EPOLLIN)
        self.wait = getattr(self, "_" + kind.replace("+", "_"))

    def close(self) -> None:
        """Release the descriptors."""
        for s in (self.r, self.w):
            s.close()
        if self.ep is not None:
            self.ep.close()
        if self.tfd is not None:
            os.close(self.tfd)

    def _select(self, deadline: float) -> None:
        select.select([self.r], [], [], max(0.0, deadline - time.monotonic()))

    def _poll(self, deadline: float) -> None:
        self.p.poll(math.ceil(max(0.0, deadline - time.monotonic()) * 1e3))

    def _epoll(self, deadline: float) -> None:
        self.ep.poll(max(0.0, deadline - time.monotonic()))

    def _epoll_pwait2(self, deadline: float) -> None:
        ts = _Timespec(*timespec(deadline - time.monotonic()))
        self.libc.epoll_pwait2(self.ep.fileno(), self.events, 4, ctypes.byref(ts), None)

    def _arm(self, deadline: float) -> None:
        its = _Itimerspec(_Timespec(0, 0), _Timespec(*timespec(deadline)))
        if deadline <= 0:  # a zero it_value disarms: expire now instead
            its.it_value.tv_nsec = 1
        self.libc.timerfd_settime(self.tfd, TFD_TIMER_ABSTIME, ctypes.byref(its), None)

    def _timerfd_epoll(self, deadline: float) -> None:
        self._arm(deadline)  # settime zeroes the expiry count: no read needed
        self.ep.poll(-1)

    def _timerfd(self, deadline: float) -> None:
        self._arm(deadline)
        os.read(self.tfd, 8)

    def _sleep(self, deadline: float) -> None:
        time.sleep(max(0.0, deadline - time.monotonic()))


def _work(d: dict) -> int:
    """A fixed piece of Python, about what the NIC's loop does between two waits in kind."""
    x = 0
    for i in range(64):
        d[i & 15] = d.get(i & 15, 0) + i
        x += i * 3 & 7
    return x


def chunk(kind: str, dt: float, slack_ns: int, n: int) -> Sample:
    """n sleeps of `dt` seconds with `kind` at timer slack `slack_ns`, in a fresh thread."""
    out: list = []

    def body() -> None:
        tighten_timer_slack(slack_ns)
        w, d, late = Waiter(kind), {}, []
        work = work2 = 0.0
        r0, c0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time()
        for _ in range(n):
            deadline = time.monotonic() + dt
            w.wait(deadline if dt > 0 else 0.0)
            late.append(time.monotonic() - deadline if dt > 0 else 0.0)
            t = time.thread_time()
            _work(d)
            t2 = time.thread_time()
            _work(d)
            work, work2 = work + t2 - t, work2 + time.thread_time() - t2
        c1, r1 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD)
        w.close()
        out.append(Sample(n, c1 - c0, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime,
                          r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, work, work2,
                          late))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out[0]


def configs(kinds: list[str], sleeps_us: list[float], slacks_ns: list[int]) -> list[tuple]:
    """(kind, sleep us, slack ns) to measure: every kind at every sleep (0 included, the
    baseline of "over 0"); several slacks only where the slack applies (SLACKED), the
    others at the first slack given."""
    sleeps = sorted(set([0.0, *sleeps_us]))
    return [(k, us, ns) for k in kinds for ns in (slacks_ns if k in SLACKED else slacks_ns[:1])
            for us in sleeps]


def count_for(sleep_us: float, seconds: float, least: int = 20) -> int:
    """Wake-ups a chunk of `seconds` of sleeping holds (zero-sleep chunks: as for 20 us)."""
    return max(least, int(seconds / (max(sleep_us, 20.0) * 1e-6)))


def measure(cfgs: list[tuple], rounds: int, seconds: float, progress=None) -> dict:
    """Every configuration's Sample, `rounds` alternating chunks of ~`seconds` each."""
    res = {c: Sample() for c in cfgs}
    for r in range(rounds):
        for c in cfgs:
            res[c].add(chunk(c[0], c[1] * 1e-6, c[2], count_for(c[1], seconds)))
            if progress is not None:
                progress(r, c)
    return res


def rows(res: dict) -> list[tuple]:
    """(kind, sleep us, slack ns, per_wake row) in order, "over 0" against the same kind
    and slack at sleep 0."""
    return [(k, us, ns, per_wake(s, res.get((k, 0.0, ns)) if us > 0 else None))
            for (k, us, ns), s in res.items()]


def _fmt(v, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def table(rs: list[tuple]):
    """The rich Table of `rows`."""
    from rich.table import Table

    t = Table(title="one timed sleep + wake-up, per wake-up (thread CPU, getrusage)")
    for h in ("wait", "slack ns", "sleep us", "wakes", "CPU us", "over 0", "user", "sys",
              "vcsw", "ivcsw", "work us", "again", "late mean", "late p99"):
        t.add_column(h, justify="left" if h == "wait" else "right")
    for k, us, ns, w in rs:
        t.add_row(k, str(ns), f"{us:g}", str(w["wakes"]), _fmt(w["cpu_us"]), _fmt(w["over0_us"]),
                  _fmt(w["user_us"]), _fmt(w["sys_us"]), _fmt(w["vcsw"], 2), _fmt(w["ivcsw"], 2),
                  _fmt(w["work_us"]), _fmt(w["work2_us"]), _fmt(w["late_mean_us"]),
                  _fmt(w["late_p99_us"]))
    return t


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    from rich.console import Console

    ap = argparse.ArgumentParser(prog="python -m emu.bench.wakecost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wait", default=",".join(PRIMITIVES), help="primitives, comma-separated")
    ap.add_argument("--us", default="50,300,1000,3000,5000", help="sleep lengths, us")
    ap.add_argument("--slack-ns", default="1000,1,50000",
                    help="timer slacks, ns (the first for timerfd, which ignores it)")
    ap.add_argument("--seconds", type=float, default=0.1, help="sleeping per chunk, s")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    a = ap.parse_args(argv)
    kinds = [k for k in a.wait.split(",") if k]
    cfgs = configs(kinds, [float(x) for x in a.us.split(",")],
                   [int(x) for x in a.slack_ns.split(",")])
    res = measure(cfgs, a.rounds, a.seconds)
    con = Console(width=max(150, Console().width))
    con.print(table(rows(res)))
    con.print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {os.uname().release}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
