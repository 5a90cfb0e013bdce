"""CPU time and peak memory of the processes a run started, per kind, from /proc
(issue 11: "report each process kind's CPU share" and "the peak RSS of a job").

A `CpuTracker` walks the process tree below emu's own process at every metrics sample
(emu.observe.metrics.Sampler) and keeps, per pid, the CPU seconds (utime + stime of
/proc/<pid>/stat) and the peak resident set (VmHWM of /proc/<pid>/status) last seen.
Resident sets count a page shared by several processes (a library, the pages of
workers forked from one that imported torch) once per process; the proportional set
size (Pss of /proc/<pid>/smaps_rollup) splits it between them, so the sum of a kind's
PSS at one sample is the memory the kind really holds: each sample's sum is taken and
the largest kept (`pss_peak_mb`).
Kinds: the pids emu knows it started (switch agents, RDMA NICs: `known()`), PyTorch
workers (`python -m collectives.worker`), and everything else emu started (its own
process, LLDP speakers, dumpcap, the namespaces' shells) as "other". A child of a
known process has its parent's kind. A process's last interval before it exits (at
most one sampling period) is not seen; nothing of it is lost otherwise.

The tracker runs in emu's own process beside the fabric it measures, at every metrics
sample, so a sample must be cheap: files are read with one `os.read` each (no pathlib),
and smaps_rollup - for which the kernel walks every mapping of the process, under its
mmap lock - only once per `PSS_PERIOD_S` (memory moves slowly; VmHWM, a high-water mark
the kernel keeps, is read at every sample). A sample of a running rail2x4 AllReduce's 45
processes cost 127 ms of CPU before, smaps_rollup most of it (docs/PERFORMANCE.md,
"The sampler's own cost").
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

KINDS = ("agents", "nics", "workers", "other")
PSS_PERIOD_S = 2.0  #: the smallest lab time between two rounds of smaps_rollup
#: a worker's command line holds one of these: its own `python -m collectives.worker`, or,
#: forked from the job's zygote (collectives.zygote, which imported torch once for all
#: of them), the zygote's - which counts as a worker too: it is their shared torch
WORKER_MODULES = (b"collectives.worker", b"collectives.zygote")


def machine_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_stat(text: str) -> tuple[int, float]:
    """(ppid, CPU seconds) from the text of /proc/<pid>/stat (the command name may hold
    spaces and parentheses: fields are counted after its last ')')."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15 (proc(5))
    tick = os.sysconf("SC_CLK_TCK")
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / tick


def _kb(text: str, key: str) -> int:
    """The value of a "Key:   N kB" line of a /proc file; 0 without one."""
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def parse_pss_kb(text: str) -> int:
    """Pss (proportional set size, kB) from the text of /proc/<pid>/smaps_rollup; 0
    without it."""
    return _kb(text, "Pss:")


def parse_hwm_kb(text: str) -> int:
    """VmHWM (peak resident set, kB) from the text of /proc/<pid>/status; 0 without it
    (kernel threads, zombies)."""
    return _kb(text, "VmHWM:")


