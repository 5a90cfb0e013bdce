"""Point-to-point channels between two ranks: RDMA over the fabric, or shared memory.

Book ch.14 (Broadcast and ring AllReduce: "same-host peers by NVLink, remote peers over
QPs") and ch.9 (RDMA WRITE with immediate into a registered buffer).

A channel carries a stream of messages in one direction per side, each at most `slot`
bytes, with a credit protocol: the receiver owns `slots` landing slots; message k
lands in slot k mod slots; after the receiver has consumed message k it returns a READY
for k, which frees that slot for message k + slots. Nothing is ever written into a slot
the receiver still reads, with no barrier and no extra round trip in steady state.

* `RdmaChannel`: one RC QP per pair of ranks (the lower rank listens, the higher
  connects, CM over the NICs' own IPs). Each side registers a landing MR (exposed to the
  peer at connection time, R_Key and address) and a staging MR it sends from. A message
  is an RDMA WRITE WITH IMMEDIATE (imm = message number) of the staging slot into the
  peer's landing slot; a READY is a zero-length WRITE WITH IMMEDIATE (bit 31 set).
* `ShmChannel`: the two GPUs share a host ("NVLink"): the sender copies straight into
  the receiver's landing slot (shared memory the receiver created) and notifies it with
  a datagram on the receiver's Unix socket; READY goes back the same way, and so does
  OPEN, which tells the peer that the landing memory exists (so a sender that came
  first waits for it instead of polling for the file).

Completions and notifications are collected by the endpoint's pollers
(`collectives.endpoint`) into an `Events` board the channels wait on. Nothing polls: every
wait blocks (a Condition, a socket receive, or a blocking `sendto` that the kernel holds
while the peer's datagram queue is full).

The fidelity guard (emucore.fidelity) sees the worker through the board: a wait that
blocked resumes some time after its event happened - a completion when the NIC completed
it (its CQ's stamp), a peer's note when it was posted - and everything the worker does next
- the reduction, the next message, the READY that frees the peer's slot - is that much
later in model time, where a GPU's collective reacts at once. `Events.meter` records each
such wake-up as a lag (happened -> resumed); the worker's record carries it and `emu run`
judges it with the agents' and NICs' ("h1g1 comm"). A wait whose event was already there
records nothing: the worker was busy elsewhere, which this does not see.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import defaultdict
from multiprocessing import shared_memory
from typing import Any, Callable, Iterator

from emucore.fidelity import LagMeter
from traffic.nic.client import MemoryRegion, NicClient, RemoteBuffer, attach_untracked

READY_BIT = 1 << 31
SEQ_MASK = READY_BIT - 1
NOTE = struct.Struct("!IBIQ")  # source rank, kind (see NOTE_KINDS), message number, bytes
NOTE_KINDS = ("data", "ready", "open")  #: a note's kind byte indexes this


def note_event(msg: bytes) -> tuple[tuple, Any]:
    """The Events key and value of a shared-memory notification datagram."""
    src, kind, seq, nbytes = NOTE.unpack(msg[:NOTE.size])
    return (NOTE_KINDS[kind], src, seq), (nbytes if kind == 0 else True)


def blocking_sender(timeout: float) -> socket.socket:
    """An unbound Unix datagram socket for notifications whose `sendto` blocks in the
    kernel while the receiver's queue is full (at most `timeout` s, then BlockingIOError).

    Not Python's settimeout: that makes the fd non-blocking and retries EAGAIN after a
    poll(), and poll() of an unconnected datagram socket does not look at the receiver's
    queue, so a full queue turned into a busy loop for the whole timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sec = int(timeout)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", sec, int((timeout - sec) * 1e6)))
    return s


class ChannelError(RuntimeError):
    """A peer failed (bad completion, timeout, vanished)."""


class Events:
    """A board of (kind, peer, seq) -> value that pollers post and channels wait on."""

    def __init__(self, meter: LagMeter | None = None) -> None:
        self._cv = threading.Condition()
        self._got: dict[tuple, Any] = {}
        self._at: dict[tuple, float] = {}  # lab time each event happened (with a meter)
        self.error: str | None = None
        self.counts: dict[str, int] = defaultdict(int)
        #: the waiters' wake-up lags (the module docstring); None: not measured
        self.meter = meter

    def post(self, key: tuple, value: Any = True, at: float | None = None) -> None:
        """Record an event and wake its waiter; `at`, when it happened (lab time: a
        completion's time on the NIC, CQ.poll_stamped), else now."""
        with self._cv:
            self._got[key] = value
            if self.meter is not None:
                self._at[key] = time.monotonic() if at is None else at
            self.counts[key[0]] += 1
            self._cv.notify_all()

    def fail(self, why: str) -> None:
        """Wake every waiter with an error (a poller died)."""
        with self._cv:
            self.error = why
            self._cv.notify_all()

    def wait(self, key: tuple, timeout: float) -> Any:
        """Block until `key` is posted; returns (and forgets) its value."""
        deadline = time.monotonic() + timeout
        with self._cv:
            blocked = key not in self._got
            while key not in self._got:
                if self.error:
                    raise ChannelError(self.error)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelError(f"timed out after {timeout:g} s waiting for {key}")
                self._cv.wait(left)  # post() and fail() notify
            if self.meter is not None:
                at = self._at.pop(key)
                if blocked:  # it happened at `at`, this waiter runs again now
                    self.meter.record(at, time.monotonic(), key[0])
            return self._got.pop(key)


