"""Collective schedules, pure (book ch.14 "ring AllReduce step by step", "Broadcast").

Everything here is arithmetic on ranks and chunk indices, used by the communicator
(`collectives.comm`) and unit-tested against the ch.14 walk-through (Figs 14-5..14-17).

* Ring order (`ring_by`, chosen by EMU_RING / `emu run --ring`): "rail" (default) is
  rail-aware, as NCCL builds its rings: rail 1 through hosts 1..H, rail 2 back through
  hosts H..1, ... so every inter-host hop stays on one rail (one rail switch, no spine)
  and the hops between two GPUs of a host use shared memory. "rank" is the book's ring
  of Fig 14-5, 0 -> 1 -> ... -> N-1 -> 0 in rank order (its inter-host hops may cross
  rails, through a spine).
* Ring AllReduce (ch.14): the buffer is cut into N chunks. ReduceScatter, N-1 steps: at
  step s the rank at ring position r sends chunk (r - s) mod N to r+1 and adds what it
  receives, chunk (r - s - 1) mod N, from r-1; then r owns the reduced chunk (r + 1) mod
  N. AllGather, N-1 steps: at step s r sends chunk (r + 1 - s) mod N and stores chunk
  (r - s) mod N. Every rank sends and receives 2(N-1)/N x S bytes.
* ReduceScatter / AllGather as operations of their own are the same two halves with the
  chunk labels shifted so that position r ends with (or starts from) chunk r + offset.
* Broadcast: a binomial tree over one "leader" GPU per host (the GPU on the root's rail,
  so the tree stays on one rail), and under each leader its host's other GPUs (shared
  memory, "NVLink", no QP).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

RING_KINDS = ("rail", "rank")  #: ring orders: rail-aware (NCCL-like), the book's rank order


@dataclass(frozen=True)
class Member:
    """A rank of a communication group and where its GPU sits."""

    rank: int
    host: str
    rail: int


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def ring_positions(members: Iterable[Member]) -> list[int]:
    """Ranks in rail-aware ring order: rail 1 over hosts in order, the next rail back, ..."""
    ms = list(members)
    hosts = sorted({m.host for m in ms}, key=_natural)
    rails = sorted({m.rail for m in ms})
    order: list[int] = []
    for i, rail in enumerate(rails):
        for h in (hosts if i % 2 == 0 else hosts[::-1]):
            order += sorted(m.rank for m in ms if m.host == h and m.rail == rail)
    return order


def ring_by(kind: str, members: Iterable[Member]) -> list[int]:
    """Ranks in ring order: "rail" (`ring_positions`) or "rank" (0 -> 1 -> ..., Fig 14-5)."""
    if kind == "rail":
        return ring_positions(members)
    if kind == "rank":
        return sorted(m.rank for m in members)
    raise ValueError(f"EMU_RING: ring order must be one of {', '.join(RING_KINDS)}, "
                     f"got {kind!r}")


def ring_order(fabric: Any) -> list[str]:
    """The rail-aware ring over all GPUs of a fabric, as GPU names (h1g1, h2g1, ...)."""
    names = sorted(fabric.gpus, key=_natural)
    ms = [Member(i, fabric.gpus[g].host, fabric.gpus[g].rail) for i, g in enumerate(names)]
    return [names[r] for r in ring_positions(ms)]


def chunk_bounds(count: int, n: int) -> list[tuple[int, int]]:
    """Element ranges of n chunks (the first count % n chunks one element longer)."""
    base, extra = divmod(count, n)
    out, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def reduce_scatter_steps(n: int, own: int = 1) -> list[dict]:
    """Ring ReduceScatter after which position r owns the reduced chunk (r + own) mod n:
    per step the chunk each position sends to r+1 and the chunk it receives from r-1."""
    return [{"phase": "reduce-scatter",
             "send": [(r + own - 1 - s) % n for r in range(n)],
             "recv": [(r + own - 2 - s) % n for r in range(n)]} for s in range(n - 1)]


def all_gather_steps(n: int, own: int = 1) -> list[dict]:
    """Ring AllGather where position r starts with chunk (r + own) mod n."""
    return [{"phase": "all-gather",
             "send": [(r + own - s) % n for r in range(n)],
             "recv": [(r + own - 1 - s) % n for r in range(n)]} for s in range(n - 1)]


def schedule(n: int) -> list[dict]:
    """Ring AllReduce of ch.14: ReduceScatter (r sends r - s) then AllGather (r + 1 - s)."""
    return reduce_scatter_steps(n, 1) + all_gather_steps(n, 1)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw: 2(n-1)/n for AllReduce, (n-1)/n for AllGather and
    ReduceScatter, 1 for Broadcast."""
    return {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n,
            "reduce_scatter": (n - 1) / n, "broadcast": 1.0}[op]


