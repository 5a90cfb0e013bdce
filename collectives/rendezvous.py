"""Job start: torchrun's variables and the unique-ID exchange (book ch.14 "Job start";
004 "Fabric Setup"; docs/FABRIC_FACTS.md "Job start and collectives").

torchrun gives every worker NODE_RANK, LOCAL_RANK, RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, with global rank = node_rank x nproc_per_node + local_rank. Rank 0 (Host-1
GPU-1) is the master: it listens on MASTER_PORT (torch's TCPStore server, which binds the
wildcard address - libuv: "::", else 0.0.0.0 - whatever MASTER_ADDR says), so the ranks
of its own host reach it over loopback (MASTER_ADDR 127.0.0.1, book L3487) and the
others over the frontend network (MASTER_ADDR Host-1's frontend address; the launcher
sets both, `collectives.launch`). emu binds no socket of its own here. It waits until the
WORLD_SIZE-1 other ranks have reported (job ID, rank, WORLD_SIZE and their fabric
address: the IP of their GPU NIC on the backend), then generates a 128-byte unique ID and
hands it to every rank together with the table of everybody's fabric address. The
channel is the store's TCP connection and stays open (later groups, barriers).

Every communication group (world, and TP / PP / DP groups) runs this over its own key
prefix, so it gets an ID of its own, as NCCL does with one ncclUniqueId per
communicator.

The exchange is plain `torch.distributed.Store` calls (set / wait / get), so it runs over
a TCPStore on the frontend in a job and over a HashStore in unit tests.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

UID_BYTES = 128  #: size of the unique ID, as NCCL_UNIQUE_ID_BYTES
TORCHRUN_VARS = ("NODE_RANK", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT")


class RendezvousError(RuntimeError):
    """The ranks of a group disagree (job, world size, duplicate ranks) or time out."""


def global_rank(node_rank: int, nproc_per_node: int, local_rank: int) -> int:
    """torchrun's rule: global rank = node_rank x nproc_per_node + local_rank."""
    if not 0 <= local_rank < nproc_per_node:
        raise ValueError(f"local_rank {local_rank} outside 0..{nproc_per_node - 1}")
    if node_rank < 0:
        raise ValueError(f"node_rank {node_rank} < 0")
    return node_rank * nproc_per_node + local_rank


def torchrun_env(node_rank: int, nproc_per_node: int, local_rank: int, nnodes: int,
                 master_addr: str, master_port: int) -> dict[str, str]:
    """The environment torchrun gives one worker."""
    return {"NODE_RANK": str(node_rank), "LOCAL_RANK": str(local_rank),
            "RANK": str(global_rank(node_rank, nproc_per_node, local_rank)),
            "WORLD_SIZE": str(nnodes * nproc_per_node),
            "LOCAL_WORLD_SIZE": str(nproc_per_node), "GROUP_RANK": str(node_rank),
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port)}


@dataclass(frozen=True)
class PeerInfo:
    """What a rank reports to the master: who and where it is."""

    job: str
    rank: int  # rank in the group
    world_size: int  # size of the group
    gpu: str = ""  # emulated GPU (h1g1)
    host: str = ""  # its server (h1): same host = shared memory, no QP
    rail: int = 0
    fabric_ip: str = ""  # the GPU NIC's address on the backend (RoCE)
    nic_sock: str = ""  # the NIC process's control socket (verbs)
    pid: int = 0

    @classmethod
    def from_json(cls, d: dict) -> "PeerInfo":
        """From the JSON a rank stored."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _key(name: str) -> str:
    return f"emu/{name}"


def bootstrap(store: Any, me: PeerInfo, timeout: float = 300.0) -> tuple[bytes, list[PeerInfo]]:
    """Run the exchange for one group: (128-byte unique ID, everybody's PeerInfo by rank).

    Every rank stores its PeerInfo; the master (rank 0) waits for all of them, checks
    them, draws the unique ID and stores ID + table under one key the others wait for.
    """
    if not 0 <= me.rank < me.world_size:
        raise RendezvousError(f"rank {me.rank} outside 0..{me.world_size - 1}")
    store.set(_key(f"hello/{me.rank}"), json.dumps(asdict(me)))
    td = timedelta(seconds=timeout)
    if me.rank == 0:
        keys = [_key(f"hello/{r}") for r in range(me.world_size)]
        try:
            store.wait(keys, td)
        except Exception as exc:  # torch raises DistStoreError / RuntimeError on timeout
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            raise RendezvousError(f"master: ranks {missing} did not report within "
                                  f"{timeout:g} s ({exc})") from exc
        peers = [PeerInfo.from_json(json.loads(store.get(k))) for k in keys]
        problems = [f"rank {p.rank} says job {p.job!r}" for p in peers if p.job != me.job]
        problems += [f"rank {p.rank} says WORLD_SIZE {p.world_size}" for p in peers
                     if p.world_size != me.world_size]
        problems += [f"key of rank {r} holds rank {p.rank}" for r, p in enumerate(peers)
                     if p.rank != r]
        if problems:
            store.set(_key("uid"), b"ERR" + "; ".join(problems).encode())
            raise RendezvousError("; ".join(problems))
        uid = os.urandom(UID_BYTES)
        store.set(_key("uid"), uid + json.dumps([asdict(p) for p in peers]).encode())
    try:
        store.wait([_key("uid")], td)
    except Exception as exc:
        raise RendezvousError(f"rank {me.rank}: no unique ID from the master within "
                              f"{timeout:g} s ({exc})") from exc
    blob = bytes(store.get(_key("uid")))
    if blob.startswith(b"ERR"):
        raise RendezvousError(f"master refused the group: {blob[3:].decode()}")
    uid, table = blob[:UID_BYTES], json.loads(blob[UID_BYTES:])
    return uid, [PeerInfo.from_json(d) for d in table]


def _base_store(store: Any) -> Any:
    """The job's store under a group's PrefixStore (torch gives each group its own
    prefix; the counter of group slots must be the job's)."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return store


def group_slots(store: Any, rank: int, lanes: int = 2, timeout: float = 300.0) -> int:
    """A job-unique number for one group, the first of `lanes` consecutive ones (its
    collective lane and its point-to-point lane): the group's rank 0 draws it from a
    counter in the job's store and hands it to the group's other ranks. It numbers the
    group's CM ports (collectives.endpoint.cm_port), so that no two groups of a job ever
    listen on the same port - a hash of the group name could collide."""
    if rank == 0:
        first = _base_store(store).add(_key("group-slots"), lanes) - lanes
        store.set(_key("slot"), str(first))
    try:
        store.wait([_key("slot")], timedelta(seconds=timeout))
    except Exception as exc:
        raise RendezvousError(f"rank {rank}: no group slot from the group's rank 0 within "
                              f"{timeout:g} s ({exc})") from exc
    return int(bytes(store.get(_key("slot"))).decode())
