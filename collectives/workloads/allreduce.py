"""nccl-tests-style AllReduce on every emulated GPU (book ch.14 "ring AllReduce").

Run by the launcher (`emu run TOPO --workload allreduce --size 1MB,64MB --iters 5`) on
every rank with the "emu" backend (ring AllReduce over the GPU NICs), or with
`--backend gloo` (torch's own, over the frontend's kernel TCP) for comparison. Per size:
warm-up iterations, then timed ones; the time of an iteration is the slowest rank's;
algbw = S / t and busbw = algbw x 2(n-1)/n, in model units (lab time / TDF) and in lab
units. Every rank checks its result against the sum it computes itself from every
rank's seeded input (exact for integers).
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
from fabric.timedil import TimeDilation, format_rate, parse_size


DTYPES = ("float32", "float64", "int32", "int64")


def rank_input(rank: int, count: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """The input of one rank: reproducible anywhere from (seed, rank)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(count, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1000, (count,), generator=g, dtype=dtype)


def expected_sum(n: int, count: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """The reference result, computed locally (float64 for floats)."""
    acc = torch.zeros(count, dtype=torch.float64 if dtype.is_floating_point else dtype)
    for r in range(n):
        acc += rank_input(r, count, dtype, seed).to(acc.dtype)
    return acc


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
            want = expected_sum(n, count, dtype, a.seed)
            times, ok = [], True
            for it in range(a.warmup + a.iters):
                t = rank_input(r, count, dtype, a.seed)
                dist.barrier()
                t0 = time.monotonic()
                dist.all_reduce(t)
                dt = torch.tensor([time.monotonic() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                if it >= a.warmup:
                    times.append(float(dt))
                ok &= (torch.equal(t, want) if not dtype.is_floating_point else
                       torch.allclose(t.to(torch.float64), want, rtol=1e-4, atol=1e-3))
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
