"""One rank's endpoint in a group (collectives.comm's ground floor): its channels to the
other ranks, opened when first needed, and the pollers that feed their `Events` board.

Book ch.14 ("same-host peers by NVLink, remote peers over QPs"): a peer on the same host
is a shared-memory channel, one on another host an RDMA channel over the rank's NIC
(`collectives.channel`). QPs are connected only when an algorithm first needs them (a
ring needs two per rank, a tree one per remote child), as NCCL connects its channels
lazily; the connection manager's ports are `cm_port`'s. Two pollers block: one on a
datagram socket for the shared-memory notifications, one on the NIC's completion queue.
"""

from __future__ import annotations

import logging
import socket
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor

from collectives.channel import (READY_BIT, SEQ_MASK, Channel, ChannelError, Events,
                                 RdmaChannel, ShmChannel, blocking_sender, note_event)
from collectives.rendezvous import PeerInfo
from collectives.ring import Member, ring_by
from emucore.fidelity import LagMeter
from emucore.runmark import shm_name
from emucore.timedil import TimeDilation
from traffic.nic.client import NicClient
from traffic.workreq import WCOpcode, WCStatus

log = logging.getLogger("collectives.endpoint")

DEFAULT_SLOT = 4 << 20  #: bytes per landing slot (a message)
DEFAULT_SLOTS = 2  #: landing slots per channel (messages in flight)
CM_BASE = 20000  #: CM ports: CM_BASE + 256 x group slot + connecting rank
CM_SLOTS = 160  #: group slots (lanes) a job can use: ports up to 60959


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



class Endpoint:
    """One rank's endpoint in a group of `peers` (indexed by group rank): the ring
    order, the channels, the pollers (collectives.comm.Communicator runs the collectives)."""

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
        self.events = Events(LagMeter(td))
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
                for wc, at in self._poll_nic.poll_cq_stamped(self.cq, 64, 0.5):
                    peer = self._qp_peer.get(wc.qp_num)
                    if peer is None:
                        continue
                    if wc.opcode is WCOpcode.RDMA_WRITE:
                        self.events.post(("sent", peer, wc.wr_id), wc.status.value, at)
                        continue
                    if wc.status is not WCStatus.SUCCESS:
                        self.events.fail(f"receive from rank {peer}: {wc.status.value}")
                        return
                    imm = wc.imm or 0
                    if imm & READY_BIT:
                        self.events.post(("ready", peer, imm & SEQ_MASK), True, at)
                    else:
                        self.events.post(("data", peer, imm & SEQ_MASK), wc.byte_len, at)
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
