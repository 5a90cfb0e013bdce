"""Ring AllReduce over the emulated RDMA NICs (book ch.14, "ring AllReduce step by step").

The buffer of every rank is cut into N chunks. ReduceScatter, N-1 steps: at step s rank
r sends chunk (r - s) mod N to rank r+1 and adds the chunk it receives, (r - s - 1) mod
N, from rank r-1; afterwards rank r owns the fully reduced chunk (r + 1) mod N.
AllGather, N-1 steps: at step s rank r sends chunk (r + 1 - s) mod N and stores chunk
(r - s) mod N. Every rank sends and receives 2(N-1)/N x S bytes.

The ring is rail-aware, as NCCL builds it: rail 1 through all hosts, then rail 2 back,
... so inter-host hops stay on one rail (RDMA WRITE with immediate over the fabric) and
the hops between two GPUs of one host use shared memory ("NVLink", no QP).

The workers are played by this process (one thread per rank) through
`traffic.nic_client`, like `traffic.workloads.rdma`; the torch.distributed backend is a
later step. Reduce-scatter data lands in a scratch area after the buffer; all-gather
data lands directly at its chunk offset in the successor's buffer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from emu.timedil import TimeDilation
from traffic.nic_client import CM_PORT, NicClient
from traffic.verbs import WCOpcode, WCStatus


def ring_order(fabric: Any) -> list[str]:
    """Rail-aware ring: rail 1 over hosts 1..H, rail 2 over hosts H..1, ..."""
    hosts = sorted({g.host for g in fabric.gpus.values()}, key=lambda h: int(h[1:]))
    rails = sorted({g.rail for g in fabric.gpus.values()})
    order = []
    for i, r in enumerate(rails):
        for h in (hosts if i % 2 == 0 else hosts[::-1]):
            order.append(f"{h}g{r}")
    return order


def chunk_bounds(count: int, n: int) -> list[tuple[int, int]]:
    """Element ranges of n chunks (the first count % n chunks one element longer)."""
    base, extra = divmod(count, n)
    out, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def schedule(n: int) -> list[dict]:
    """Per step: phase and, per rank, the chunk sent to r+1 and the chunk received."""
    steps = []
    for s in range(n - 1):
        steps.append({"phase": "reduce-scatter",
                      "send": [(r - s) % n for r in range(n)],
                      "recv": [(r - s - 1) % n for r in range(n)]})
    for s in range(n - 1):
        steps.append({"phase": "all-gather",
                      "send": [(r + 1 - s) % n for r in range(n)],
                      "recv": [(r - s) % n for r in range(n)]})
    return steps


def bus_bandwidth(size_bytes: int, seconds_model: float, n: int) -> tuple[float, float]:
    """nccl-tests: (algbw, busbw) in bit/s; busbw = algbw x 2(n-1)/n for AllReduce."""
    alg = size_bytes * 8 / seconds_model
    return alg, alg * 2 * (n - 1) / n


@dataclass
class Rank:
    """One rank's verbs objects and buffer."""

    gpu: str
    nic: NicClient
    pd: int
    cq: int
    mr: Any
    data: np.ndarray  # view of the buffer part of the MR
    qp_next: int | None = None  # QP to the successor (fabric hop)
    qp_prev: int | None = None  # QP from the predecessor (fabric hop)
    remote_next: Any = None
    pending: list = None  # receive completions seen while waiting for a send one

    def __post_init__(self) -> None:
        self.pending = []


