"""The compute model for scripts emu does not know the shape of (issue 15: `emu run
--script ... --gpu h100`): every operation torch's FlopCounterMode has a formula for
(matmuls, convolutions, attention; `torch.utils.flop_counter.flop_registry`) is priced
as one GPU kernel (`gpu.GpuModel.op_seconds`: never faster than the smallest measured
matmul, else at the throughput of a matmul of that many FLOPs) and spent after the CPU
computed it, in the worker that ran it (a TorchDispatchMode is per thread; CPU autograd
runs the backward in the thread that called it).

Consecutive operations share one region of `clock.ComputeClock` (their targets add up
and the CPU time between them is absorbed); an operation that starts more than a
model microsecond after the last hold ended (the worker waited on a collective, or ran
the optimizer) opens a new region. Cheaper than the train workload's per-module step
model, and blunter: launch-bound steps (a tiny MLP's 0.72 ms) are priced only by their
matmuls, and what torch counts no FLOPs for (norms, activations, copies) is free.
"""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from collectives.compute.clock import ComputeClock
from collectives.compute.gpu import GpuModel

GAP_MODEL_S = 1e-6  #: a pause longer than this (model time) between two kernels opens a region


class GpuOps(TorchDispatchMode):
    """Spends every FLOP-counted operation's GPU time while active (a context manager)."""

    def __init__(self, gpu: GpuModel, dtype: str, clock: ComputeClock) -> None:
        super().__init__()
        self.gpu, self.dtype, self.clock = gpu, dtype, clock
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        start = self.clock.clock()
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            flops = formula(*args, **kwargs, out_val=out)
            r = self.clock.current
            if r is None or start - r.end_lab > self.clock.td.lab_time(GAP_MODEL_S):
                r = self.clock.begin("op")
                r.start_lab = r.end_lab = start
            self.clock.spend(self.gpu.op_seconds(flops, self.dtype), flops)
            self.ops += 1
        return out
