"""Counting a step's FLOPs per module with torch's FlopCounterMode, and spending them
during the step (issue 15: `--gpu h100`; book ch.8 "Data parallelism": the gradients of
each layer are ready, and their AllReduce can start, while earlier layers still compute).

`count_step` runs the model on torch's meta device (shapes only: nothing is computed,
so the counted shape may be a GPU's batch that the CPU could never run) under
`torch.utils.flop_counter.FlopCounterMode`, forward alone and forward + backward: per
module its *own* forward FLOPs (its count minus its children's) per call, and the
backward's total shared out by them. `attach` turns a `StepCost` into hold points on a real model: a forward
pre-hook on each module with forward FLOPs, a full backward pre-hook on each module with
backward FLOPs - so a module's modelled backward time passes *before* its gradients
exist, and DDP's bucket AllReduce, launched when they do, overlaps the backward of the
modules before it, as on a GPU. The shares are the step's modelled time
(`gpu.GpuModel.step_seconds`) split in proportion to the FLOPs; `clock.ComputeClock`
sleeps them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from collectives.compute.clock import ComputeClock


@dataclass(frozen=True)
class StepCost:
    """FLOPs of one forward + backward step per module (qualified name, "" = the root),
    each module's own (not its children's), per call."""

    fwd: dict[str, float]
    bwd: dict[str, float]

    @property
    def total(self) -> float:
        """FLOPs of the whole step."""
        return sum(self.fwd.values()) + sum(self.bwd.values())


def _own(counts: dict[str, dict[Any, int]], model: torch.nn.Module) -> dict[str, float]:
    """Exclusive FLOPs per module from FlopCounterMode's nested per-module counts (a
    container that never ran, a ModuleList, has no entry: its children count for it)."""
    root = type(model).__name__

    def key(name: str) -> str:
        return root if not name else f"{root}.{name}"

    def child(name: str, c: str) -> str:
        return f"{name}.{c}" if name else c

    def total(name: str, mod: torch.nn.Module) -> float:
        k = key(name)
        if k in counts:
            return float(sum(counts[k].values()))
        return sum(total(child(name, c), m) for c, m in mod.named_children())

    own = {}
    for name, mod in model.named_modules():
        if key(name) not in counts:
            continue
        f = total(name, mod) - sum(total(child(name, c), m) for c, m in mod.named_children())
        if f > 0:
            own[name] = f
    return own


def count_step(build: Callable[[], torch.nn.Module], inputs: Callable[[], tuple],
               loss: Callable[[Any], torch.Tensor]) -> StepCost:
    """Count one step of `build()` on `inputs()` (both made on the meta device) with
    `loss(output)` to differentiate. The forward is counted per module; the backward as
    a whole (FlopCounterMode's module tracker attributes a backward operation to every
    module active around it - a Linear's weight gradient to the Dropout after it too -
    so its per-module backward counts overlap) and shared out over the modules in
    proportion to their forward FLOPs: exact in total, the usual ~2x-forward per layer."""
    with torch.device("meta"):
        model = build()
        args = inputs()
    calls: dict[str, int] = {}
    hooks = [m.register_forward_pre_hook(
        lambda _m, _a, n=name: calls.__setitem__(n, calls.get(n, 0) + 1))
        for name, m in model.named_modules()]
    with FlopCounterMode(display=False) as fm:
        model(*args)
    for h in hooks:
        h.remove()
    fwd = {n: f / max(1, calls.get(n, 1)) for n, f in _own(fm.get_flop_counts(), model).items()}
    with FlopCounterMode(display=False) as bm:
        loss(model(*args)).backward()
    fwd_total = float(fm.get_total_flops())
    bwd_total = float(bm.get_total_flops()) - fwd_total
    bwd = {n: bwd_total * f / sum(fwd.values()) for n, f in fwd.items()} if fwd else {}
    if bwd_total > 0 and not bwd:
        bwd = {"": bwd_total}
    return StepCost(fwd, bwd)


class Attached:
    """The hold points of one model: remove() takes them off."""

    def __init__(self, handles: list) -> None:
        self.handles = handles

    def remove(self) -> None:
        """Take every hook off the model."""
        for h in self.handles:
            h.remove()
        self.handles = []


def attach(model: torch.nn.Module, cost: StepCost, step_model_s: float,
           clock: ComputeClock) -> Attached:
    """Hold points on `model` that spend `step_model_s` of modelled time per forward +
    backward step, shared out by `cost`'s FLOPs (module names as in model.named_modules();
    attach to the module DDP wraps, after wrapping it, so DDP's gradient hooks come first)."""
    per_flop = step_model_s / cost.total if cost.total else 0.0
    state = {"phase": None}
    mods = dict(model.named_modules())
    handles = []

    def begin_fwd(_m: Any, _a: Any) -> None:
        state["phase"] = "fwd"
        clock.begin("fwd")

    handles.append(model.register_forward_pre_hook(begin_fwd))
    def fwd_hold(flops: float) -> Callable:
        def hook(_m: Any, _a: Any) -> None:
            clock.spend(flops * per_flop, flops)
        return hook

    for name, flops in cost.fwd.items():
        if name in mods:
            handles.append(mods[name].register_forward_pre_hook(fwd_hold(flops)))

    def bwd_hold(flops: float) -> Callable:
        def hook(_m: Any, _g: Any) -> None:
            if state["phase"] != "bwd":
                state["phase"] = "bwd"
                clock.begin("bwd")
            clock.spend(flops * per_flop, flops)
        return hook

    root_bwd = cost.bwd.get("", 0.0)
    handles.append(model.register_full_backward_pre_hook(bwd_hold(root_bwd)))
    for name, flops in cost.bwd.items():
        if name and name in mods:
            handles.append(mods[name].register_full_backward_pre_hook(bwd_hold(flops)))
    warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients")
    return Attached(handles)
