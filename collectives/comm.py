"""The communicator of one rank in one group: ring and tree collectives over channels.

Book ch.14: Broadcast over a tree ("same-host peers by NVLink, remote peers over QPs"),
ring AllReduce = ReduceScatter + AllGather with the ch.14 chunk schedule (Figs
14-5..14-17), on the rail-aware ring or the book's rank-order ring (`ring`, from
EMU_RING; `collectives.ring.ring_by`); ReduceScatter and AllGather on their own; point to
point send / recv (pipeline parallelism, ch.8). The channels to the other ranks, opened
when first needed, are the rank's `collectives.endpoint.Endpoint`.

Work is on flat CPU tensors; the bytes go through `collectives.channel` (RDMA WRITE WITH
IMMEDIATE between hosts, shared memory within a host), the reductions are torch ops on
the landing slots (sum, avg, product, min, max; any dtype torch can add).

Timing: every operation records its lab and model duration (lab / TDF, `emucore.timedil`)
in `history`; a ring one per step also its timestamps and the chunks sent and received
(`send_chunk`, `recv_chunk`: index in buffer order, the book's A=0, B=1, ...; for
ReduceScatter / AllGather the rank whose segment it is).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Callable

import torch

from collectives.endpoint import Endpoint
from collectives.ring import (all_gather_steps, alltoall_steps, broadcast_tree, chunk_bounds,
                              reduce_scatter_steps, schedule)

REDUCE_OPS = ("sum", "avg", "product", "min", "max")


def reduce_into(dst: torch.Tensor, src: torch.Tensor, op: str) -> None:
    """dst = dst (op) src, in place (avg accumulates a sum; divide at the end)."""
    if op in ("sum", "avg"):
        dst.add_(src)
    elif op == "product":
        dst.mul_(src)
    elif op == "min":
        torch.minimum(dst, src, out=dst)
    elif op == "max":
        torch.maximum(dst, src, out=dst)
    else:
        raise ValueError(f"reduce op {op!r} not supported (one of {', '.join(REDUCE_OPS)})")


def raw_bytes(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, shared (writes land in the tensor)."""
    if not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("collectives work on contiguous CPU tensors")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