class Channel:
    """The credit protocol; subclasses move the bytes."""

    def __init__(self, me: int, peer: int, events: Events, slot: int, slots: int,
                 timeout: float) -> None:
        self.me, self.peer, self.events = me, peer, events
        self.slot, self.slots, self.timeout = slot, slots, timeout
        self.tx_seq = 0  # next message number to send
        self.rx_seq = 0  # next message number to receive
        self.tx_bytes = 0
        self.rx_bytes = 0
        self.landing: memoryview  # slots x slot bytes the peer writes into

    # -- sending ----------------------------------------------------------------------
    def send(self, data: memoryview) -> None:
        """Send `data` as ceil(len/slot) messages (blocks for credits, not for delivery
        of the last message)."""
        data = memoryview(data).cast("B")
        for off in range(0, max(len(data), 1), self.slot):
            k = self.tx_seq
            if k >= self.slots:  # slot k % slots is free once the peer consumed k - slots
                self.events.wait(("ready", self.peer, (k - self.slots) & SEQ_MASK), self.timeout)
            self._put(k, data[off:off + self.slot])
            self.tx_seq += 1
            self.tx_bytes += len(data[off:off + self.slot])

    def flush(self) -> None:
        """Wait until every message sent so far has been delivered (send completions)."""

    def _put(self, k: int, part: memoryview) -> None:
        raise NotImplementedError

    def _ready(self, k: int) -> None:
        raise NotImplementedError

    # -- receiving --------------------------------------------------------------------
    def messages(self, nbytes: int) -> Iterator[memoryview]:
        """Yield the landing slots holding the next `nbytes` bytes, message by message;
        each slot is handed back to the sender when the consumer asks for the next one."""
        left = nbytes
        while True:
            k = self.rx_seq
            got = self.events.wait(("data", self.peer, k & SEQ_MASK), self.timeout)
            want = min(left, self.slot)
            if got != want:
                raise ChannelError(f"rank {self.me}: message {k} from rank {self.peer} has "
                                   f"{got} B, expected {want} B (ranks out of step?)")
            i = k % self.slots
            view = self.landing[i * self.slot:i * self.slot + got]
            try:
                yield view
            finally:
                view.release()
            self.rx_seq += 1
            self.rx_bytes += got
            self._ready(k)
            left -= got
            if left <= 0:
                return

    def recv_into(self, dst: memoryview) -> None:
        """Receive exactly len(dst) bytes into dst."""
        dst = memoryview(dst).cast("B")
        off = 0
        for m in self.messages(len(dst)):
            dst[off:off + len(m)] = m
            off += len(m)

    def close(self) -> None:
        """Release what the channel holds."""