def allreduce(fabric: Any, sockets: dict[str, str], size: int, dtype: str = "float32",
              seed: int = 1, timeout: float = 600.0) -> dict:
    """Ring AllReduce (sum) of `size` bytes per rank over the NICs; checks the result
    against a local reference and reports time, algbw and busbw in model units."""
    td = TimeDilation(fabric.tdf)
    order = ring_order(fabric)
    n = len(order)
    dt = np.dtype(dtype)
    count = size // dt.itemsize
    bounds = chunk_bounds(count, n)
    max_chunk = max(e - s for s, e in bounds) * dt.itemsize
    rng = np.random.default_rng(seed)
    inputs = [(rng.standard_normal(count).astype(dt) if dt.kind == "f"
               else rng.integers(-1000, 1000, count).astype(dt)) for _ in range(n)]
    expected = np.sum(inputs, axis=0, dtype=dt) if dt.kind != "f" else np.sum(
        np.array(inputs, dtype=np.float64), axis=0)
    host = {g: fabric.gpus[g].host for g in order}
    ranks: list[Rank] = []
    steps_out: list[dict] = []
    try:
        for i, g in enumerate(order):
            nic = NicClient(sockets[g])
            pd = nic.alloc_pd()
            mr = nic.reg_mr(pd, count * dt.itemsize + max_chunk)
            ranks.append(Rank(g, nic, pd, nic.create_cq(), mr,
                              np.frombuffer(mr.buf, dtype=dt, count=count)))
            ranks[-1].data[:] = inputs[i]
        fabric_hop = [host[order[r]] != host[order[(r + 1) % n]] for r in range(n)]
        for r in range(n):  # successors listen first, then predecessors connect
            nxt = (r + 1) % n
            if fabric_hop[r]:
                b = ranks[nxt]
                b.qp_prev = b.nic.create_qp(b.pd, b.cq)
                b.nic.post_recv(b.qp_prev, list(range(1, 2 * n)))
                b.nic.listen(b.qp_prev, CM_PORT, b.mr)
        for r in range(n):
            nxt = (r + 1) % n
            if fabric_hop[r]:
                a = ranks[r]
                a.qp_next = a.nic.create_qp(a.pd, a.cq)
                a.remote_next = a.nic.connect(a.qp_next, fabric.gpus[order[nxt]].ip,
                                              CM_PORT, a.mr)
        for r in range(n):
            if ranks[r].qp_prev is not None:
                ranks[r].nic.wait_connected(ranks[r].qp_prev)
        tx0 = {g: _nic_tx(ranks[i]) for i, g in enumerate(order)}
        barrier = threading.Barrier(n)
        errors: list[str] = []
        plan = schedule(n)
        t_start = time.monotonic()
        times = [[0.0, 0.0] for _ in plan]

        def worker(r: int) -> None:
            me, nxt = ranks[r], ranks[(r + 1) % n]
            scratch_off = count * dt.itemsize
            try:
                for s, st in enumerate(plan):
                    rs = st["phase"] == "reduce-scatter"
                    c0, c1 = bounds[st["send"][r]]
                    nbytes = (c1 - c0) * dt.itemsize
                    dst_off = scratch_off if rs else c0 * dt.itemsize
                    barrier.wait()
                    if r == 0:
                        times[s][0] = time.monotonic()
                    if me.qp_next is not None:
                        me.nic.post_write(me.qp_next, s + 1, me.mr, c0 * dt.itemsize, nbytes,
                                          me.remote_next, remote_offset=dst_off, imm=s + 1)
                        wc = _wait_send(me, timeout)
                        if wc.status is not WCStatus.SUCCESS:
                            raise RuntimeError(f"{me.gpu} step {s}: {wc.status.value}")
                    else:  # same host: shared memory ("NVLink")
                        nxt.mr.buf[dst_off:dst_off + nbytes] = \
                            me.mr.buf[c0 * dt.itemsize:c0 * dt.itemsize + nbytes]
                    if me.qp_prev is not None:
                        _wait_recv(me, timeout)
                    barrier.wait()
                    if rs:  # add what arrived from r-1 into my copy of that chunk
                        d0, d1 = bounds[st["recv"][r]]
                        got = np.frombuffer(me.mr.buf, dtype=dt, count=d1 - d0, offset=scratch_off)
                        me.data[d0:d1] += got
                        del got  # release the view of the shared memory at once
                    barrier.wait()
                    if r == 0:
                        times[s][1] = time.monotonic()
            except Exception as exc:  # report, and free the others from the barrier
                errors.append(f"{me.gpu}: {exc}")
                barrier.abort()

        threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        if any(t.is_alive() for t in threads):
            barrier.abort()
            errors.append(f"timed out after {timeout:g} s")
        elapsed = time.monotonic() - t_start
        tx = {g: _nic_tx(ranks[i]) - tx0[g] for i, g in enumerate(order)}
        results = [r.data.copy() for r in ranks]
    finally:
        for rk in ranks:
            for q in (rk.qp_next, rk.qp_prev):
                if q is not None:
                    try:
                        rk.nic.destroy_qp(q)
                    except Exception:
                        pass
            try:
                rk.nic.dereg_mr(rk.mr)
            except Exception:
                pass
            del rk.data
            try:
                rk.mr.close()
            except BufferError:  # a worker still holds a view: the OS frees it at exit
                pass
            rk.nic.close()
    if dt.kind == "f":
        ok = all(np.allclose(res, expected, rtol=1e-4, atol=1e-4) for res in results)
    else:
        ok = all(np.array_equal(res, expected) for res in results)
    t_model = td.model_time(elapsed)
    alg, bus = bus_bandwidth(size, t_model, n)
    link = fabric.link_of(fabric.gpus[order[0]].host, fabric.gpus[order[0]].nic).model_bps
    for s, (a, b) in enumerate(times):
        for r in range(n):
            steps_out.append({"rank": r, "step": s, "phase": plan[s]["phase"],
                              "t_start_s": td.model_time(a - t_start),
                              "t_end_s": td.model_time(b - t_start)})
    expect_tx = 2 * (n - 1) / n * size
    return {"workload": "allreduce", "ranks": order, "size": size, "dtype": dtype,
            "correct": ok and not errors, "errors": errors, "seconds_lab": elapsed,
            "seconds_model": t_model, "algbw_model_bps": alg, "busbw_model_bps": bus,
            "busbw_link_fraction": bus / link,
            "nic_tx_bytes": tx, "expected_tx_bytes_per_fabric_sender": expect_tx,
            "fabric_hops": [order[r] for r in range(n) if fabric_hop[r]], "steps": steps_out}


