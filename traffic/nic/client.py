"""The worker side of the emulated RDMA NIC: a small verbs-like client (book ch.9).

A worker (later: a PyTorch rank) never touches packets. As in book ch.9 (Figures 9-2
"Memory Allocation and Registration", 9-3 "Create Queue Pairs", 9-4 "RDMA Connection
Initiation", 9-5/9-6 "Work Request Message") it allocates a protection domain, registers
memory (a `multiprocessing.shared_memory` block the NIC process maps too, so the NIC
places received payloads directly into it; named after the NIC's run, emucore.runmark),
creates completion queues and an RC queue pair, connects the QP to a peer (the NIC
runs the REQ/REP/RTU exchange over TCP on its own IP, the book's management connection,
which also carries the R_Key and address of the memory each side exposes), posts RDMA
WRITE work requests and polls completions.

The NIC process (`traffic.nic.main`) serves one Unix stream socket per GPU NIC,
``/run/emu/<tag>/nic-<gpu>.sock``; the protocol is one JSON object per line each way:
``{"cmd": "reg_mr", ...}`` -> ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.

Typical use (one side listens, the other connects; both then write into each other)::

    nic = NicClient(sock_path)
    pd = nic.alloc_pd()
    mr = nic.reg_mr(pd, 16 << 20)                 # creates the shared memory too
    cq = nic.create_cq()
    qp = nic.create_qp(pd, cq)
    peer = nic.connect(qp, "10.0.2.14", port=18515, mr=mr)   # peer called listen(qp, 18515, mr)
    nic.post_write(qp, 1, mr, 0, len(data), peer, imm=7)     # into the peer's buffer
    [wc] = nic.wait(cq, 1, timeout=60)            # wc.status is WCStatus.SUCCESS
"""

from __future__ import annotations

import _posixshmem  # type: ignore[import-not-found]  # what SharedMemory opens with
import hashlib
import json
import mmap
import os
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

from emucore.ctlsock import encode, exchange
from emucore.runmark import shm_name
from traffic.verbs import Access
from traffic.workreq import WC, WCOpcode, WCStatus

__all__ = ["CM_PORT", "NicError", "MemoryRegion", "RemoteBuffer", "NicClient", "request",
           "wc_to_json", "wc_from_json", "access_from_json", "attach_untracked",
           "UntrackedSharedMemory", "new_shm", "fill_random", "digest", "is_zero"]

CM_PORT = 18515  #: default CM (management connection) TCP port, as ib_write_bw's


class NicError(Exception):
    """The NIC refused a request (bad arguments, wrong QP state, CM reject, timeout)."""


def access_from_json(v: Any) -> Access:
    """Access flags from an int or a list of names ("LOCAL_WRITE", "REMOTE_WRITE", ...)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return Access(v)
    if isinstance(v, (list, tuple)):
        out = Access.LOCAL_READ
        for name in v:
            try:
                out |= Access[str(name).upper()]
            except KeyError as e:
                raise ValueError(f"access: unknown flag {name!r}") from e
        return out
    raise ValueError(f"access: int or list of flag names, got {v!r}")


def wc_to_json(wc: WC) -> dict:
    """A work completion as a JSON object."""
    return {"wr_id": wc.wr_id, "status": wc.status.value, "opcode": wc.opcode.value,
            "byte_len": wc.byte_len, "qp_num": wc.qp_num, "imm": wc.imm}


def wc_from_json(d: dict) -> WC:
    """The inverse of `wc_to_json`."""
    return WC(d["wr_id"], WCStatus(d["status"]), WCOpcode(d["opcode"]), d["byte_len"],
              d["qp_num"], d.get("imm"))


def fill_random(view: memoryview) -> None:
    """Random bytes in all of `view`."""
    view[:] = os.urandom(len(view))


def digest(view: memoryview) -> str:
    """SHA-256 of `view`'s bytes (two buffers compared without moving them)."""
    return hashlib.sha256(view).hexdigest()


def is_zero(view: memoryview) -> bool:
    """No byte of `view` was written."""
    return bytes(view).count(0) == len(view)


