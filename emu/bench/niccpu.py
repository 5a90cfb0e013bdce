"""Where a fabric NIC's CPU goes per data frame, and a C floor: `python -m emu.bench.niccpu`.

Issue 30: on rail2x4 the NICs' loops (traffic.nic.datapath.Nic.run, C stages in
traffic/fast/) are most of a run's CPU, ~170 us per data frame at TDF 5000. Two modes:

* `profile --tdf T`: runs `python -m emu run rail2x4 --workload allreduce --size 16MB
  --pcap none --no-plots --tdf T --out DIR` and, once its NIC processes are up, `perf record -e cpu-clock -g -p <their pids>` (a software
  clock: this VM has no hardware counters; cpu-clock samples a thread only while it runs,
  so a sample is CPU time) until the run ends. Each sample is put in one bucket by its
  call chain (`classify`): in the kernel by the system call or entry it is under (the
  wait, sendto with the veth's delivery into the peer namespace apart, recvmsg, futex,
  other calls, page faults, interrupts), in user space by the object its leaf is in
  (the CPython interpreter, libc, the NIC's C modules traffic/fast/_*.so, other CPython
  extension modules, the vDSO). The NICs are found as the run's descendants named "nic"
  (`nic_pids`). Per NIC: the samples' CPU per data frame
  (last_counters.json `closed_qps_tx_packets`), and beside it the run's own figures
  (summary.json: the NICs' CPU, kept up, p99 lag).
* `floor --period-us P`: a minimal C program (emu/bench/pacefloor.c, built with cc) that
  sleeps to an absolute deadline every P us and sends one 4154-byte frame on an
  AF_PACKET socket over a veth into another namespace, where a sink reads (and with
  `--echo`, returns) each frame; its loop thread's CPU per frame. P = 830 us is a
  4154-byte frame at 200 Gb/s at TDF 5000, 332 us at TDF 2000, 166 us at TDF 1000.

Both build namespaces: run them under `flock /tmp/emu-fabric.lock`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

#: kernel entry points, leaf-first: the first one met names the bucket
WAIT_CALLS = ("__x64_sys_pselect6", "__x64_sys_select", "__x64_sys_poll", "__x64_sys_ppoll",
              "__x64_sys_epoll_wait", "__x64_sys_epoll_pwait", "__x64_sys_epoll_pwait2",
              "__x64_sys_clock_nanosleep", "__x64_sys_nanosleep", "core_sys_select",
              "do_sys_poll", "do_epoll_wait")
#: with the inner __sys_* names: the compiler may fold __x64_sys_X into its caller
SEND_CALLS = ("__x64_sys_sendto", "__x64_sys_sendmsg", "__x64_sys_sendmmsg", "__sys_sendto",
              "__sys_sendmsg")
RECV_CALLS = ("__x64_sys_recvmsg", "__x64_sys_recvfrom", "__x64_sys_recvmmsg", "__sys_recvmsg",
              "__sys_recvfrom")
#: the way back to user space after a call (rescheduling, rseq, signals)
RETURN = ("exit_to_user_mode_loop", "syscall_exit_to_user_mode", "irqentry_exit_to_user_mode")
IRQ_ENTRIES = ("asm_sysvec_apic_timer_interrupt", "asm_common_interrupt",
               "asm_sysvec_call_function_single", "asm_sysvec_reschedule_ipi",
               "asm_sysvec_call_function", "asm_sysvec_irq_work")
FAULT_ENTRIES = ("asm_exc_page_fault",)
#: under a send: the frame's receive in the peer namespace (veth -> backlog -> softirq)
PEER_RX = ("__netif_receive_skb", "__netif_receive_skb_core", "process_backlog", "net_rx_action",
           "veth_poll", "packet_rcv", "ip_rcv", "tpacket_rcv")
#: under a wait: the context switch around the sleep
SWITCH = ("__schedule", "schedule", "finish_task_switch", "finish_task_switch.isra.0")
#: the NIC's compiled modules (traffic/fast/*.c)
C_MODULES = ("_nicrx", "_nictx", "_nicstep", "_rc", "_dcqcn")


def _dso_name(dso: str) -> str:
    return dso.rsplit("/", 1)[-1]


def classify(frames: list[tuple[str, str]]) -> str:
    """The bucket of one sample from its call chain, leaf first, as (symbol, object)
    pairs of `perf script` (the object "[kernel.kallsyms]" for the kernel's)."""
    if not frames:
        return "unknown"
    sym, dso = frames[0]
    if dso == "[kernel.kallsyms]":
        syms = [s for s, d in frames if d == "[kernel.kallsyms]"]
        for i, s in enumerate(syms):
            if s in IRQ_ENTRIES:
                return "kernel: interrupt"
            if s in FAULT_ENTRIES:
                return "kernel: page fault"
            if s in WAIT_CALLS:
                under = syms[:i]
                return ("kernel: wait, context switch" if any(u in SWITCH for u in under)
                        else "kernel: wait, call")
            if s in SEND_CALLS:
                under = syms[:i]
                return ("kernel: send, peer's receive" if any(u in PEER_RX for u in under)
                        else "kernel: send, own")
            if s in RECV_CALLS:
                return "kernel: recv"
            if s == "__x64_sys_futex":
                return "kernel: futex"
            if s in RETURN:
                return "kernel: return to user"
            if s.startswith("__x64_sys_"):
                return "kernel: other call (" + s[len("__x64_sys_"):] + ")"
        if syms[0] in ("do_syscall_64", "entry_SYSCALL_64_after_hwframe", "entry_SYSCALL_64"):
            return "kernel: call entry"
        return "kernel: other"
    name = _dso_name(dso)
    if name.startswith("libpython") or name.startswith("python3"):
        return "user: interpreter"
    if name.split(".")[0] in C_MODULES:
        return "user: NIC C modules"
    if ".cpython-" in name:
        return "user: CPython extensions"
    if name.startswith("libc.") or name.startswith("libm."):
        return "user: libc"
    if name == "[vdso]":
        return "user: vdso"
    return "user: other"


def parse_script(text: str):
    """Samples of `perf script -F comm,pid,tid,period,ip,sym,dso` (with -g call chains):
    yields (pid, tid, period, frames) per sample, frames leaf first as (symbol, object)."""
    head, frames = None, []
    for line in text.splitlines() + [""]:
        if not line.strip():
            if head is not None:
                yield head[0], head[1], head[2], frames
            head, frames = None, []
        elif line[0] in " \t":
            parts = line.strip().split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            if rest.endswith(")") and " (" in rest:
                sym, dso = rest[:-1].rsplit(" (", 1)
            else:
                sym, dso = rest, ""
            frames.append((sym.split("+0x")[0], dso))
        else:
            f = line.split()
            pt = next(x for x in f if "/" in x and x.split("/")[0].isdigit())
            pid, tid = (int(x) for x in pt.split("/"))
            period = int(f[f.index(pt) + 1])
            head = (pid, tid, period)


@dataclass
class Split:
    """Per process: sampled ns per bucket, and per thread."""
    buckets: dict[int, Counter] = field(default_factory=lambda: defaultdict(Counter))
    threads: dict[int, Counter] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, pid: int, tid: int, period: int, frames) -> None:
        self.buckets[pid][classify(frames)] += period
        self.threads[pid][tid] += period


