"""How the data path's processes are scheduled (issue 30): switch agents and RDMA NICs run
under the kernel's real-time round-robin policy (SCHED_RR) at a low real-time priority,
so the wake-up of a frame's deadline preempts an ordinary process (a PyTorch worker, emu's
own process and its metrics sampler, a shell) at once instead of waiting in the run queue
behind it.

Why (docs/PERFORMANCE.md "Real-time scheduling of agents and NICs"): at TDF 1000 a 3:1
incast on rail2x4 fell behind with 1.8-2.8 % of rail1's actions over 1.33 us on the
2-core VM, where the whole run used under half the cores; the same run with agents and
NICs under SCHED_RR had 0.65-0.77 %, and the receiving NIC 0.05 % instead of 0.5-0.8 %:
their lateness was mostly time spent runnable behind other processes, which the ordinary
scheduler (CFS) lets run out their slice, whatever their nice value (-10 did not help).

But a run's PyTorch workers stay ordinary processes, which real-time agents and NICs
starve: at TDF 1000 on the 2-core VM a 16 MB AllReduce (agents, NICs and workers using
1.7 of the 2 cores) took 1.92 ms model under SCHED_RR, where it takes 1.15 ms at TDF
4000 - the workers, behind the data path for the CPU, posted late. The guard then said
"kept up"; it now judges the workers' wake-ups too (emu.observe.guard: their p99 was
75 us from their NICs' completions) and says LOST. So `auto`, the default, is `rr` only for a run without workers
(flows, `write`, `incast`) and `normal` for one with them (`resolve`).

`emu run --sched` / `emu lab run --sched` (auto, rr or normal) set `EMU_SCHED`, resolved
to `rr` or `normal`, for every process of the run (a process started otherwise, with
`auto` or nothing, runs `normal`). Each agent and NIC applies it to itself at start, before
it starts a thread (its threads inherit it, so a control thread holding the NIC's lock or
the GIL is never behind the loop that waits for it), and reports the policy it really has
(`current`, in its counters: "sched"), since the kernel may refuse it (no CAP_SYS_NICE,
a cgroup without real-time runtime): the process then runs `normal` and says why. The
kernel's real-time throttling (/proc/sys/kernel/sched_rt_runtime_us, 95 % of each second
by default) leaves ordinary processes their share even when the data path is saturated.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "MODES", "DEFAULT", "PRIORITY", "mode", "resolve", "apply", "current",
           "header"]

ENV = "EMU_SCHED"
MODES = ("auto", "rr", "normal")
DEFAULT = "auto"
#: the real-time priority (1-99): above every ordinary process, below the kernel's own
#: real-time threads (interrupt threads and the like run at 50)
PRIORITY = 10


def mode(value: str | None = None) -> str:
    """`value`, else $EMU_SCHED, else auto; ValueError naming the variable if unknown."""
    m = value if value is not None else os.environ.get(ENV) or DEFAULT
    if m not in MODES:
        raise ValueError(f"{ENV}: {m!r} is not one of {', '.join(MODES)}")
    return m


def resolve(m: str, workers: bool) -> str:
    """What mode `m` means for a run that has PyTorch workers or not: `auto` is `rr`
    without workers, `normal` with them."""
    if m == "auto":
        return "normal" if workers else "rr"
    return mode(m)


def apply(value: str | None = None) -> str:
    """Schedule the calling thread (and the threads it starts later) as `mode` says (`auto`
    unresolved: normal); the outcome, as `current` reads it back, with the kernel's reason
    if it refused."""
    if mode(value) != "rr":  # normal also when an RT parent's policy was inherited
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return current()
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(PRIORITY))
    except OSError as exc:
        return f"{current()} (SCHED_RR refused: {exc.strerror})"
    return current()


def current() -> str:
    """The calling thread's policy: "rr <priority>", "fifo <priority>" or "normal"."""
    policy = os.sched_getscheduler(0)
    if policy in (os.SCHED_RR, os.SCHED_FIFO):
        name = "rr" if policy == os.SCHED_RR else "fifo"
        return f"{name} {os.sched_getparam(0).sched_priority}"
    return "normal"


def header(asked: str, workers: bool) -> str:
    """The run header's line for `--sched asked` in a run with PyTorch workers or not."""
    why = ("" if asked != "auto" else
           " (auto: the run has PyTorch workers, which real-time agents and NICs starve)"
           if workers else " (auto: no PyTorch workers in this run)")
    if resolve(asked, workers) == "normal":
        return f"Scheduling: switch agents and NICs as ordinary processes{why}"
    return (f"Scheduling: switch agents and NICs SCHED_RR priority {PRIORITY}{why}: their "
            "wake-ups preempt emu itself; summary.json says what each got")