@dataclass
class MemoryRegion:
    """A registered buffer: shared memory of the worker, keys from the NIC. `shm` is a
    SharedMemory here, or a block on the NIC's own server (emu.cluster.net.RemoteShm:
    `name`, `close`, `unlink`, and `fill_random`, `digest`, `is_zero` made there)."""

    shm: shared_memory.SharedMemory
    lkey: int
    rkey: int
    addr: int
    length: int
    owner: bool = True  # this client created the shared memory (and unlinks it)

    @property
    def buf(self) -> memoryview:
        """The bytes of the region (read results here, write data to send here)."""
        return self.shm.buf[:self.length]

    @property
    def here(self) -> bool:
        return isinstance(self.shm, shared_memory.SharedMemory)

    def fill_random(self) -> None:
        """Random bytes in the whole region, where its memory is."""
        if self.here:
            fill_random(self.buf)
        else:
            self.shm.fill_random(self.length)

    def digest(self) -> str:
        """SHA-256 of the region's bytes, computed where its memory is."""
        return digest(self.buf) if self.here else self.shm.digest(self.length)

    def is_zero(self) -> bool:
        """No byte of the region was written (checked where its memory is)."""
        return is_zero(self.buf) if self.here else self.shm.is_zero(self.length)

    def close(self) -> None:
        """Unmap (and unlink, if we created it); deregister it with the NIC first."""
        self.shm.close()
        if self.owner:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass


@dataclass(frozen=True)
class RemoteBuffer:
    """What the peer exposed at connection time: where and with which R_Key to write."""

    ip: str
    qpn: int
    rkey: int
    addr: int
    length: int

    @classmethod
    def from_json(cls, d: dict) -> "RemoteBuffer":
        """From a connect / wait_connected reply."""
        return cls(d["remote_ip"], d["remote_qpn"], d["rkey"], d["addr"], d["length"])


def request(path: str, payload: dict, timeout: float = 10.0) -> dict:
    """One request on a fresh connection (for tools: counters, ping); raises NicError
    when ok is false. The reply may take `timeout`, at least 5 s (as `NicClient.call`)."""
    cmd = payload["cmd"]
    return _checked(cmd, exchange(path, {"cmd": cmd, **payload}, max(timeout, 5.0)))


def _checked(cmd: str, line: bytes) -> dict:
    """The reply in `line` to `cmd`; NicError when it is none or not ok."""
    if not line:
        raise NicError(f"{cmd}: the NIC closed the connection")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise NicError(f"{cmd}: {reply.get('error')}")
    return reply


