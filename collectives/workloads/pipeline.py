"""Pipeline parallelism, the book's example (ch.8 "Model parallelism with pipeline
parallelism", Figures 8-3..8-12), executed over the fabric.

Four layers (three hidden and the output layer) on four GPUs: 0a and 1a on Host A (ranks
0 and 1 = h1g1, h1g2), 0b and 1b on Host B (ranks 2 and 3 = h2g1, h2g2); four
micro-batches. Time step t = 1..M+2S-2: stage s runs the forward pass of micro-batch
t - s and the backward pass of micro-batch t - (2S - 2 - s); the output stage does both
for the same micro-batch in one step. Activations go forward and errors (activation
gradients) backward with send/recv, produced in step t and consumed in step t+1: within
a host by shared memory ("NVLink" DMA), between 1a and 0b over RoCE. Each stage records
the steps in which it computed; the utilization per step must come out as the book's
25, 50, 75, 100, 75, 75, 100, 75, 50, 25 %. The accumulated gradients of every layer
are checked against a single-process model run on the same micro-batches. Each stage
reads its NIC's RoCE payload counter around its part, so the result says which GPUs'
NICs carried the pipeline (the book: only 1a -> 0b and back, L1969, L2015). Ranks past
the first four only join the final gathers.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

from collectives.jobresult import nic_payload_tx
from collectives.workloads.common import backend_arg, init, say, write_result

STAGES, MICRO = 4, 4
WIDTH, IN, MB = 16, 8, 4  # hidden width, input features, samples per micro-batch
NAMES = ("0a", "1a", "0b", "1b")
BOOK = [25, 50, 75, 100, 75, 75, 100, 75, 50, 25]


def schedule(stages: int = STAGES, micro: int = MICRO) -> dict[int, list[tuple[int, str, int]]]:
    """Time step -> [(stage, "F" or "B", micro-batch 1..M)] of the book's pipeline."""
    out: dict[int, list[tuple[int, str, int]]] = {}
    for t in range(1, micro + 2 * stages - 1):
        out[t] = []
        for s in range(stages):
            mf, mb = t - s, t - (2 * stages - 2 - s)
            if 1 <= mf <= micro:
                out[t].append((s, "F", mf))
            if 1 <= mb <= micro:
                out[t].append((s, "B", mb))
    return out


def utilization(active: list[set[int]], steps: int) -> list[int]:
    """Percent of the stages that computed in each step."""
    return [round(100 * sum(t in a for a in active) / len(active)) for t in range(1, steps + 1)]


def layer(s: int) -> torch.nn.Module:
    """Stage s's layer, same weights wherever it is built."""
    torch.manual_seed(100 + s)
    lin = torch.nn.Linear(IN if s == 0 else WIDTH, 1 if s == STAGES - 1 else WIDTH)
    return lin if s == STAGES - 1 else torch.nn.Sequential(lin, torch.nn.ReLU())


