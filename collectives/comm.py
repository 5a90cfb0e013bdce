"""The communicator of one rank in one group: ring and tree collectives over channels.

Book ch.14: Broadcast over a tree ("same-host peers by NVLink, remote peers over QPs"),
ring AllReduce = ReduceScatter + AllGather with the ch.14 chunk schedule (Figs
14-5..14-17), on the rail-aware ring or the book's rank-order ring (`ring`, from
EMU_RING; `collectives.ring.ring_by`); ReduceScatter and AllGather on their own; point to
point send / recv (pipeline parallelism, ch.8). Workers register their buffers with
their NIC and connect only the QPs their algorithms need, when first needed (a ring
needs two per rank, a tree one per remote child), as NCCL connects its channels lazily.

Work is on flat CPU tensors; the bytes go through `collectives.channel` (RDMA WRITE WITH
IMMEDIATE between hosts, shared memory within a host), the reductions are torch ops on
the landing slots (sum, avg, product, min, max; any dtype torch can add).

Timing: every operation records its lab and model duration (lab / TDF, `emucore.timedil`)
in `history`; a ring one per step also its timestamps and the chunks sent and received
(`send_chunk`, `recv_chunk`: index in buffer order, the book's A=0, B=1, ...; for
ReduceScatter / AllGather the rank whose segment it is).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

from collectives.channel import (READY_BIT, SEQ_MASK, Channel, ChannelError, Events,
                                 RdmaChannel, ShmChannel, blocking_sender, note_event)
from collectives.rendezvous import PeerInfo
from emucore.runmark import shm_name
from emucore.timedil import TimeDilation
from collectives.ring import (Member, all_gather_steps, alltoall_steps, broadcast_tree,
                              chunk_bounds, reduce_scatter_steps, ring_by, schedule)
from traffic.nic.client import NicClient
from traffic.verbs import WCOpcode, WCStatus

log = logging.getLogger("collectives.comm")

DEFAULT_SLOT = 4 << 20  #: bytes per landing slot (a message)
DEFAULT_SLOTS = 2  #: landing slots per channel (messages in flight)
CM_BASE = 20000  #: CM ports: CM_BASE + 256 x group slot + connecting rank
CM_SLOTS = 160  #: group slots (lanes) a job can use: ports up to 60959
REDUCE_OPS = ("sum", "avg", "product", "min", "max")


def cm_port(slot: int, connector: int, master_port: int = 0) -> int:
    """The TCP port a listening rank expects `connector`'s CM REQ on, for one group
    lane (its job-unique slot, collectives.rendezvous.group_slots); never the job's
    MASTER_PORT, which rank 0's store holds on every address of its host."""
    if not 0 <= connector < 256:
        raise ValueError("groups of more than 256 ranks are not supported")
    if not 0 <= slot < CM_SLOTS:
        raise ValueError(f"group slot {slot}: a job can use {CM_SLOTS} group lanes "
                         f"({CM_SLOTS // 2} groups), this one is past them")
    port = CM_BASE + 256 * slot + connector
    if port == master_port:
        raise ValueError(f"the CM port of group slot {slot}, rank {connector} is "
                         f"MASTER_PORT {master_port}: choose another --master-port")
    return port


def group_index(name: str) -> int:
    """A small number for a torch group name ("0", "1", ... or a hash)."""
    return int(name) if name.isdigit() else zlib.crc32(name.encode())


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


