"""What the emu process group hands back and works with: the Work of an operation
(done when returned, or wrapping one that runs in the background - torch waits on it,
chains its future, DDP overlaps it with the backward pass), reduce-op names, and the
small tensor helpers of `collectives.backend`.
"""

from __future__ import annotations

from concurrent.futures import Future as CFuture
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "product",
        dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max"}


def reduce_op(opts: Any) -> str:
    for k, v in _OPS.items():
        if opts.reduceOp == k:
            return v
    raise ValueError(f"emu backend: reduce op {opts.reduceOp} not supported "
                     "(SUM, AVG, PRODUCT, MIN, MAX)")


class EmuWork(dist._Work):
    """Work of an operation: done when returned, or wrapping one run in the background."""

    def __init__(self, result: Any, pending: CFuture | None = None) -> None:
        super().__init__()
        self._pending = pending
        self._fut: Future = Future()
        if pending is None:
            self._fut.set_result(result)
        else:
            def done(f: CFuture) -> None:
                exc = f.exception()
                if exc is None:
                    self._fut.set_result(result)
                else:
                    self._fut.set_exception(exc)
            pending.add_done_callback(done)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until done (re-raises a failure)."""
        if self._pending is not None:
            self._pending.result(None if timeout is None or not timeout.total_seconds()
                                 else timeout.total_seconds())
        return True

    def is_completed(self) -> bool:
        return self._pending is None or self._pending.done()

    def is_success(self) -> bool:
        return self.is_completed() and (self._pending is None or self._pending.exception() is None)

    def get_future(self) -> Future:
        return self._fut


def contig(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """A contiguous CPU tensor to work on, and whether it must be copied back."""
    if t.device.type != "cpu":
        raise ValueError(f"emu backend: CPU tensors only, got {t.device}")
    return (t, False) if t.is_contiguous() else (t.contiguous(), True)


def nbytes(tensors: list[torch.Tensor]) -> int:
    """Payload bytes of a list of tensors."""
    return sum(t.numel() * t.element_size() for t in tensors)


def row_bytes(t: torch.Tensor) -> int:
    """Bytes per index of dim 0 of a contiguous tensor."""
    return t[0].numel() * t.element_size() if t.dim() and t.shape[0] else 0


def merged(a: dict, b: dict) -> dict:
    """Channel byte counts of the two lanes, per peer."""
    out = {k: dict(v) for k, v in a.items()}
    for k, v in b.items():
        if k in out:
            for f in ("tx_bytes", "rx_bytes"):
                out[k][f] += v[f]
        else:
            out[k] = dict(v)
    return out


def all_of(futs: list[CFuture]) -> CFuture:
    """One future for several (the last one, after the others: they run in order)."""
    out: CFuture = CFuture()
    left = [len(futs)]

    def one(f: CFuture) -> None:
        if out.done():
            return
        if f.exception() is not None:
            out.set_exception(f.exception())
            return
        left[0] -= 1
        if left[0] == 0:
            out.set_result(None)
    if not futs:
        out.set_result(None)
    for f in futs:
        f.add_done_callback(one)
    return out
