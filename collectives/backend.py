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
everybody's fabric address, then a job-unique group slot that numbers its CM ports),
then builds a `collectives.comm.Communicator`. Collectives run in the background, one at
a time per group in the order they were issued (the same on every rank, as NCCL runs a
communicator's operations on one stream): a call returns at once with a work that
`wait()` blocks on, so `async_op=True` work and DDP's bucket AllReduces progress while
the caller computes. Point-to-point send / recv run on a lane of their own (a second
Communicator, its own QPs and slots, opened on first use), asynchronous and in order per
peer and direction, so they never mix with a collective between the same two ranks.

What real training code calls (issue 15): the group keeps its name and description
(`getGroupName`/`setGroupName`: torch keeps them only for C++ backends), so DeviceMesh,
DTensor and the functional collectives find it; `all_to_all_single` (uneven splits) and
`all_to_all` are a pairwise exchange (`Communicator.alltoall`); the coalesced variants
loop; `batch_isend_irecv` runs on the p2p lane. Calls emu cannot serve (a receive from any
source, split_group, merge_remote_group) raise NotImplementedError at once, naming
themselves. `issued` counts each kind of operation and its bytes for the run's summary.

Environment (set by `emu run --workload script|train|...`): EMU_GPU, EMU_HOST, EMU_RAIL,
EMU_NIC_IP, EMU_NIC_SOCK (the GPU's NIC), EMU_TDF, EMU_JOB, EMU_SLOT (landing slot
bytes), EMU_RING (ring order, `emu run --ring`: "rail", the rail-aware ring, default, or
"rank", the book's ring 0 -> 1 -> ... -> N-1 of Fig 14-5; another value fails the group),
EMU_RESULT_DIR (where each rank writes emu-rank<R>-g<G>.json: unique ID, peers, ring,
operations with model-time durations and per-step chunks, bytes per channel), EMU_RUN
(the run's tag: names the same-host channels' shared memory, emucore.runmark).
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
from concurrent.futures import Future as CFuture
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from collectives.comm import Communicator, raw_bytes
from collectives.endpoint import DEFAULT_SLOT
from collectives.rendezvous import PeerInfo, bootstrap, group_slots
from collectives.ring import split_bounds
from emucore.atomic import write_json_atomic
from emucore.runmark import RUN_ENV
from collectives.work import (EmuWork, all_of, contig, merged, nbytes, reduce_op,
                              row_bytes)
from emucore import fidelity
from emucore.timedil import TimeDilation

NAME = "emu"

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
        self.slot = group_slots(store, rank, 2, secs)  # its collective and p2p lanes
        self._gname = self._group_name = group_name
        self._group_desc = ""
        self._comm_args = dict(slot=int(env.get("EMU_SLOT", DEFAULT_SLOT)), timeout=secs,
                               td=TimeDilation.from_env(env), ring=env.get("EMU_RING", "rail"),
                               run=env.get(RUN_ENV, ""),
                               master_port=int(env.get("MASTER_PORT", "0") or 0))
        self.comm = Communicator(self.peers, rank, self.uid, self.slot, **self._comm_args)
        self._p2p: Communicator | None = None  # the point-to-point lane, opened when used
        self._lock = threading.Lock()
        #: every collective runs here, one at a time in the order issued (the same on
        #: every rank), in the background: async_op work and DDP's bucket AllReduces
        #: progress while the caller computes
        self._exec = ThreadPoolExecutor(1, thread_name_prefix=f"emu-coll-g{group_name}")
        self.issued: dict[str, dict[str, int]] = {}
        self._report()
        atexit.register(self._finish)

    # -- what torch asks of a Python process group --------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (torch's names)
        return NAME

    def getGroupName(self) -> str:  # noqa: N802 - DeviceMesh, functional collectives
        return self._group_name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    # -- results ----------------------------------------------------------------------
    def _report(self) -> None:
        out = os.environ.get("EMU_RESULT_DIR")
        if not out:
            return
        world_rank = int(os.environ.get("RANK", self.rank()))
        path = os.path.join(out, f"emu-rank{world_rank}-g{self._gname}.json")
        p2p = self._p2p
        write_json_atomic(path, {
            "group": self._gname, "group_name": self._group_name,
            "rank": self.rank(), "world_rank": world_rank, "slot": self.slot,
            "unique_id": self.uid.hex(), "peers": [asdict(p) for p in self.peers],
            "ring": self.comm.ring, "ring_kind": self.comm.ring_kind,
            "issued": self.issued,
            "history": self.comm.history + (p2p.history if p2p else []),
            "channels": merged(self.comm.stats(), p2p.stats() if p2p else {}),
            "fidelity": fidelity.merge(c.events.meter.snapshot() for c in (self.comm, p2p) if c)})

    def _finish(self) -> None:
        try:
            self._exec.shutdown(wait=True)
            self._report()
        finally:
            self.comm.close()
            if self._p2p is not None:
                self._p2p.close()

    def shutdown(self) -> None:
        """Called by destroy_process_group: write the results, free NIC resources."""
        atexit.unregister(self._finish)
        self._finish()

    # -- running operations -----------------------------------------------------------
    def _run(self, kind: str, nbytes: int, job: Callable[[], None], result: Any) -> EmuWork:
        """Count the operation, queue it behind the group's earlier ones, return its work."""
        n = self.issued.setdefault(kind, {"count": 0, "bytes": 0})
        n["count"] += 1
        n["bytes"] += nbytes
        return EmuWork(result, self._exec.submit(job))

    def _lane(self) -> Communicator:
        """The point-to-point lane: channels of their own, so sends and receives never mix
        with a collective in flight between the same two ranks."""
        with self._lock:
            if self._p2p is None:
                self._p2p = Communicator(self.peers, self.rank(), self.uid, self.slot + 1,
                                         **self._comm_args)
            return self._p2p

    # -- collectives ------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        op = reduce_op(opts)

        def job() -> None:
            for t in tensors:
                work, back = contig(t)
                self.comm.allreduce(work, op)
                if back:
                    t.copy_(work)
        return self._run("allreduce", nbytes(tensors), job, tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        def job() -> None:
            for t in tensors:
                work, back = contig(t)
                self.comm.broadcast(work, opts.rootRank)
                if back:
                    t.copy_(work)
        return self._run("broadcast", nbytes(tensors), job, tensors)

    def allgather(self, output_tensors: list[list[torch.Tensor]],
                  input_tensors: list[torch.Tensor], opts: Any = None) -> EmuWork:
        def job() -> None:
            for outs, inp in zip(output_tensors, input_tensors):
                flat = torch.empty(len(outs) * inp.numel(), dtype=inp.dtype)
                self.comm.allgather(flat, inp.contiguous())
                for i, o in enumerate(outs):
                    o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))
        return self._run("allgather", nbytes(input_tensors), job, output_tensors)

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]],
                            input_list: list[torch.Tensor], opts: Any = None) -> EmuWork:
        return self.allgather(output_lists, input_list, opts)

    def _allgather_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> EmuWork:
        def job() -> None:
            work, back = contig(output)
            self.comm.allgather(work, inp.contiguous())
            if back:
                output.copy_(work)
        return self._run("allgather", nbytes([inp]), job, [output])

    all_gather_single = _allgather_base

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor],
                                    inputs: list[torch.Tensor], opts: Any = None) -> EmuWork:
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else EmuWork(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor],
               opts: Any) -> EmuWork:
        """Gather to root: an AllGather whose result only the root keeps."""
        def job() -> None:
            for i, inp in enumerate(input_tensors):
                flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype)
                self.comm.allgather(flat, inp.contiguous())
                if self.rank() == opts.rootRank:
                    for j, o in enumerate(output_tensors[i]):
                        o.copy_(flat[j * inp.numel():(j + 1) * inp.numel()].view_as(o))
        return self._run("gather", nbytes(input_tensors), job, output_tensors)

    def scatter(self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]],
                opts: Any) -> EmuWork:
        """Scatter from root: a Broadcast of all the pieces, each rank keeps its own."""
        def job() -> None:
            for i, out in enumerate(output_tensors):
                flat = (torch.cat([t.reshape(-1) for t in input_tensors[i]])
                        if self.rank() == opts.rootRank
                        else torch.empty(self.size() * out.numel(), dtype=out.dtype))
                self.comm.broadcast(flat, opts.rootRank)
                k = out.numel()
                out.copy_(flat[self.rank() * k:(self.rank() + 1) * k].view_as(out))
        return self._run("scatter", nbytes(output_tensors) * self.size(), job, output_tensors)

    def reduce_scatter(self, output_tensors: list[torch.Tensor],
                       input_tensors: list[list[torch.Tensor]], opts: Any) -> EmuWork:
        op = reduce_op(opts)

        def job() -> None:
            for out, ins in zip(output_tensors, input_tensors):
                flat = torch.cat([i.reshape(-1) for i in ins])
                work, back = contig(out)
                self.comm.reduce_scatter(work, flat, op)
                if back:
                    out.copy_(work)
        return self._run("reduce_scatter", nbytes(output_tensors) * self.size(), job,
                         output_tensors)

    def _reduce_scatter_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any) -> EmuWork:
        op = reduce_op(opts)

        def job() -> None:
            work, back = contig(output)
            self.comm.reduce_scatter(work, inp.contiguous(), op)
            if back:
                output.copy_(work)
        return self._run("reduce_scatter", nbytes([inp]), job, [output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any) -> EmuWork:
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else EmuWork(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> EmuWork:
        """Reduce to root: an AllReduce whose result only the root keeps."""
        op = reduce_op(opts)

        def job() -> None:
            for t in tensors:
                work = t.contiguous().clone()
                self.comm.allreduce(work, op)
                if self.rank() == opts.rootRank:
                    t.copy_(work)
        return self._run("reduce", nbytes(tensors), job, tensors)

    def alltoall_base(self, output: torch.Tensor, inp: torch.Tensor, output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any = None) -> EmuWork:
        """all_to_all_single: pieces of dim 0 by the split sizes ([] = equal)."""
        n = self.size()
        ob = split_bounds(list(output_split_sizes), n, output.shape[0] if output.dim() else 0)
        ib = split_bounds(list(input_split_sizes), n, inp.shape[0] if inp.dim() else 0)

        def job() -> None:
            work, back = contig(output)
            src = inp.contiguous()
            orow, irow = row_bytes(work), row_bytes(src)
            oraw, iraw = raw_bytes(work), raw_bytes(src)
            self.comm.alltoall([oraw[a * orow:b * orow] for a, b in ob],
                               [iraw[a * irow:b * irow] for a, b in ib])
            if back:
                output.copy_(work)
        return self._run("alltoall", nbytes([inp]), job, [output])

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                 opts: Any = None) -> EmuWork:
        """all_to_all: input_tensors[p] goes to rank p, output_tensors[p] comes from it."""
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise ValueError(f"emu backend: all_to_all needs {self.size()} input and output "
                             f"tensors, got {len(input_tensors)} and {len(output_tensors)}")

        def job() -> None:
            works = [contig(t) for t in output_tensors]
            self.comm.alltoall([raw_bytes(w) for w, _ in works],
                               [raw_bytes(t.contiguous()) for t in input_tensors])
            for t, (w, back) in zip(output_tensors, works):
                if back:
                    t.copy_(w)
        return self._run("alltoall", nbytes(input_tensors), job, output_tensors)

    def barrier(self, opts: Any = None) -> EmuWork:
        return self._run("barrier", 0, self.comm.barrier, None)

    # -- point to point ---------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> EmuWork:
        lane = self._lane()
        n = self.issued.setdefault("send", {"count": 0, "bytes": 0})
        n["count"] += 1
        n["bytes"] += nbytes(tensors)
        futs = [lane.send(t.contiguous(), dst) for t in tensors]
        return EmuWork(tensors, all_of(futs))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> EmuWork:
        lane = self._lane()
        n = self.issued.setdefault("recv", {"count": 0, "bytes": 0})
        n["count"] += 1
        n["bytes"] += nbytes(tensors)
        works = [contig(t) for t in tensors]
        futs = [lane.recv(w, src) for w, _ in works]
        pending = all_of(futs)
        if any(back for _, back in works):
            def copy_back(_: CFuture) -> None:
                for t, (w, back) in zip(tensors, works):
                    if back:
                        t.copy_(w)
            pending.add_done_callback(copy_back)
        return EmuWork(tensors, pending)

    # -- what emu does not do: fail at once, naming it -----------------------------------
    def recv_anysource(self, tensors: Any, tag: int = 0) -> EmuWork:
        raise NotImplementedError("emu backend: recv from any source (dist.recv without src) "
                                  "is not supported; name the source rank")

    def split_group(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("emu backend: split_group is not supported; use new_group")

    def merge_remote_group(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("emu backend: merge_remote_group is not supported")


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