class NicClient:
    """A connection to one NIC process; methods mirror ibv_* calls. Thread-safe."""

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        """Connect to the NIC's control socket `path`; `timeout` bounds every call."""
        self.path, self.timeout = path, timeout
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._sock.connect(path)
        self._rfile = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._run: str | None = None

    def __enter__(self) -> "NicClient":
        """Context manager: closes the connection on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the connection."""
        self.close()

    def close(self) -> None:
        """Close the control connection (the NIC keeps its objects)."""
        self._rfile.close()
        self._sock.close()

    def call(self, cmd: str, _timeout: float | None = None, **kw: Any) -> dict:
        """Send one request and return the reply; raises NicError when ok is false."""
        with self._lock:
            self._sock.settimeout(max(self.timeout, (_timeout or 0) + 5))
            self._sock.sendall(encode({"cmd": cmd, **kw}))
            line = self._rfile.readline()
        return _checked(cmd, line)

    @property
    def run(self) -> str:
        """The tag of the emu run this NIC belongs to ("" outside a run; asked once)."""
        if self._run is None:
            self._run = str(self.call("ping").get("run") or "")
        return self._run

    # -- resources (ibv_alloc_pd, ibv_reg_mr, ibv_create_cq, ibv_create_qp) ----------
    def alloc_pd(self) -> int:
        """A protection domain handle."""
        return int(self.call("alloc_pd")["pd"])

    def reg_mr(self, pd: int, size: int, access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE,
               shm: shared_memory.SharedMemory | None = None) -> MemoryRegion:
        """Register `size` bytes of `shm` (a new shared-memory block if None, named after
        the NIC's run: `new_shm`) in `pd`."""
        owner = shm is None
        if shm is None:
            shm = new_shm(self.run, size)
        try:
            r = self.call("reg_mr", pd=pd, shm=shm.name, length=size, access=int(access))
        except BaseException:
            if owner:
                shm.close()
                shm.unlink()
            raise
        return MemoryRegion(shm, r["lkey"], r["rkey"], r["addr"], size, owner)

    def dereg_mr(self, mr: MemoryRegion) -> None:
        """Deregister: the keys stop working (the caller then closes `mr`)."""
        self.call("dereg_mr", lkey=mr.lkey)

    def create_cq(self, depth: int = 4096) -> int:
        """A completion queue handle."""
        return int(self.call("create_cq", depth=depth)["cq"])

    def create_qp(self, pd: int, send_cq: int, recv_cq: int | None = None,
                  max_send_wr: int = 1024, write_only: bool = False, pkey: int = 0xFFFF,
                  dscp: int | None = None, ecn: int | None = None,
                  start_psn: int | None = None, qpn: int | None = None) -> int:
        """An RC QP in RESET; returns its QP number. write_only: every packet a WRITE
        ONLY with its own RETH (ch.12, Figure 12-7; both sides must agree). dscp / ecn:
        of its data frames (default DSCP 24, ECT(0); ecn 0 is Not-ECT); its data then
        travels on that DSCP's PFC priority. start_psn / qpn: pinned instead of random
        (the book's PSN 0x000abc, QPN 0x123456)."""
        return int(self.call("create_qp", pd=pd, send_cq=send_cq,
                             recv_cq=send_cq if recv_cq is None else recv_cq,
                             max_send_wr=max_send_wr, write_only=write_only, pkey=pkey,
                             dscp=dscp, ecn=ecn, start_psn=start_psn, qpn=qpn)["qpn"])

    def destroy_qp(self, qpn: int) -> None:
        """Forget a QP (its unfinished work is dropped)."""
        self.call("destroy_qp", qpn=qpn)

    # -- connection (book Figure 9-4) ------------------------------------------------
    def listen(self, qpn: int, port: int = CM_PORT, mr: MemoryRegion | None = None) -> None:
        """Let the next REQ on `port` connect `qpn` (returns at once); expose `mr` to the
        peer. Then `wait_connected`."""
        self.call("listen", qpn=qpn, port=port, lkey=mr.lkey if mr else None)

    def connect(self, qpn: int, remote_ip: str, port: int = CM_PORT,
                mr: MemoryRegion | None = None, timeout: float = 30.0) -> RemoteBuffer:
        """Connect `qpn` to the QP listening on (remote_ip, port), retrying until it
        listens; expose `mr`; returns what the peer exposed. The QP is then in RTS."""
        r = self.call("connect", _timeout=timeout, qpn=qpn, ip=remote_ip, port=port,
                      lkey=mr.lkey if mr else None, timeout=timeout)
        return RemoteBuffer.from_json(r)

    def wait_connected(self, qpn: int, timeout: float = 30.0) -> RemoteBuffer:
        """Block until a listening QP is connected; what the peer exposed."""
        return RemoteBuffer.from_json(self.call("wait_connected", _timeout=timeout, qpn=qpn,
                                                timeout=timeout))

    # -- data path (ibv_post_send, ibv_post_recv, ibv_poll_cq) -------------------------
    def post_write(self, qpn: int, wr_id: int, mr: MemoryRegion, offset: int, length: int,
                   remote: RemoteBuffer, remote_offset: int = 0, imm: int | None = None,
                   signaled: bool = True, rkey: int | None = None) -> None:
        """RDMA WRITE (with immediate if `imm` is set) of mr[offset:offset+length] to the
        peer's buffer at remote_offset. `rkey` overrides the peer's R_Key (tests)."""
        wr = {"wr_id": wr_id, "local_addr": mr.addr + offset, "length": length,
              "lkey": mr.lkey, "remote_addr": remote.addr + remote_offset,
              "rkey": remote.rkey if rkey is None else rkey, "signaled": signaled, "imm": imm}
        self.call("post_send", qpn=qpn, wrs=[wr])

    def post_send_msg(self, qpn: int, wr_id: int, mr: MemoryRegion, offset: int, length: int,
                      imm: int | None = None, signaled: bool = True) -> None:
        """SEND (with immediate if `imm` is set) of mr[offset:offset+length]: it lands in
        the buffer of the peer's oldest posted receive (`post_recv` with a buffer)."""
        wr = {"wr_id": wr_id, "opcode": "send", "local_addr": mr.addr + offset,
              "length": length, "lkey": mr.lkey, "signaled": signaled, "imm": imm}
        self.call("post_send", qpn=qpn, wrs=[wr])

    def post_recv(self, qpn: int, wr_ids: list[int] | int, mr: MemoryRegion | None = None,
                  offset: int = 0, length: int = 0) -> None:
        """Receive WRs: each consumed by an incoming WRITE with immediate, or by a SEND,
        which lands in mr[offset:offset+length] (one buffer for all `wr_ids` posted here:
        post one at a time for separate buffers)."""
        ids = [wr_ids] if isinstance(wr_ids, int) else wr_ids
        if mr is None:
            self.call("post_recv", qpn=qpn, wr_ids=ids)
            return
        self.call("post_recv", qpn=qpn, wr_ids=[
            {"wr_id": i, "addr": mr.addr + offset, "length": length, "lkey": mr.lkey}
            for i in ids])

    def poll_cq(self, cq: int, n: int = 16, timeout: float = 0.0) -> list[WC]:
        """Up to `n` completions; waits up to `timeout` lab seconds for the first one."""
        return [wc for wc, _ in self.poll_cq_stamped(cq, n, timeout)]

    def poll_cq_stamped(self, cq: int, n: int = 16,
                        timeout: float = 0.0) -> list[tuple[WC, float | None]]:
        """`poll_cq`, each completion with the lab time (time.monotonic() on the NIC's
        machine) the NIC completed it; None from a NIC that does not say."""
        r = self.call("poll_cq", _timeout=timeout, cq=cq, n=n, timeout=timeout)
        return [(wc_from_json(w), w.get("ts")) for w in r["wcs"]]

    def wait(self, cq: int, count: int, timeout: float = 60.0) -> list[WC]:
        """Poll until `count` completions arrived; NicError on timeout."""
        out: list[WC] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NicError(f"wait: {len(out)} of {count} completions after {timeout:g} s")
            out += self.poll_cq(cq, count - len(out), min(left, 5.0))
        return out

    # -- introspection ---------------------------------------------------------------
    def query_qp(self, qpn: int) -> dict:
        """State and counters of one QP."""
        return self.call("query_qp", qpn=qpn)

    def counters(self) -> dict:
        """NIC and per-QP counters (bytes, packets, retransmits, CNPs, rate)."""
        return self.call("counters")