class CpuTracker:
    """CPU seconds and peak RSS per process kind of everything below `root` (a pid)."""

    def __init__(self, root: int, known: Callable[[], dict[int, str]],
                 proc: Path = Path("/proc"), clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.known = known  # pid -> kind, for the processes emu started itself
        self.proc = Path(proc)
        self.clock = clock
        self.seen: dict[int, tuple[str, float, int]] = {}  # pid -> (kind, cpu_s, hwm_kb)
        #: CPU seconds of the processes already running at start(): only what they use
        #: from then on counts, over the same wall time (imports and set-up are not the run)
        self.base: dict[int, float] = {}
        self.pss_peak_kb: dict[str, int] = {}  # kind -> largest sum of PSS at one sample
        self.pss_t = -math.inf  # when PSS was last summed
        self.t0 = self.t1 = 0.0

    def _read(self, pid: int | str, name: str) -> str | None:
        try:
            fd = os.open(f"{self.proc}/{pid}/{name}", os.O_RDONLY)
        except OSError:  # gone meanwhile
            return None
        try:
            return os.read(fd, 1 << 16).decode(errors="replace")
        except OSError:
            return None
        finally:
            os.close(fd)

    def start(self) -> None:
        """Begin: note the CPU used so far by every process below `root`, and the time."""
        self.t0 = self.t1 = self.clock()
        self.sample()
        self.base = {pid: cpu for pid, (_, cpu, _) in self.seen.items()}

    def sample(self) -> None:
        """Walk the process tree once and update every descendant's figures (PSS only
        when `PSS_PERIOD_S` has passed since it was last summed)."""
        now = self.clock()
        with_pss = now - self.pss_t >= PSS_PERIOD_S
        parent, cpu = {}, {}
        for name in os.listdir(self.proc):
            if not name.isdigit():
                continue
            text = self._read(name, "stat")
            if text:
                parent[int(name)], cpu[int(name)] = parse_stat(text)
        children: dict[int, list[int]] = {}
        for pid, pp in parent.items():
            children.setdefault(pp, []).append(pid)
        known = self.known()
        stack = [(self.root, "other")]
        pss: dict[str, int] = {}
        while stack:
            pid, inherited = stack.pop()
            kind = known.get(pid, inherited)
            if kind == "other" and pid != self.root and self._is_worker(pid):
                kind = "workers"
            if pid in cpu:
                status = self._read(pid, "status")
                hwm = parse_hwm_kb(status) if status else 0
                old = self.seen.get(pid, (kind, 0.0, 0))
                self.seen[pid] = (kind, max(cpu[pid], old[1]), max(hwm, old[2]))
                if with_pss:
                    rollup = self._read(pid, "smaps_rollup")
                    pss[kind] = pss.get(kind, 0) + (parse_pss_kb(rollup) if rollup else 0)
            stack += [(c, kind) for c in children.get(pid, ())]
        if with_pss:
            self.pss_t = now
            for kind, kb in pss.items():
                self.pss_peak_kb[kind] = max(kb, self.pss_peak_kb.get(kind, 0))
            self.pss_peak_kb["total"] = max(sum(pss.values()), self.pss_peak_kb.get("total", 0))
        self.t1 = now

    def _is_worker(self, pid: int) -> bool:
        cmd = self._read(pid, "cmdline")
        return cmd is not None and any(m.decode() in cmd for m in WORKER_MODULES)

    def report(self, cores: int | None = None) -> dict:
        """{"wall_s", "cores_used", "pss_peak_mb" (all kinds), kind: {"cpu_s", "cores",
        "share", "processes", "rss_peak_mb" (sum of the kind's per-process peaks),
        "rss_peak_max_mb", "pss_peak_mb" (largest sum at one sample)}}: `cores` =
        average cores busy over the run, `share` = of the machine's cores."""
        cores = cores or os.cpu_count() or 1
        wall = max(self.t1 - self.t0, 1e-9)
        out: dict = {"wall_s": round(wall, 3)}
        total = 0.0
        for kind in KINDS:
            rows = [(c - self.base.get(pid, 0.0), h)
                    for pid, (k, c, h) in self.seen.items() if k == kind]
            cpu = sum(c for c, _ in rows)
            total += cpu
            out[kind] = {"cpu_s": round(cpu, 2), "cores": round(cpu / wall, 3),
                         "share": round(cpu / wall / cores, 3), "processes": len(rows),
                         "rss_peak_mb": round(sum(h for _, h in rows) / 1024, 1),
                         "rss_peak_max_mb": round(max((h for _, h in rows), default=0) / 1024, 1),
                         "pss_peak_mb": round(self.pss_peak_kb.get(kind, 0) / 1024, 1)}
        out["cores_used"] = round(total / wall, 3)
        out["pss_peak_mb"] = round(self.pss_peak_kb.get("total", 0) / 1024, 1)
        return out


def line(cpu: dict | None) -> str | None:
    """The terminal line of a report (None without one): each kind's average cores
    busy and process count, then the peak memory (PSS) per kind."""
    if not isinstance(cpu, dict) or "cores_used" not in cpu:
        return None
    kinds = [k for k in KINDS if isinstance(cpu.get(k), dict) and cpu[k].get("processes")]
    busy = ", ".join(f"{k} {cpu[k]['cores']:.2f} ({cpu[k]['processes']})" for k in kinds)
    text = f"Processes: cores busy on average (count): {busy}; {cpu['cores_used']:.2f} in all"
    if cpu.get("pss_peak_mb"):
        mem = ", ".join(f"{k} {cpu[k].get('pss_peak_mb', 0):,.0f}" for k in kinds)
        text += f". Memory peak (PSS): {cpu['pss_peak_mb']:,.0f} MB ({mem})"
    return text