def bus_bandwidth(size_bytes: int, seconds_model: float, n: int,
                  op: str = "allreduce") -> tuple[float, float]:
    """nccl-tests: (algbw, busbw) in bit/s; busbw = algbw x 2(n-1)/n for AllReduce."""
    alg = size_bytes * 8 / seconds_model
    return alg, alg * bus_factor(op, n)


def broadcast_tree(members: Iterable[Member], root: int) -> dict[int, tuple[int | None, list[int]]]:
    """rank -> (parent, children) of the broadcast tree from `root`: a binomial tree
    over one leader per host (the GPU on the root's rail, else the lowest rank), the
    host's other GPUs under their leader. Remote children come first in each list, so
    the slow fabric transfers start before the shared-memory copies."""
    ms = {m.rank: m for m in members}
    if root not in ms:
        raise ValueError(f"root {root} is not in the group")
    rm = ms[root]
    hosts = sorted({m.host for m in ms.values()}, key=_natural)
    hosts.remove(rm.host)
    hosts.insert(0, rm.host)  # the root's host first: its leader is the root
    leaders = []
    for h in hosts:
        local = sorted(r for r, m in ms.items() if m.host == h)
        on_rail = [r for r in local if ms[r].rail == rm.rail]
        leaders.append(root if h == rm.host else (on_rail or local)[0])
    tree: dict[int, tuple[int | None, list[int]]] = {r: (None, []) for r in ms}
    span = 1
    while span < len(leaders):  # round k: leader i < 2^k sends to i + 2^k
        for i in range(span):
            j = i + span
            if j < len(leaders):
                tree[leaders[i]][1].append(leaders[j])
                tree[leaders[j]] = (leaders[i], tree[leaders[j]][1])
        span *= 2
    for li, h in zip(leaders, hosts):
        for r in sorted(r for r, m in ms.items() if m.host == h and r != li):
            tree[li][1].append(r)
            tree[r] = (li, tree[r][1])
    return tree


def alltoall_steps(rank: int, n: int) -> list[tuple[int, int]]:
    """Pairwise exchange of an all-to-all (expert parallelism): at step k = 1..n-1 rank r
    sends its piece for (r + k) mod n and receives the piece (r - k) mod n has for it, so
    every pair exchanges exactly once and no rank waits on two senders at a step."""
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} outside 0..{n - 1}")
    return [((rank + k) % n, (rank - k) % n) for k in range(1, n)]


def split_bounds(splits: list[int], n: int, rows: int) -> list[tuple[int, int]]:
    """Row ranges [start, end) of the n pieces of a tensor of `rows` rows along dim 0 cut
    by `splits` (all_to_all_single's split sizes; [] = n equal pieces)."""
    if not splits:
        if rows % n:
            raise ValueError(f"{rows} rows do not split evenly over {n} ranks: give split sizes")
        splits = [rows // n] * n
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != rows:
        raise ValueError(f"split sizes {list(splits)}: want {n} sizes >= 0 adding up to {rows}")
    out, at = [], 0
    for s in splits:
        out.append((at, at + s))
        at += s
    return out