def split_of(text: str) -> Split:
    s = Split()
    for pid, tid, period, frames in parse_script(text):
        s.add(pid, tid, period, frames)
    return s


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def nic_pids(root: int) -> dict[str, int]:
    """The run's NIC processes: descendants of process `root` named "nic" (forked from the
    fabric's fork server, emu.realise.forkserver, which names each child by its module),
    each by its GPU from the log it holds open (`nic-<gpu>.log`)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != "nic":
                continue
        except OSError:
            continue
        p = int(d.name)
        while p > 1 and p != root:
            p = _ppid(p)
        if p != root:
            continue
        try:
            links = [os.readlink(f) for f in (d / "fd").iterdir()]
        except OSError:
            continue
        for l in links:
            b = l.rsplit("/", 1)[-1]
            if b.startswith("nic-") and b.endswith(".log"):
                found[b[4:-4]] = int(d.name)
    return found


def profile(tdf: float, out: Path, nics: int, freq: int, extra: list[str]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "emu", "run", "rail2x4", "--workload", "allreduce", "--size",
           "16MB", "--pcap", "none", "--no-plots", "--tdf", str(tdf), "--out", str(out / "run"),
           *extra]
    log = open(out / "run.log", "w")
    run = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    pids: dict[str, int] = {}
    while run.poll() is None and len(pids) < nics:
        time.sleep(0.1)
        pids = nic_pids(run.pid)
    perf = None
    if run.poll() is None:
        time.sleep(0.3)  # the NICs' threads start
        perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-g",
                                 "-o", str(out / "perf.data"), "-p",
                                 ",".join(str(p) for p in pids.values())],
                                stdout=subprocess.DEVNULL, stderr=open(out / "perf.log", "w"))
    rc = run.wait()
    if perf is not None:
        if perf.poll() is None:
            perf.send_signal(signal.SIGINT)
        perf.wait()
    return analyse(out, tdf, rc, pids)


def analyse(out: Path, tdf: float, rc: int, pids: dict[str, int]) -> dict:
    """Splits OUT/perf.data per NIC and writes OUT/niccpu.json."""
    text = subprocess.run(["perf", "script", "-i", str(out / "perf.data"), "-F",
                           "comm,pid,tid,period,ip,sym,dso"], capture_output=True,
                          text=True).stdout
    sp = split_of(text)
    summ = json.loads((out / "run" / "summary.json").read_text())
    counters = json.loads((out / "run" / "last_counters.json").read_text())
    res = {"tdf": tdf, "rc": rc, "pids": pids, "fidelity": summ.get("fidelity"),
           "cpu": summ.get("cpu"), "nics": {}}
    for name, pid in pids.items():
        frames = counters.get(name, {}).get("closed_qps_tx_packets", 0)
        b = sp.buckets.get(pid, Counter())
        res["nics"][name] = {"pid": pid, "data_frames": frames, "sampled_ns": dict(b),
                             "threads_ns": dict(sp.threads.get(pid, {}))}
    (out / "niccpu.json").write_text(json.dumps(res, indent=1))
    return res


def report(res: dict) -> str:
    """A table of the sampled CPU per data frame by bucket: all NICs' samples over all their
    data frames (a NIC that mostly receives costs CPU for frames another NIC sent)."""
    tot, frames = Counter(), 0
    for n in res["nics"].values():
        tot.update(n["sampled_ns"])
        frames += n["data_frames"]
    all_ns = sum(tot.values())
    fid, cpu = res.get("fidelity") or {}, (res.get("cpu") or {}).get("nics", {})
    lines = [f"TDF {res['tdf']:g}: rc {res['rc']}, kept up {fid.get('kept_up')}, p99 "
             f"{fid.get('p99_lag_model_us', float('nan')):.2f} us, worst {fid.get('worst')}; "
             f"NICs' CPU {cpu.get('cpu_s')} s ({cpu.get('cores')} cores); data frames "
             f"{frames}; sampled {all_ns / 1e9:.2f} s = "
             f"{all_ns / 1e3 / max(frames, 1):.1f} us/data frame",
             "| bucket | us/data frame | share |", "|---|---:|---:|"]
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k} | {v / 1e3 / max(frames, 1):.1f} | {100 * v / max(all_ns, 1):.1f} % |")
    groups = Counter()
    for k, v in tot.items():
        g = k.split(":")[0] if k.startswith("kernel") else k.split(": ")[1]
        groups[g] += v
    lines.append("groups: " + ", ".join(f"{k} {100 * v / max(all_ns, 1):.1f} %"
                                        for k, v in groups.most_common()))
    return "\n".join(lines)


# --- the floor -------------------------------------------------------------------------------

SRC = Path(__file__).with_name("pacefloor.c")


def build_floor(d: Path) -> Path:
    exe = d / "pacefloor"
    subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(SRC)], check=True)
    return exe


def parse_floor(line: str) -> dict[str, float]:
    """`frames F cpu_us_per_frame C ...` -> {"frames": F, "cpu_us_per_frame": C, ...}."""
    f = line.split()
    return {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}


def _sh(*a: str) -> None:
    subprocess.run(a, check=True)


def floor(periods: list[float], waits: list[str], echos: list[int], touch_mb: int,
          seconds: float, rounds: int, length: int, perf_dir: Path | None = None) -> list[dict]:
    """Each configuration once a round; with `perf_dir`, the sender runs under `perf record
    -e cpu-clock -g` and its row gets the samples' buckets (`classify`) per frame, its
    set-up (the buffer's first touch) included."""
    tag = f"npf{os.getpid()}"
    a, b = tag + "a", tag + "b"
    rows = []
    with tempfile.TemporaryDirectory() as d:
        exe = build_floor(Path(d))
        try:
            _sh("ip", "netns", "add", a)
            _sh("ip", "netns", "add", b)
            _sh("ip", "link", "add", "pfa", "netns", a, "type", "veth", "peer", "name", "pfb",
                "netns", b)
            for ns, dev, mac in ((a, "pfa", "02:00:00:00:00:01"), (b, "pfb", "02:00:00:00:00:02")):
                _sh("ip", "-n", ns, "link", "set", dev, "address", mac, "mtu", "9000", "up")
            for r in range(rounds):
                for p in periods:
                    for w in waits:
                        for e in echos:
                            n = max(100, int(seconds * 1e6 / p))
                            sink = subprocess.Popen(["ip", "netns", "exec", b, str(exe), "sink",
                                                     "pfb", str(seconds + 1.5), str(e)],
                                                    stdout=subprocess.PIPE, text=True)
                            time.sleep(0.3)
                            cmd = ["ip", "netns", "exec", a, str(exe), "send", "pfa", str(p),
                                   str(n), str(length), w, str(touch_mb)]
                            data = None
                            if perf_dir is not None:
                                perf_dir.mkdir(parents=True, exist_ok=True)
                                data = perf_dir / f"floor-{p:g}-{w}-{e}-{r}.data"
                                cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "1000",
                                       "-g", "-o", str(data), "--", *cmd]
                            o = subprocess.run(cmd, capture_output=True, text=True,
                                               check=True).stdout
                            sink.wait()
                            row = {"round": r, "period_us": p, "wait": w, "echo": e,
                                   **parse_floor(o.strip().splitlines()[-1])}
                            if data is not None:
                                sp = split_of(subprocess.run(
                                    ["perf", "script", "-i", str(data), "-F",
                                     "comm,pid,tid,period,ip,sym,dso"], capture_output=True,
                                    text=True).stdout)
                                tot = sum(sp.buckets.values(), Counter())
                                row["perf_us_per_frame"] = {k: round(v / 1e3 / n, 2)
                                                            for k, v in tot.most_common()}
                            rows.append(row)
                            print(json.dumps(row), flush=True)
        finally:
            subprocess.run(["ip", "netns", "del", a], stderr=subprocess.DEVNULL)
            subprocess.run(["ip", "netns", "del", b], stderr=subprocess.DEVNULL)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.bench.niccpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("profile", help="perf the NICs of an AllReduce on rail2x4")
    p.add_argument("--tdf", type=float, default=5000)
    p.add_argument("--out", type=Path, required=True, help="directory for the run and perf.data")
    p.add_argument("--nics", type=int, default=8, help="NIC processes to wait for (rail2x4: 8)")
    p.add_argument("--freq", type=int, default=1000, help="perf's sampling rate, Hz")
    p.add_argument("--split-only", action="store_true", help="split OUT/perf.data again (the pids from OUT/niccpu.json)")
    f = sub.add_parser("floor", help="the paced C sender's CPU per frame")
    f.add_argument("--period-us", default="830,332,166")
    f.add_argument("--wait", default="sleep,poll", help="sleep (clock_nanosleep), poll (ppoll)")
    f.add_argument("--echo", default="0,1", help="0: the sink reads; 1: it returns each frame")
    f.add_argument("--touch-mb", type=int, default=16, help="payload copied from a buffer this big")
    f.add_argument("--seconds", type=float, default=3.0)
    f.add_argument("--rounds", type=int, default=2)
    f.add_argument("--len", type=int, default=4154)
    f.add_argument("--perf", type=Path, help="record the sender with perf into this directory")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `finally` removes the namespaces
    if a.mode == "profile":
        if a.split_only:
            old = json.loads((a.out / "niccpu.json").read_text())
            res = analyse(a.out, old["tdf"], old["rc"], old["pids"])
        else:
            res = profile(a.tdf, a.out, a.nics, a.freq, [])
        print(report(res))
        return 0
    rows = floor([float(x) for x in a.period_us.split(",")], a.wait.split(","),
                 [int(x) for x in a.echo.split(",")], a.touch_mb, a.seconds, a.rounds, a.len,
                 a.perf)
    print("| period us | wait | echo | CPU us/frame (rounds) | late mean us | nvcsw/frame |")
    print("|---:|---|---:|---|---:|---:|")
    key = lambda r: (r["period_us"], r["wait"], r["echo"])  # noqa: E731
    for k in dict.fromkeys(key(r) for r in rows):
        rs = [r for r in rows if key(r) == k]
        print(f"| {k[0]:g} | {k[1]} | {k[2]} | "
              + ", ".join(f"{r['cpu_us_per_frame']:.1f}" for r in rs)
              + f" | {sum(r['late_mean_us'] for r in rs) / len(rs):.0f}"
              + f" | {sum(r['nvcsw'] for r in rs) / sum(r['frames'] for r in rs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