def micro_batch(m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of micro-batch m (fixed seed)."""
    g = torch.Generator().manual_seed(7 + m)
    x = torch.randn(MB, IN, generator=g)
    return x, x.sum(1, keepdim=True).tanh()


def reference_grads() -> list[list[torch.Tensor]]:
    """The same four layers in one process, same micro-batches, same loss."""
    layers = [layer(s) for s in range(STAGES)]
    for m in range(1, MICRO + 1):
        x, y = micro_batch(m)
        for lay in layers:
            x = lay(x)
        (torch.nn.functional.mse_loss(x, y) / MICRO).backward()
    return [[p.grad.clone() for p in lay.parameters()] for lay in layers]


def run_stage(s: int) -> tuple[set[int], list[torch.Tensor]]:
    """Execute stage s's part of the schedule; (active steps, parameter gradients)."""
    lay = layer(s)
    plan = schedule()
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    active: set[int] = set()
    pending: list = []
    width_in = IN if s == 0 else WIDTH
    for t in sorted(plan):
        mine = [(k, m) for (st, k, m) in plan[t] if st == s]
        recvs = []
        for k, m in mine:  # what was sent in step t-1
            if k == "F" and s > 0:
                buf = torch.empty(MB, width_in)
                recvs.append((k, m, buf, dist.irecv(buf, s - 1)))
            elif k == "B" and s < STAGES - 1:
                buf = torch.empty(MB, WIDTH)
                recvs.append((k, m, buf, dist.irecv(buf, s + 1)))
        got = {}
        for k, m, buf, w in recvs:
            w.wait()
            got[(k, m)] = buf
        for k, m in mine:
            active.add(t)
            if k == "F":
                x = micro_batch(m)[0] if s == 0 else got[("F", m)].requires_grad_()
                inputs[m] = x
                outputs[m] = lay(x)
                if s < STAGES - 1:
                    pending.append(dist.isend(outputs[m].detach().contiguous(), s + 1))
            else:
                if s == STAGES - 1:
                    (torch.nn.functional.mse_loss(outputs[m], micro_batch(m)[1]) / MICRO).backward()
                else:
                    outputs[m].backward(got[("B", m)])
                if s > 0:
                    pending.append(dist.isend(inputs[m].grad.contiguous(), s - 1))
    for w in pending:
        w.wait()
    return active, [p.grad.clone() for p in lay.parameters()]


def main(argv: list[str] | None = None) -> int:
    """Entry point (torchrun environment; needs at least 4 ranks)."""
    ap = argparse.ArgumentParser(prog="collectives.workloads.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    backend_arg(ap)
    a = ap.parse_args(argv)
    rank, n = init(a.backend)
    try:
        if n < STAGES:
            raise SystemExit(f"pipeline: needs {STAGES} ranks, got {n}")
        sock = os.environ.get("EMU_NIC_SOCK", "")
        tx0 = nic_payload_tx(sock) if sock else 0
        active, grads = run_stage(rank) if rank < STAGES else (set(), [])
        tx = (nic_payload_tx(sock) - tx0) if sock else None  # this stage's RoCE payload
        everyone = [None] * n
        dist.all_gather_object(everyone, (sorted(active), [g.tolist() for g in grads],
                                          os.environ.get("EMU_GPU", f"rank{rank}"), tx))
        ok, util, diff, fabric_tx = True, [], 0.0, {}
        if rank == 0:
            steps = len(schedule())
            util = utilization([set(everyone[s][0]) for s in range(STAGES)], steps)
            ref = reference_grads()
            diff = max(float((torch.tensor(g) - r).abs().max())
                       for s in range(STAGES) for g, r in zip(everyone[s][1], ref[s]))
            ok = util == BOOK and diff < 1e-5
            fabric_tx = {NAMES[s]: everyone[s][3] for s in range(STAGES)}
            plan = schedule()
            gpus = [everyone[s][2] for s in range(STAGES)]
            say(rank, "Pipeline parallelism (book ch.8): layers on "
                      + ", ".join(f"{NAMES[s]}={gpus[s]}" for s in range(STAGES))
                      + f", {MICRO} micro-batches, backend {a.backend}")
            say(rank, "  step  " + "".join(f"{nm:>8}" for nm in NAMES) + "  utilization")
            for t in range(1, steps + 1):
                cells = ["+".join(f"{k}{m}" for st, k, m in plan[t] if st == s) or "-"
                         for s in range(STAGES)]
                say(rank, f"  {t:>4}  " + "".join(f"{c:>8}" for c in cells) + f"  {util[t - 1]:>5}%")
            say(rank, f"utilization {util} ({'= the book' if util == BOOK else 'differs from the book ' + str(BOOK)}); "
                      f"gradients vs a single-process model: max |diff| = {diff:.3g}")
            say(rank, f"RoCE payload sent by each stage's NIC during the pipeline: {fabric_tx}")
        mean = sum(util) / len(util) if util else 0.0
        write_result(rank, {"workload": "pipeline", "ok": bool(ok), "utilization": util,
                            "mean_utilization": mean, "bubble_percent": 100 - mean if util else 0,
                            "fabric_tx_bytes": fabric_tx, "max_grad_diff": diff,
                            "active_steps": sorted(active)})
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
