"""The NIC's data-path loop per data frame, without root: `python -m emu.bench.nicloop`.

Issue 30 (compiled data path; the budget is in docs/PERFORMANCE.md "The NIC's loop"): two `traffic.nic.datapath.Nic`s of rail2x4 (h1g1
and h4g2, the topology's link rate and TDF) joined by an AF_UNIX datagram socketpair in
place of their raw sockets, each running its own `Nic.run` loop in its own process (as
in a run: no GIL shared; h4g2's is forked once both are set up); h1g1 WRITEs
`frames` MTU-sized packets of one QP to h4g2, paced by its pacer at the link's lab rate,
h4g2 places them and ACKs (book ch.9 Figures 9-5/9-6). Per data frame: each loop's
thread CPU (`time.thread_time`, the kernel's per-thread account - not wall clock, so a
loaded machine inflates it less) and its wake-ups (select calls, `Nic.wakeups`); and the
NICs' fidelity meters (lag p99 and max, model s: the sender's pacer and the ACKs' and the
receiver's data frames' waits from their arrival, `traffic.nic.wakeup`), so a change that
saves CPU by acting late shows it. `--profile` adds a cProfile of the sender's loop;
`--both` makes h4g2 WRITE as much to h1g1 at the same time (each NIC sends and receives,
as in an AllReduce ring); each loop runs until both WRITEs are done. `--split` splits each
loop's thread CPU per data frame into the wait (`select`), `Nic.receive` and `Nic.transmit`
(with their C) and the rest (`Nic.run` and `Nic.step`'s own Python and what it calls
besides), with the loop thread's minor page faults per frame (getrusage RUSAGE_THREAD); its
own timing (two `time.thread_time` per stage) lands in the rest.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing
import pstats
import resource
import select
import socket
import statistics
import threading
import time
from multiprocessing import resource_tracker, shared_memory

from topologies import load
from traffic.nic import datapath
from traffic.nic.datapath import Nic
from traffic.nic.nicconfig import NicConfig
from traffic.nic.wakeup import enable_rx_stamps

PRESET, SENDER, RECEIVER = "rail2x4", "h1g1", "h4g2"
MTU = 4096


def _nic(fab, gpu: str, sock: socket.socket, grid: bool) -> Nic:
    n = Nic(NicConfig.for_gpu(fab, gpu, "/nonexistent", seed=1, dcqcn="paper"), open_sockets=False)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    n.raw = sock
    n.rx_stamps = enable_rx_stamps(sock)  # AF_UNIX stamps a datagram when it is sent
    n.grid = n.grid if grid else 0.0
    return n


def _mr(nic: Nic, size: int) -> tuple:
    shm = shared_memory.SharedMemory(create=True, size=size)
    pd = nic.alloc_pd()
    mr = nic.reg_mr(pd, shm.name, size, 3)
    resource_tracker.register(shm._name, "shared_memory")  # the NIC untracked it (one process)
    cq = nic.create_cq()
    return shm, mr, cq, nic.qps[nic.create_qp(pd, cq, cq)]


STAGES = ("wait", "receive", "transmit")  #: what `--split` times apart (the rest: the loop)


class _Select:
    """`select` for traffic.nic.datapath (`--split`): select.select, its thread CPU summed."""

    def __init__(self, spent: dict) -> None:
        self.spent = spent

    def select(self, *args):
        t0 = time.thread_time()
        try:
            return select.select(*args)
        finally:
            self.spent["wait"] += time.thread_time() - t0


def _timed(fn, spent: dict, stage: str):
    """`fn` with its thread CPU summed into spent[stage] (`--split`)."""
    def timed(*args):
        t0 = time.thread_time()
        try:
            return fn(*args)
        finally:
            spent[stage] += time.thread_time() - t0
    return timed


def _loop(nic: Nic, out: dict, prof: cProfile.Profile | None, split: bool = False) -> None:
    """Nic.run in this thread; its CPU seconds into out (with `split`: per stage, "split",
    and the thread's minor page faults, "minflt")."""
    spent = dict.fromkeys(STAGES, 0.0)
    if split:  # this process runs one loop: datapath's select is its own
        datapath.select = _Select(spent)
        nic.receive = _timed(nic.receive, spent, "receive")
        nic.transmit = _timed(nic.transmit, spent, "transmit")
    f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    t0 = time.thread_time()
    if prof is not None:
        prof.enable()
    nic.run()
    if prof is not None:
        prof.disable()
    out["cpu_s"] = time.thread_time() - t0
    out["minflt"] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
    if split:
        datapath.select = select
        del nic.receive, nic.transmit
        out["split"] = {**spent, "rest": out["cpu_s"] - sum(spent.values())}


def _serve(nic: Nic, conn, cq: int | None, until: float, split: bool = False) -> None:
    """The forked receiver: its loop in a thread until told to stop (and, with its own
    WRITE's completion queue `cq`, that WRITE done or `until` passed); reports its CPU."""
    out: dict = {}
    t = threading.Thread(target=_loop, args=(nic, out, None, split))
    t.start()
    conn.recv()
    done = _complete(nic, cq, until)
    nic.running = False
    nic.wake()
    t.join()
    conn.send({"cpu_s": out["cpu_s"], "wakeups": nic.wakeups, "fidelity": nic.meter.snapshot(),
               "done": done, "minflt": out["minflt"], "split": out.get("split")})


def _complete(nic: Nic, cq: int | None, until: float) -> bool:
    """Wait for one completion on `cq` (none to wait for: True) until `until`."""
    while cq is not None and time.monotonic() < until:
        with nic.lock:
            if nic.cqs[cq].poll(1):
                return True
        time.sleep(0.005)
    return cq is None


def _write(nic: Nic, qp, local: dict, remote: dict, size: int) -> None:
    with nic.lock:
        nic.post_send(qp.qpn, [{"wr_id": 1, "local_addr": local["addr"], "length": size,
                                "lkey": local["lkey"], "remote_addr": remote["addr"],
                                "rkey": remote["rkey"]}])


def once(frames: int, tdf: float, profile: bool = False, rx_grid: bool = True,
         both: bool = False, split: bool = False) -> dict:
    """One WRITE of `frames` MTU packets from h1g1 to h4g2; per-frame CPU and wake-ups.
    The sender wakes for each frame's pacer time (`traffic.nic.wakeup`: deadlines are not
    on the grid); without `rx_grid` the receiver wakes for each arrival (no grid:
    `traffic.nic.wakeup`). With `both`, h4g2 also WRITEs as much to h1g1 at the same
    time, as each NIC of an AllReduce ring sends and receives ("tx" is then h1g1, "rx"
    h4g2; per frame each way). With `split`, each loop's CPU per frame by stage
    ("tx_split_us_per_frame", "rx_split_us_per_frame": wait, receive, transmit, rest)."""
    fab = load(PRESET, tdf=tdf)
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a, b = _nic(fab, SENDER, sa, True), _nic(fab, RECEIVER, sb, rx_grid)
    size = frames * MTU
    (sha, ma, ca, qa), (shb, mb, cb, qb) = _mr(a, size), _mr(b, size)
    a.to_rtr(qa, qb.qpn, qb.start_psn, b.cfg.ip, MTU)
    a.to_rts(qa)
    b.to_rtr(qb, qa.qpn, qa.start_psn, a.cfg.ip, MTU)
    b.to_rts(qb)
    prof = cProfile.Profile() if profile else None
    out: dict = {}
    conn, child_conn = multiprocessing.Pipe()
    t0 = time.monotonic()
    deadline = t0 + 10 + 3 * frames * a.slack
    if both:
        _write(b, qb, mb, ma, size)  # before the fork: the child's loop starts with it
    child = multiprocessing.get_context("fork").Process(
        target=_serve, args=(b, child_conn, cb if both else None, deadline, split))
    child.start()
    thread = threading.Thread(target=_loop, args=(a, out, prof, split))
    thread.start()
    _write(a, qa, ma, mb, size)
    done = _complete(a, ca, deadline)
    wall = time.monotonic() - t0
    conn.send("stop")  # h4g2 stops once its own WRITE is done; h1g1 ACKs it until then
    rx = conn.recv()
    child.join()
    a.running = False
    a.wake()
    thread.join()
    fid = a.meter.snapshot()
    res = {"frames": frames, "tdf": tdf, "both": both, "done": done and rx["done"], "wall_s": wall,
           "frame_lab_us": MTU * 8 / a.link_lab_bps * 1e6,
           "tx_cpu_us_per_frame": out["cpu_s"] / frames * 1e6,
           "rx_cpu_us_per_frame": rx["cpu_s"] / frames * 1e6,
           "tx_wakeups_per_frame": a.wakeups / frames, "rx_wakeups_per_frame": rx["wakeups"] / frames,
           "tx_lag_p99_model_s": fid["p99_lag_model_s"], "tx_lag_max_model_s": fid["max_lag_model_s"],
           "rx_lag_p99_model_s": rx["fidelity"]["p99_lag_model_s"],
           "rx_lag_max_model_s": rx["fidelity"]["max_lag_model_s"], "rx_lag_count": rx["fidelity"]["count"],
           "tx_frames": a.c["tx_frames"], "rx_acks": a.c["rx_frames"],
           "tx_minflt_per_frame": out["minflt"] / frames, "rx_minflt_per_frame": rx["minflt"] / frames}
    if split:
        res["tx_split_us_per_frame"] = {k: v / frames * 1e6 for k, v in out["split"].items()}
        res["rx_split_us_per_frame"] = {k: v / frames * 1e6 for k, v in rx["split"].items()}
    for n, mr, shm in ((a, ma, sha), (b, mb, shb)):
        n.dereg_mr(mr["lkey"])
        shm.close()
        shm.unlink()
    for n in (a, b):  # their wake-up pairs and sa / sb, their raw sockets
        n.close()
    if prof is not None:
        st = pstats.Stats(prof)
        st.sort_stats("tottime").print_stats(25)
    return res


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per repetition and the medians."""
    ap = argparse.ArgumentParser(prog="python -m emu.bench.nicloop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--tdf", type=float, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile the sender's loop")
    ap.add_argument("--no-rx-grid", action="store_true", help="the receiver wakes per arrival")
    ap.add_argument("--both", action="store_true",
                    help="both NICs WRITE at once (each sends and receives)")
    ap.add_argument("--split", action="store_true",
                    help="each loop's CPU by stage: wait, receive, transmit, the rest")
    a = ap.parse_args(argv)
    runs = []
    for _ in range(a.reps):
        runs.append(once(a.frames, a.tdf, a.profile, not a.no_rx_grid, a.both, a.split))
        print(json.dumps(runs[-1]), flush=True)
    keys = [k for k, v in runs[0].items() if isinstance(v, float)]
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    for side in ("tx", "rx"):
        if a.split:
            med[f"{side}_split_us_per_frame"] = {
                k: statistics.median(r[f"{side}_split_us_per_frame"][k] for r in runs)
                for k in (*STAGES, "rest")}
    print(json.dumps({"median": med}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