def new_shm(run: str, size: int, tries: int = 8) -> shared_memory.SharedMemory:
    """A new shared-memory block of `size` bytes named ``emu-<run>-mr-<random>``
    (emucore.runmark: `emu clean` removes a killed run's), Python's own name when `run`
    is no run tag."""
    for _ in range(tries - 1):
        try:
            return shared_memory.SharedMemory(name=shm_name(run, "mr"), create=True, size=size)
        except FileExistsError:  # 32 random bits taken: draw again
            continue
    return shared_memory.SharedMemory(name=shm_name(run, "mr"), create=True, size=size)


class UntrackedSharedMemory(shared_memory.SharedMemory):
    """Another process's shared memory, attached without any resource tracker hearing of
    it (Python 3.13's SharedMemory(track=False)); its creator registered it and unlinks it.

    Python < 3.13 registers every attach with the attaching process's tracker, which
    unlinks what it still holds when the process exits. Unregistering right after the
    attach (what attach_untracked did) is wrong where the creator shares that tracker -
    the ranks that collectives.zygote forks share the zygote's: the tracker keeps a set of
    names, so the attach's register was a no-op, its unregister removed the creator's
    entry, and the creator's unlink then made the tracker raise KeyError (one traceback
    per segment in workers/zygote.log). POSIX only, as the rest of emu."""

    def __init__(self, name: str) -> None:  # pylint: disable=super-init-not-called
        self._name = "/" + name  # SharedMemory's _prepend_leading_slash
        self._fd = _posixshmem.shm_open(self._name, os.O_RDWR, mode=0o600)
        try:
            self._size = os.fstat(self._fd).st_size
            self._mmap = mmap.mmap(self._fd, self._size)  # ValueError when still empty
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise
        self._buf = memoryview(self._mmap)

    def unlink(self) -> None:
        """Remove the name (the creator's tracker still lists it: its unlink is the one)."""
        _posixshmem.shm_unlink(self._name)


def attach_untracked(name: str) -> shared_memory.SharedMemory:
    """Attach to another process's shared memory without letting this process's
    resource tracker unlink it at exit, nor touching the creator's entry in a tracker
    both share (`UntrackedSharedMemory`)."""
    return UntrackedSharedMemory(name)