class ShmChannel(Channel):
    """Two GPUs of one host: copy into the peer's landing shared memory ("NVLink").

    `notify` sends the notes; it must block (`blocking_sender`), not have a timeout."""

    def __init__(self, me: int, peer: int, events: Events, slot: int, slots: int,
                 timeout: float, name: Callable[[int, int], str], notify: socket.socket,
                 address: Callable[[int], str]) -> None:
        super().__init__(me, peer, events, slot, slots, timeout)
        self._shm = shared_memory.SharedMemory(name=name(me, peer), create=True,
                                               size=slot * slots)
        self.landing = self._shm.buf[:slot * slots]
        self._notify, self._peer_addr = notify, address(peer)
        self._peer_shm: shared_memory.SharedMemory | None = None
        self._peer_name = name(peer, me)
        self._note(2, 0, 0)  # OPEN: our landing memory exists

    def _remote(self) -> memoryview:
        if self._peer_shm is None:  # the peer creates it when it opens its side
            try:
                self._peer_shm = attach_untracked(self._peer_name)
            except (FileNotFoundError, ValueError):
                # Not yet: its OPEN follows the creation. (ValueError: "cannot mmap an
                # empty file" - the peer's shm_open had made it, its ftruncate had not yet
                # sized it.) An OPEN that found our socket unbound was sent before we
                # bound it, so before this attempt: then the memory existed already, sized,
                # and the attach above succeeded.
                try:
                    self.events.wait(("open", self.peer, 0), self.timeout)
                except ChannelError as exc:
                    raise ChannelError(f"rank {self.peer} never opened its side ({exc})")
                self._peer_shm = attach_untracked(self._peer_name)
        return self._peer_shm.buf

    def _note(self, kind: int, k: int, n: int) -> None:
        msg = NOTE.pack(self.me, kind, k & SEQ_MASK, n)
        try:
            self._notify.sendto(msg, self._peer_addr)  # blocks while its queue is full
        except (BlockingIOError, TimeoutError) as exc:  # SO_SNDTIMEO ran out
            raise ChannelError(f"rank {self.peer} took no notification for "
                               f"{self.timeout:g} s") from exc
        except (ConnectionError, FileNotFoundError):
            # The peer bound its socket before it created the memory we wrote into,
            # so a refusal means it has finished and closed (EPIPE when it closed while
            # this send waited for room in its queue). A READY for it is moot
            # (it may legitimately exit before taking back its last slot); data is not.
            # An OPEN may also precede the peer's socket: see _remote.
            if kind in (1, 2):
                return
            raise ChannelError(f"rank {self.peer} has gone (its notify socket is closed)")

    def _put(self, k: int, part: memoryview) -> None:
        i = k % self.slots
        self._remote()[i * self.slot:i * self.slot + len(part)] = part
        self._note(0, k, len(part))

    def _ready(self, k: int) -> None:
        self._note(1, k, 0)

    def close(self) -> None:
        self.landing.release()
        for shm, unlink in ((self._shm, True), (self._peer_shm, False)):
            if shm is None:
                continue
            try:
                shm.close()
            except BufferError:
                pass
            if unlink:
                try:
                    shm.unlink()
                except FileNotFoundError:
                    pass


class RdmaChannel(Channel):
    """Two GPUs on different hosts: RC QP, WRITE WITH IMMEDIATE between registered MRs."""

    def __init__(self, me: int, peer: int, events: Events, slot: int, slots: int,
                 timeout: float, nic: NicClient, pd: int, cq: int) -> None:
        super().__init__(me, peer, events, slot, slots, timeout)
        self.nic = nic
        self.landing_mr: MemoryRegion = nic.reg_mr(pd, slot * slots)
        self.staging_mr: MemoryRegion = nic.reg_mr(pd, slot * slots)
        self.landing = self.landing_mr.buf
        self.qpn = nic.create_qp(pd, cq)
        self.remote: RemoteBuffer | None = None
        self.recv_posted = 0
        self._sent_upto = 0  # messages whose send completion has been seen

    def post_recvs(self, n: int) -> None:
        """Receive WRs for n incoming WRITEs with immediate."""
        self.nic.post_recv(self.qpn, list(range(self.recv_posted, self.recv_posted + n)))
        self.recv_posted += n

    def _put(self, k: int, part: memoryview) -> None:
        i = k % self.slots
        if k >= self.slots:  # the staging slot is free once its last write completed
            self._completions_upto(k - self.slots)
        self.staging_mr.buf[i * self.slot:i * self.slot + len(part)] = part
        self.nic.post_write(self.qpn, k & SEQ_MASK, self.staging_mr, i * self.slot, len(part),
                            self.remote, remote_offset=i * self.slot, imm=k & SEQ_MASK)

    def _completions_upto(self, last: int) -> None:
        while self._sent_upto <= last:
            k = self._sent_upto & SEQ_MASK
            status = self.events.wait(("sent", self.peer, k), self.timeout)
            if status != "SUCCESS":
                raise ChannelError(f"rank {self.me} -> rank {self.peer}: write {k} {status}")
            self._sent_upto += 1

    def flush(self) -> None:
        self._completions_upto(self.tx_seq - 1)

    def _ready(self, k: int) -> None:
        self.nic.post_write(self.qpn, 0, self.staging_mr, 0, 0, self.remote,
                            imm=READY_BIT | (k & SEQ_MASK), signaled=False)

    def close(self) -> None:
        self.landing.release()
        for fn in (lambda: self.nic.destroy_qp(self.qpn),
                   lambda: self.nic.dereg_mr(self.landing_mr),
                   lambda: self.nic.dereg_mr(self.staging_mr)):
            try:
                fn()
            except Exception:
                pass
        for mr in (self.landing_mr, self.staging_mr):
            try:
                mr.close()
            except BufferError:
                pass