def _nic_tx(rk: Rank) -> int:
    c = rk.nic.counters()
    return sum(q.get("tx_bytes", 0) for q in c.get("qps", {}).values())


def _wait_send(me: Rank, timeout: float):
    """The send completion of this step; receive completions that arrive first are kept
    for `_wait_recv` (one CQ serves both QPs of a rank)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for wc in me.nic.poll_cq(me.cq, 4, 0.05):
            if wc.qp_num == me.qp_next and wc.opcode is WCOpcode.RDMA_WRITE:
                return wc
            me.pending.append(wc)
    raise TimeoutError(f"{me.gpu}: no send completion")


def _wait_recv(me: Rank, timeout: float) -> None:
    """The receive completion (write with immediate) of this step from r-1."""
    deadline = time.monotonic() + timeout
    while not me.pending and time.monotonic() < deadline:
        me.pending.extend(me.nic.poll_cq(me.cq, 4, 0.05))
    if not me.pending:
        raise TimeoutError(f"{me.gpu}: no data from its predecessor")
    wc = me.pending.pop(0)
    if wc.status is not WCStatus.SUCCESS:
        raise RuntimeError(f"{me.gpu}: receive {wc.status.value}")


def describe(r: dict) -> str:
    """nccl-tests-style lines for a result of `allreduce`."""
    from emu.timedil import format_rate

    lines = [f"AllReduce (ring, sum) over {len(r['ranks'])} ranks: {' -> '.join(r['ranks'])}",
             f"{'size':>12} {'dtype':>8} {'time (model)':>14} {'algbw':>12} {'busbw':>12} "
             f"{'busbw/link':>10} {'correct':>8}",
             f"{r['size']:>12} {r['dtype']:>8} {r['seconds_model'] * 1e3:>11.3f} ms "
             f"{format_rate(r['algbw_model_bps']):>12} {format_rate(r['busbw_model_bps']):>12} "
             f"{r['busbw_link_fraction']:>10.2f} {str(r['correct']):>8}"]
    exp = r["expected_tx_bytes_per_fabric_sender"]
    for g in r["fabric_hops"]:
        lines.append(f"  {g} NIC sent {r['nic_tx_bytes'][g]} B "
                     f"({r['nic_tx_bytes'][g] / exp:.3f} x 2(N-1)/N x S)")
    for e in r["errors"]:
        lines.append(f"  ERROR {e}")
    return "\n".join(lines)