class Communicator:
    """One rank's endpoint in a group of `peers` (indexed by group rank)."""

    def __init__(self, peers: list[PeerInfo], rank: int, uid: bytes, group: int = 0, *,
                 slot: int = DEFAULT_SLOT, slots: int = DEFAULT_SLOTS, timeout: float = 300.0,
                 td: TimeDilation = TimeDilation(1.0), ring: str = "rail",
                 run: str = "", master_port: int = 0) -> None:
        if slot % 64:
            raise ValueError("slot must be a multiple of 64 bytes")
        self.peers, self.rank, self.n, self.group = peers, rank, len(peers), group
        self.master_port = master_port
        self.me = peers[rank]
        self.slot, self.slots, self.timeout, self.td = slot, slots, timeout, td
        self.members = [Member(p.rank, p.host, p.rail) for p in peers]
        self.ring_kind, self.ring = ring, ring_by(ring, self.members)
        self.pos = self.ring.index(rank)
        self.events = Events()
        self.history: list[dict] = []
        self.channels: dict[int, Channel] = {}
        self._opened: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
        self._closed = threading.Event()
        tag = uid[:6].hex()
        self._shm_name = lambda owner, sender: (  # emu-<run>-ch-... in a run (emu clean)
            shm_name(run, "ch", f"{tag}-g{group}-{owner}-{sender}")
            or f"emu{tag}-g{group}-{owner}-{sender}")
        self._addr = lambda r: f"\0emu{tag}-g{group}-{r}"
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # blocking receive
        self._notify.bind(self._addr(rank))
        self._notify_tx = blocking_sender(timeout)
        self._threads = [threading.Thread(target=self._notify_loop, daemon=True,
                                          name=f"emu-notify-{rank}")]
        self._threads[0].start()
        self.nic: NicClient | None = None
        self._poll_nic: NicClient | None = None
        self.pd = self.cq = 0
        self._qp_peer: dict[int, int] = {}
        self._recv_seen: dict[int, int] = {}

    # -- pollers ----------------------------------------------------------------------
    def _notify_loop(self) -> None:
        while True:  # blocks in recv; close() shuts the socket down, recv then gives b""
            try:
                msg = self._notify.recv(64)
            except OSError:
                return
            if self._closed.is_set() or not msg:
                return
            self.events.post(*note_event(msg))

    def _cq_loop(self) -> None:
        try:
            while not self._closed.is_set():
                for wc in self._poll_nic.poll_cq(self.cq, 64, 0.5):
                    peer = self._qp_peer.get(wc.qp_num)
                    if peer is None:
                        continue
                    if wc.opcode is WCOpcode.RDMA_WRITE:
                        self.events.post(("sent", peer, wc.wr_id), wc.status.value)
                        continue
                    if wc.status is not WCStatus.SUCCESS:
                        self.events.fail(f"receive from rank {peer}: {wc.status.value}")
                        return
                    imm = wc.imm or 0
                    if imm & READY_BIT:
                        self.events.post(("ready", peer, imm & SEQ_MASK))
                    else:
                        self.events.post(("data", peer, imm & SEQ_MASK), wc.byte_len)
                    seen = self._recv_seen[wc.qp_num] = self._recv_seen[wc.qp_num] + 1
                    if seen % 512 == 0:
                        self.channels[peer].post_recvs(512)  # type: ignore[attr-defined]
        except Exception as exc:  # the NIC went away: wake every waiter with the reason
            if not self._closed.is_set():
                self.events.fail(f"NIC poller: {exc}")

    def _open_nic(self) -> None:
        if self.nic is not None:
            return
        if not self.me.nic_sock:
            raise ChannelError(f"rank {self.rank} ({self.me.gpu or 'no GPU'}) has no NIC, "
                               "but its group spans hosts")
        self.nic = NicClient(self.me.nic_sock, timeout=self.timeout)
        self._poll_nic = NicClient(self.me.nic_sock, timeout=self.timeout)
        self.pd = self.nic.alloc_pd()
        self.cq = self.nic.create_cq(depth=65536)
        t = threading.Thread(target=self._cq_loop, daemon=True, name=f"emu-cq-{self.rank}")
        t.start()
        self._threads.append(t)

    # -- channels ---------------------------------------------------------------------
    def ensure(self, peers: list[int]) -> None:
        """Open the channels to `peers` not open yet (QPs are connected here: listens
        first, then connects, then waits, so that no two ranks wait for each other)."""
        mine: list[int] = []
        with self._lock:
            for p in dict.fromkeys(peers):
                if p == self.rank or p in self._opened:
                    continue
                self._opened[p] = threading.Event()
                args = (self.rank, p, self.events, self.slot, self.slots, self.timeout)
                if self.peers[p].host == self.me.host:
                    self.channels[p] = ShmChannel(*args, name=self._shm_name,
                                                  notify=self._notify_tx, address=self._addr)
                else:
                    self._open_nic()
                    ch = RdmaChannel(*args, nic=self.nic, pd=self.pd, cq=self.cq)
                    self._qp_peer[ch.qpn] = p
                    self._recv_seen[ch.qpn] = 0
                    ch.post_recvs(2048)
                    if self.rank < p:
                        self.nic.listen(ch.qpn, cm_port(self.group, p, self.master_port),
                                        ch.landing_mr)
                    self.channels[p] = ch
                mine.append(p)
        try:
            for p in mine:  # connects first: they only need the peer to have listened
                ch = self.channels[p]
                if isinstance(ch, RdmaChannel) and self.rank > p:
                    ch.remote = self.nic.connect(ch.qpn, self.peers[p].fabric_ip,
                                                 cm_port(self.group, self.rank, self.master_port),
                                                 ch.landing_mr, timeout=self.timeout)
            for p in mine:
                ch = self.channels[p]
                if isinstance(ch, RdmaChannel) and self.rank < p:
                    ch.remote = self.nic.wait_connected(ch.qpn, timeout=self.timeout)
        finally:
            for p in mine:
                self._opened[p].set()
        for p in peers:
            if p != self.rank and not self._opened[p].wait(self.timeout):
                raise ChannelError(f"channel to rank {p} not opened in {self.timeout:g} s")
            if p != self.rank and isinstance(self.channels[p], RdmaChannel) \
                    and self.channels[p].remote is None:
                raise ChannelError(f"channel to rank {p} failed to connect")

    def _pool(self, kind: str, peer: int) -> ThreadPoolExecutor:
        key = (kind, peer)
        with self._lock:
            if key not in self._pools:
                self._pools[key] = ThreadPoolExecutor(1, thread_name_prefix=f"emu-{kind}{peer}")
            return self._pools[key]

    def _send(self, peer: int, data: memoryview) -> Future:
        """Queue a send to `peer` (in order per peer); the future ends when the bytes are
        copied out (into a staging MR or the peer's memory)."""
        return self._pool("tx", peer).submit(self.channels[peer].send, data)

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

    # -- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Finish queued sends, disconnect the QPs, free the memory, stop the pollers."""
        for pool in list(self._pools.values()):
            pool.shutdown(wait=True)
        for ch in self.channels.values():
            try:
                ch.flush()
            except ChannelError as exc:
                log.warning("rank %d: %s", self.rank, exc)
        self._closed.set()
        for ch in self.channels.values():
            ch.close()
        try:
            self._notify.shutdown(socket.SHUT_RDWR)  # wakes the notify loop's recv
        except OSError:
            pass
        for t in self._threads:
            t.join(2.0)
        self._notify.close()
        self._notify_tx.close()
        for c in (self.nic, self._poll_nic):
            if c is not None:
                c.close()

    def stats(self) -> dict:
        """Bytes each channel moved (payload, both directions)."""
        return {str(p): {"kind": "rdma" if isinstance(c, RdmaChannel) else "shm",
                         "tx_bytes": c.tx_bytes, "rx_bytes": c.rx_bytes}
                for p, c in self.channels.items()}