class Communicator(Endpoint):
    """One rank's collectives in its group, over the channels of its `Endpoint`."""

    # -- collectives ------------------------------------------------------------------
    def _op(self, name: str, nbytes: int, fn: Callable[[list], None]) -> dict:
        steps: list = []
        t0 = time.monotonic()
        fn(steps)
        t1 = time.monotonic()
        model = self.td.model_time
        rec = {"op": name, "bytes": nbytes, "ranks": self.n, "tdf": self.td.tdf, "t0_lab": t0,
               "seconds_lab": t1 - t0, "seconds_model": model(t1 - t0),
               "steps": [{"step": i, "phase": ph, "t_start_s": model(a - t0),
                          "t_end_s": model(b - t0), **extra}
                         for i, (ph, a, b, extra) in enumerate(steps)]}
        self.history.append(rec)
        return rec

    def _ring(self, buf: torch.Tensor, plan: list[dict], bounds: list[tuple[int, int]],
              op: str, steps: list, labels: list[int] | None = None) -> None:
        """Run ring steps, streamed: from the second step on, what a rank sends is what it
        received (and reduced) the step before, so each landed message is forwarded as
        soon as it is consumed (as NCCL pipelines a step in slices) instead of waiting
        for the whole chunk. labels[c]: the chunk bounds[c] is, as recorded per step
        (default c: chunk c of the buffer)."""
        n, p = self.n, self.pos
        labels = labels or list(range(len(bounds)))
        nxt, prv = self.ring[(p + 1) % n], self.ring[(p - 1) % n]
        self.ensure([nxt, prv])
        raw, isz = raw_bytes(buf), buf.element_size()
        c0, c1 = bounds[plan[0]["send"][p]]
        futs = [self._send(nxt, raw[c0 * isz:c1 * isz])]
        for s, st in enumerate(plan):
            a = time.monotonic()
            d0, d1 = bounds[st["recv"][p]]
            forward = s + 1 < len(plan)
            if forward and plan[s + 1]["send"][p] != st["recv"][p]:
                raise AssertionError("ring schedule: a step must send what the last received")
            at = d0
            for m in self.channels[prv].messages((d1 - d0) * isz):
                k = len(m) // isz
                if st["phase"] == "reduce-scatter":
                    if k:
                        reduce_into(buf[at:at + k], torch.frombuffer(m, dtype=buf.dtype), op)
                else:
                    raw[at * isz:(at + k) * isz] = m
                if forward:
                    futs.append(self._send(nxt, raw[at * isz:(at + k) * isz]))
                at += k
            steps.append((st["phase"], a, time.monotonic(), {
                "send_chunk": labels[st["send"][p]], "recv_chunk": labels[st["recv"][p]]}))
        for f in futs:
            f.result()

    def allreduce(self, buf: torch.Tensor, op: str = "sum") -> dict:
        """Ring AllReduce in place of a flat contiguous tensor (ch.14 schedule)."""
        flat = buf.reshape(-1)
        if self.n > 1:
            rec = self._op("allreduce", flat.numel() * flat.element_size(), lambda st: self._ring(
                flat, schedule(self.n), chunk_bounds(flat.numel(), self.n), op, st))
        else:
            rec = {}
        if op == "avg":
            if flat.is_floating_point() or flat.is_complex():
                flat.div_(self.n)
            else:
                flat.floor_divide_(self.n)
        return rec

    def _segments(self, count: int) -> list[tuple[int, int]]:
        """Chunk c of a ring pass = the segment of the rank at ring position c."""
        return [(r * count, (r + 1) * count) for r in self.ring]

    def allgather(self, out: torch.Tensor, inp: torch.Tensor) -> dict:
        """out (n x count, by group rank) = every rank's inp (count)."""
        out, inp = out.reshape(-1), inp.reshape(-1)
        count = inp.numel()
        if out.numel() != count * self.n:
            raise ValueError(f"allgather: output has {out.numel()} elements, want {count * self.n}")
        out[self.rank * count:(self.rank + 1) * count].copy_(inp)
        if self.n == 1:
            return {}
        return self._op("allgather", out.numel() * out.element_size(), lambda st: self._ring(
            out, all_gather_steps(self.n, 0), self._segments(count), "sum", st, self.ring))

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, op: str = "sum") -> dict:
        """out (count) = the reduction over ranks of segment `rank` of inp (n x count)."""
        out, work = out.reshape(-1), inp.reshape(-1).clone()
        count = out.numel()
        if work.numel() != count * self.n:
            raise ValueError(f"reduce_scatter: input has {work.numel()} elements, "
                             f"want {count * self.n}")
        rec = {} if self.n == 1 else self._op(
            "reduce_scatter", work.numel() * work.element_size(), lambda st: self._ring(
                work, reduce_scatter_steps(self.n, 0), self._segments(count), op, st, self.ring))
        out.copy_(work[self.rank * count:(self.rank + 1) * count])
        if op == "avg":
            out.div_(self.n) if out.is_floating_point() else out.floor_divide_(self.n)
        return rec

    def broadcast(self, buf: torch.Tensor, root: int) -> dict:
        """Tree Broadcast from `root` (binomial over hosts, then shared memory)."""
        if self.n == 1:
            return {}
        flat = buf.reshape(-1)
        raw = raw_bytes(flat)
        parent, children = broadcast_tree(self.members, root)[self.rank]

        def run(steps: list) -> None:
            a = time.monotonic()
            self.ensure(([] if parent is None else [parent]) + children)
            futs: list[Future] = []
            if parent is None:
                futs = [self._send(c, raw) for c in children]
            else:
                off = 0
                for m in self.channels[parent].messages(len(raw)):
                    raw[off:off + len(m)] = m
                    futs += [self._send(c, raw[off:off + len(m)]) for c in children]
                    off += len(m)
            for f in futs:
                f.result()
            steps.append(("broadcast", a, time.monotonic(), {}))
        return self._op("broadcast", len(raw), run)

    def alltoall(self, outs: list[memoryview], ins: list[memoryview]) -> dict:
        """All-to-all by pairwise exchange (`alltoall_steps`): ins[p] (bytes) goes to rank
        p, outs[p] receives what rank p has for this rank; pieces may differ in size (the
        two ends of a pair agree on it) and be empty."""
        n, r = self.n, self.rank
        if len(outs) != n or len(ins) != n:
            raise ValueError(f"alltoall: {len(outs)} outputs and {len(ins)} inputs for {n} ranks")
        if len(outs[r]) != len(ins[r]):
            raise ValueError(f"alltoall: rank {r} keeps {len(ins[r])} B but expects "
                             f"{len(outs[r])} B from itself")
        outs[r][:] = ins[r]
        if n == 1:
            return {}
        plan = alltoall_steps(r, n)

        def run(steps: list) -> None:
            self.ensure([p for p in range(n) if p != r])
            futs = [self._send(dst, ins[dst]) for dst, _ in plan]
            for dst, src in plan:
                a = time.monotonic()
                self.channels[src].recv_into(outs[src])
                steps.append(("alltoall", a, time.monotonic(), {"send_to": dst,
                                                                "recv_from": src}))
            for f in futs:
                f.result()
        return self._op("alltoall", sum(len(x) for x in ins), run)

    def barrier(self) -> dict:
        """Every rank has arrived: an AllReduce of one integer."""
        return self.allreduce(torch.zeros(1, dtype=torch.int32))

    # -- point to point ---------------------------------------------------------------
    def send(self, buf: torch.Tensor, peer: int) -> Future:
        """Send a contiguous tensor to `peer` (asynchronous; in order per peer)."""
        raw = raw_bytes(buf)

        def job() -> None:
            self.ensure([peer])
            self.channels[peer].send(raw)
        return self._pool("tx", peer).submit(job)

    def recv(self, buf: torch.Tensor, peer: int) -> Future:
        """Receive into a contiguous tensor from `peer` (asynchronous; in order per peer)."""
        raw = raw_bytes(buf)

        def job() -> None:
            self.ensure([peer])
            self.channels[peer].recv_into(raw)
        return self._pool("rx", peer).submit(job)
