"""A DDP step's communication with and without overlap, and where its time went
(issue 15; book ch.8 "Data parallelism": each iteration AllReduces the gradients).

* `allreduce_after_backward`: what DDP does with overlap turned off - the backward runs
  under `no_sync()`, then the gradients are AllReduced bucket by bucket (DDP's bucket
  size, reverse parameter order, the wire dtype of the run) once it has finished.
* `iteration_split`: per iteration window, the model time of compute (the compute
  model's regions), communication (the emu group's operations), their overlap and the
  exposed communication (`collectives.compute.split`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from collectives.compute.split import split
from emucore.timedil import TimeDilation

BUCKET_BYTES = 25 << 20  #: DDP's default bucket_cap_mb, of the parameters' own dtype


def buckets(params: list[torch.Tensor], cap: int = BUCKET_BYTES) -> list[list[torch.Tensor]]:
    """Parameters in reverse order, cut into buckets of about `cap` bytes (as DDP)."""
    out: list[list[torch.Tensor]] = [[]]
    size = 0
    for p in reversed(params):
        if out[-1] and size + p.numel() * p.element_size() > cap:
            out.append([])
            size = 0
        out[-1].append(p)
        size += p.numel() * p.element_size()
    return [b for b in out if b]


def allreduce_after_backward(params: list[torch.Tensor], wire: torch.dtype,
                             group: Any = None) -> int:
    """Average the gradients over the group, bucket by bucket, all issued at once and
    waited for together; returns the bytes put on the wire."""
    n = dist.get_world_size(group)
    works, flats, sent = [], [], 0
    for b in buckets([p for p in params if p.grad is not None]):
        flat = torch.cat([p.grad.reshape(-1) for p in b]).to(wire).div_(n)
        works.append(dist.all_reduce(flat, group=group, async_op=True))
        flats.append((b, flat))
        sent += flat.numel() * flat.element_size()
    for w in works:
        w.wait()
    for b, flat in flats:
        at = 0
        for p in b:
            k = p.numel()
            p.grad.copy_(flat[at:at + k].view_as(p.grad))
            at += k
    return sent


def bf16_wire_hook(group: Any, bucket: dist.GradBucket) -> torch.futures.Future:
    """DDP communication hook: the bucket AllReduced as bf16 (averaged), copied back into
    the fp32 gradients - what torch's `bf16_compress_hook` does, which DDP allows only with
    CUDA and NCCL; GPU training runs exactly this."""
    g = group if group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    wire = buffer.to(torch.bfloat16).div_(g.size())

    def back(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer
    return dist.all_reduce(wire, group=g, async_op=True).get_future().then(back)


# DDP checks the hook's annotations as objects (this module's are strings)
bf16_wire_hook.__annotations__.update(bucket=dist.GradBucket,
                                      return_=None)
bf16_wire_hook.__annotations__["return"] = torch.futures.Future[torch.Tensor]
del bf16_wire_hook.__annotations__["return_"]


def comm_intervals(group: Any = None) -> list[tuple[float, float]] | None:
    """The lab (start, end) of every operation the emu group ran; None on another backend."""
    pg = group or dist.group.WORLD
    comm = getattr(pg, "comm", None)
    if comm is None:
        return None
    return [(h["t0_lab"], h["t0_lab"] + h["seconds_lab"]) for h in comm.history]


def iteration_split(windows: list[tuple[float, float]], compute: list[tuple[float, float]],
                    comm: list[tuple[float, float]] | None, td: TimeDilation) -> list[dict]:
    """Per iteration window (lab seconds): its split in model milliseconds."""
    m = td.model_time
    cm = [(m(a), m(b)) for a, b in compute]
    co = [(m(a), m(b)) for a, b in (comm or [])]
    out = []
    for a, b in windows:
        s = split((m(a), m(b)), cm, co)
        out.append({k.replace("_s", "_ms"): round(v * 1e3, 4) for k, v in s.items()})
    return out
