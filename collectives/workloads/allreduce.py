"""nccl-tests-style AllReduce on every emulated GPU (book ch.14 "ring AllReduce").

Run by the launcher (`emu run TOPO --workload allreduce --size 1MB,64MB --iters 5`) on
every rank with the "emu" backend (ring AllReduce over the GPU NICs), or with
`--backend gloo` (torch's own, over the frontend's kernel TCP) for comparison. Per size:
warm-up iterations, then timed ones; the time of an iteration is the slowest rank's;
algbw = S / t and busbw = algbw x 2(n-1)/n, in model units (lab time / TDF) and in lab
units. Every rank checks its result against the sum of every rank's input, bit for bit.

The inputs (`rank_input`) are small integers (in eighths for floating types): every
partial sum is exactly representable, so the ring's summation order cannot change a
bit and the check is `torch.equal` for every dtype. Rank r's element i is
base(i) + r with base a seeded pseudo-random integer in [-999, 999]: a lost, doubled
or misplaced contribution changes the element, and the expected sum has a closed form,
n base(i) + n(n-1)/2. base(i) depends only on i mod SPAN (7919 i mod 1999), so an input
and the expected sum are one period of SPAN values, computed once and copied over the
buffer, and the check compares the buffer with that period SPAN elements at a time: no
temporary larger than a period. (The check used to sum every rank's float64 input in
full and compare with allclose: ~0.5 GB per rank at 64 MB, which ran a 32-rank job out
of 24 GB; the integer arithmetic over the whole buffer, a chunk at a time, took half of
the workers' CPU in a rail2x4 AllReduce of 16 MB: docs/PERFORMANCE.md "The workers'
CPU in an AllReduce".)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from collectives.ring import bus_bandwidth
from collectives.workloads.common import init
from emucore.timedil import TimeDilation, format_rate, parse_size


DTYPES = ("float32", "float64", "int32", "int64")


SPAN = 1999  #: base(i) in [-999, 999]; also its period in i


def _base(lo: int, hi: int, seed: int) -> torch.Tensor:
    """base(i) for i in [lo, hi): a seeded pseudo-random integer in [-999, 999] (int64)."""
    i = torch.arange(lo, hi, dtype=torch.int64)
    return (i * 7919 + seed * 1299709) % SPAN - SPAN // 2


def _as(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Integers as `dtype`: eighths of them for floating types (exact)."""
    return (v.to(torch.float64) / 8).to(dtype) if dtype.is_floating_point else v.to(dtype)


def _periods(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` (flat) as whole periods (rows of SPAN elements) and the rest."""
    full = t.numel() // SPAN * SPAN
    return t[:full].view(-1, SPAN), t[full:]


def rank_input(rank: int, count: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """The input of one rank: base(i) + rank, reproducible anywhere from (seed, rank)."""
    period = _as(_base(0, SPAN, seed) + rank, dtype)
    out = torch.empty(count, dtype=dtype)
    rows, rest = _periods(out)
    rows.copy_(period.expand_as(rows))
    rest.copy_(period[:rest.numel()])
    return out


def is_expected_sum(t: torch.Tensor, n: int, seed: int) -> bool:
    """Whether `t` is, bit for bit, the sum of the `n` ranks' `rank_input`s."""
    want = _as(n * _base(0, SPAN, seed) + n * (n - 1) // 2, t.dtype)
    rows, rest = _periods(t.reshape(-1))
    return torch.equal(rows, want.expand_as(rows)) and torch.equal(rest, want[:rest.numel()])


def main(argv: list[str] | None = None) -> int:
    """Entry point (under the launcher's torchrun environment)."""
    ap = argparse.ArgumentParser(prog="collectives.workloads.allreduce", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="64MB", help="bytes per rank, comma list (e.g. 1MB,16MB)")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per size")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations per size")
    ap.add_argument("--dtype", default="float32",
                    help="element type(s), comma list of float32, float64, int32, int64")
    ap.add_argument("--backend", default=os.environ.get("EMU_BACKEND", "emu"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    sizes = [parse_size(s) for s in a.size.split(",") if s]
    dtypes = [d.strip() for d in a.dtype.split(",") if d.strip()]
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"--dtype: {d!r} is not one of {', '.join(DTYPES)}")
    td = TimeDilation.from_env(os.environ)
    init(a.backend)
    try:
        r, n = dist.get_rank(), dist.get_world_size()
        rows = []
        for size, dname in [(s, d) for d in dtypes for s in sizes]:
            dtype = getattr(torch, dname)
            count = max(1, size // torch.tensor([], dtype=dtype).element_size())
            times, ok = [], True
            for it in range(a.warmup + a.iters):
                t = None  # free the last result before making the next input
                t = rank_input(r, count, dtype, a.seed)
                dist.barrier()
                t0 = time.monotonic()
                dist.all_reduce(t)
                dt = torch.tensor([time.monotonic() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                if it >= a.warmup:
                    times.append(float(dt))
                ok &= is_expected_sum(t, n, a.seed)
            okt = torch.tensor([int(ok)])
            dist.all_reduce(okt, op=dist.ReduceOp.MIN)
            lab = sum(times) / len(times)
            alg, bus = bus_bandwidth(count * t.element_size(), td.model_time(lab), n)
            rows.append({"size": count * t.element_size(), "count": count, "dtype": dname,
                         "seconds_lab": lab, "seconds_model": td.model_time(lab),
                         "algbw_model_bps": alg, "busbw_model_bps": bus,
                         "busbw_lab_bps": td.lab_rate(bus),
                         "correct": bool(okt.item()), "iters": a.iters,
                         "warmup": a.warmup})
        if r == 0:
            print(f"AllReduce (sum) over {n} ranks, backend {a.backend}, TDF {td.tdf:g}; "
                  "times are the slowest rank's, averaged")
            print(f"{'size':>12} {'count':>10} {'type':>8} {'time(model)':>13} "
                  f"{'algbw':>11} {'busbw':>11} {'busbw(lab)':>11} {'correct':>8}")
            for w in rows:
                print(f"{w['size']:>12} {w['count']:>10} {w['dtype']:>8} "
                      f"{w['seconds_model'] * 1e3:>10.3f} ms {format_rate(w['algbw_model_bps']):>11} "
                      f"{format_rate(w['busbw_model_bps']):>11} "
                      f"{format_rate(w['busbw_lab_bps']):>11} {str(w['correct']):>8}")
        out = os.environ.get("EMU_RESULT_DIR")
        if out:
            with open(os.path.join(out, f"rank{r}.json"), "w") as f:
                json.dump({"workload": "allreduce", "rank": r, "world_size": n,
                           "backend": a.backend, "ok": all(w["correct"] for w in rows),
                           "rows": rows}, f)
        return 0 if all(w["correct"] for w in rows) else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
