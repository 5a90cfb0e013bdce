"""The torch.distributed backend "emu": collectives over the emulated RoCEv2 fabric.

Book ch.14 (job start, Broadcast, ring AllReduce) and ch.8 (data / pipeline / tensor
parallelism). Importing this module registers the backend:

    import collectives.backend            # or run under `python -m emu run ... --script`
    dist.init_process_group(backend="emu")
    dist.all_reduce(t)                    # ring AllReduce over the GPU NICs (RoCEv2)

How it plugs into torch 2.13: `Backend.register_backend("emu", creator,
extended_api=True, devices=["cpu"])`; the creator returns a Python subclass of
`torch.distributed.ProcessGroup`, which torch then uses as the group itself (the
documented path for Python process groups, as torch's own threaded test backend does).
A C++ `Backend` cannot be subclassed from Python (no constructor is bound), so there is
no Backend object to bind to the CPU device; DDP works all the same because every call
it makes (the parameter check's allgather, the initial broadcast, the bucket
allreduces) lands in the Python overrides below. `devices=["cpu"]` declares the
capability; the launcher's script runner also makes "emu" the default CPU backend, so
`dist.init_process_group()` without a backend name lands here too.

Per group the creator runs the ch.14 job start (`collectives.rendezvous`: rank 0 waits
for the others over the store on the frontend, draws a 128-byte unique ID and hands out
everybody's fabric address), then builds a `collectives.comm.Communicator`. Every
operation runs to completion before it returns (point-to-point ones in the background,
in order per peer); the returned work is complete, its future holds the tensors.

Environment (set by `emu run --workload script|train|...`): EMU_GPU, EMU_HOST, EMU_RAIL,
EMU_NIC_IP, EMU_NIC_SOCK (the GPU's NIC), EMU_TDF, EMU_JOB, EMU_SLOT (landing slot
bytes), EMU_RING (ring order, `emu run --ring`: "rail", the rail-aware ring, default, or
"rank", the book's ring 0 -> 1 -> ... -> N-1 of Fig 14-5; another value fails the group),
EMU_RESULT_DIR (where each rank writes emu-rank<R>-g<G>.json: unique ID, peers, ring,
operations with model-time durations and per-step chunks, bytes per channel), EMU_RUN
(the run's tag: names the same-host channels' shared memory, fabric.runmark).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
from concurrent.futures import Future as CFuture
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future

from collectives.comm import DEFAULT_SLOT, Communicator, group_index
from collectives.rendezvous import PeerInfo, bootstrap
from fabric.runmark import RUN_ENV
from fabric.timedil import TimeDilation

NAME = "emu"

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "product",
        dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max"}


def _op(opts: Any) -> str:
    for k, v in _OPS.items():
        if opts.reduceOp == k:
            return v
    raise ValueError(f"emu backend: reduce op {opts.reduceOp} not supported "
                     "(SUM, AVG, PRODUCT, MIN, MAX)")


class EmuWork(dist._Work):
    """Work of an operation: done when returned, or wrapping a background one."""

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


def _contig(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """A contiguous CPU tensor to work on, and whether it must be copied back."""
    if t.device.type != "cpu":
        raise ValueError(f"emu backend: CPU tensors only, got {t.device}")
    return (t, False) if t.is_contiguous() else (t.contiguous(), True)


class EmuProcessGroup(dist.ProcessGroup):
    """A group of ranks talking over their emulated NICs."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta,
                 group_name: str = "0") -> None:
        super().__init__(rank, size)
        env = os.environ
        me = PeerInfo(job=env.get("EMU_JOB", env.get("TORCHELASTIC_RUN_ID", "none")),
                      rank=rank, world_size=size, gpu=env.get("EMU_GPU", f"rank{rank}"),
                      host=env.get("EMU_HOST", socket.gethostname()),
                      rail=int(env.get("EMU_RAIL", "0")), fabric_ip=env.get("EMU_NIC_IP", ""),
                      nic_sock=env.get("EMU_NIC_SOCK", ""), pid=os.getpid())
        secs = timeout.total_seconds() if timeout else 300.0
        self.uid, self.peers = bootstrap(store, me, secs)
        self._gname = group_name
        self.comm = Communicator(self.peers, rank, self.uid, group_index(group_name),
                                 slot=int(env.get("EMU_SLOT", DEFAULT_SLOT)), timeout=secs,
                                 td=TimeDilation.from_env(env),
                                 ring=env.get("EMU_RING", "rail"),
                                 run=env.get(RUN_ENV, ""))
        self._report()
        atexit.register(self._finish)

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return NAME

    # -- results ----------------------------------------------------------------------
    def _report(self) -> None:
        out = os.environ.get("EMU_RESULT_DIR")
        if not out:
            return
        world_rank = int(os.environ.get("RANK", self.rank()))
        path = os.path.join(out, f"emu-rank{world_rank}-g{self._gname}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"group": self._gname, "rank": self.rank(), "world_rank": world_rank,
                       "unique_id": self.uid.hex(), "peers": [asdict(p) for p in self.peers],
                       "ring": self.comm.ring, "ring_kind": self.comm.ring_kind,
                       "history": self.comm.history,
                       "channels": self.comm.stats()}, f)
        os.replace(path + ".tmp", path)

    def _finish(self) -> None:
        try:
            self._report()
        finally:
            self.comm.close()

    def shutdown(self) -> None:
        """Called by destroy_process_group: write the results, free NIC resources."""
        atexit.unregister(self._finish)
        self._finish()

    # -- collectives ------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        op = _op(opts)
        for t in tensors:
            work, back = _contig(t)
            self.comm.allreduce(work, op)
            if back:
                t.copy_(work)
        return EmuWork(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        for t in tensors:
            work, back = _contig(t)
            self.comm.broadcast(work, opts.rootRank)
            if back:
                t.copy_(work)
        return EmuWork(tensors)

    def allgather(self, output_tensors: list[list[torch.Tensor]],
                  input_tensors: list[torch.Tensor], opts: Any = None) -> EmuWork:
        for outs, inp in zip(output_tensors, input_tensors):
            flat = torch.empty(len(outs) * inp.numel(), dtype=inp.dtype)
            self.comm.allgather(flat, inp.contiguous())
            for i, o in enumerate(outs):
                o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))
        return EmuWork(output_tensors)

    def _allgather_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> EmuWork:
        work, back = _contig(output)
        self.comm.allgather(work, inp.contiguous())
        if back:
            output.copy_(work)
        return EmuWork([output])

    all_gather_single = _allgather_base

    def gather(self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor],
               opts: Any) -> EmuWork:
        """Gather to root: an AllGather whose result only the root keeps."""
        for i, inp in enumerate(input_tensors):
            flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype)
            self.comm.allgather(flat, inp.contiguous())
            if self.rank() == opts.rootRank:
                for j, o in enumerate(output_tensors[i]):
                    o.copy_(flat[j * inp.numel():(j + 1) * inp.numel()].view_as(o))
        return EmuWork(output_tensors)

    def scatter(self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]],
                opts: Any) -> EmuWork:
        """Scatter from root: a Broadcast of all the pieces, each rank keeps its own."""
        for i, out in enumerate(output_tensors):
            flat = (torch.cat([t.reshape(-1) for t in input_tensors[i]])
                    if self.rank() == opts.rootRank
                    else torch.empty(self.size() * out.numel(), dtype=out.dtype))
            self.comm.broadcast(flat, opts.rootRank)
            k = out.numel()
            out.copy_(flat[self.rank() * k:(self.rank() + 1) * k].view_as(out))
        return EmuWork(output_tensors)

    def reduce_scatter(self, output_tensors: list[torch.Tensor],
                       input_tensors: list[list[torch.Tensor]], opts: Any) -> EmuWork:
        op = _op(opts)
        for out, ins in zip(output_tensors, input_tensors):
            flat = torch.cat([i.reshape(-1) for i in ins])
            work, back = _contig(out)
            self.comm.reduce_scatter(work, flat, op)
            if back:
                out.copy_(work)
        return EmuWork(output_tensors)

    def _reduce_scatter_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any) -> EmuWork:
        work, back = _contig(output)
        self.comm.reduce_scatter(work, inp.contiguous(), _op(opts))
        if back:
            output.copy_(work)
        return EmuWork([output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        """Reduce to root: an AllReduce whose result only the root keeps."""
        op = _op(opts)
        for t in tensors:
            work = t.contiguous().clone()
            self.comm.allreduce(work, op)
            if self.rank() == opts.rootRank:
                t.copy_(work)
        return EmuWork(tensors)

    def barrier(self, opts: Any = None) -> EmuWork:
        self.comm.barrier()
        return EmuWork(None)

    # -- point to point ---------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> EmuWork:
        futs = [self.comm.send(t.contiguous(), dst) for t in tensors]
        return EmuWork(tensors, _all(futs))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> EmuWork:
        works = [_contig(t) for t in tensors]
        futs = [self.comm.recv(w, src) for w, _ in works]
        pending = _all(futs)
        if any(back for _, back in works):
            def copy_back(_: CFuture) -> None:
                for t, (w, back) in zip(tensors, works):
                    if back:
                        t.copy_(w)
            pending.add_done_callback(copy_back)
        return EmuWork(tensors, pending)


def _all(futs: list[CFuture]) -> CFuture:
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


def _create(dist_opts: Any, pg_opts: Any = None) -> EmuProcessGroup:
    return EmuProcessGroup(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                           dist_opts.timeout, str(dist_opts.group_id))


def register(default_for_cpu: bool = False) -> None:
    """Register "emu" with torch.distributed (idempotent); optionally make it the
    backend `init_process_group()` picks for CPU tensors when none is named."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])
    if default_for_cpu:
        dist.Backend.default_device_backend_map["cpu"] = NAME


register()
