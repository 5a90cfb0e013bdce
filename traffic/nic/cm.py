"""The management connection that sets up an RC QP pair: REQ / REP / RTU (and REJ).

Book ch.9, Figure 9-4 "RDMA Connection Initiation": the client sends a REQ (local QP
number, starting PSN, P_Key, payload size), the server answers with a REP (its QP
number and PSN, plus the R_Key and address of the memory it exposes, which ch.9 says
travel "over a management connection"), and the client confirms with an RTU; then both
QPs move INIT -> RTR -> RTS. The message set mirrors the IBA ch.12 Communication
Manager, but the transport is simply TCP on the frontend network with
length-prefixed JSON messages (4-byte big-endian length, then UTF-8 JSON with "type").

`encode` / `decode` are pure; `cm_listen` / `cm_connect` are the thin blocking socket
helpers (one connection handshake per call). The client's TCP source port is drawn from
a seeded generator (`client_socket`, `bind_source`; issue 31, docs/RUNNING.md "--seed"),
not left to the kernel: the port is in the 5-tuple the switches hash (ch.10 Fig 10-5), so
the CM's packets take the same spine in every run of one seed.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import itertools
import json
import logging
import random
import socket
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Callable, Union

from emucore.wire.ib import PATH_MTUS

MAX_MSG = 64 * 1024
#: where the client's source port is drawn: Linux's default ephemeral range,
#: net.ipv4.ip_local_port_range "32768 60999" (Documentation/networking/ip-sysctl.rst)
SOURCE_PORTS = (32768, 60999)
BIND_TRIES = 8  #: drawn ports found in use before the kernel's choice is taken
FALLBACKS = itertools.count(1)  #: counts (and the log numbers) the kernel's choices
log = logging.getLogger("traffic.nic.cm")


class CmError(Exception):
    """A malformed CM message, a rejected connection or a broken handshake."""


def _check(name: str, value: int, bits: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << bits:
        raise CmError(f"{name}: must be a {bits}-bit unsigned integer, got {value!r}")


class _Checked:
    """Base of the CM messages: fields are validated at construction."""

    def __post_init__(self) -> None:
        """Validate field ranges, naming the bad field."""
        _validate(self)


@dataclass(frozen=True)
class CmReq(_Checked):
    """Connection request from the requester (client) side."""

    comm_id: int
    local_qpn: int
    start_psn: int
    pkey: int
    path_mtu: int
    fabric_ip: str
    udp_sport: int
    rkey: int = 0       # optional: the client's own MR, for writes in the other direction
    mr_addr: int = 0
    mr_len: int = 0


@dataclass(frozen=True)
class CmRep(_Checked):
    """Connection reply from the responder: its QP and the memory it lets the peer write."""

    comm_id: int
    remote_comm_id: int
    local_qpn: int
    start_psn: int
    pkey: int
    path_mtu: int
    fabric_ip: str
    udp_sport: int
    rkey: int
    mr_addr: int
    mr_len: int


@dataclass(frozen=True)
class CmRtu(_Checked):
    """Ready To Use: the client's confirmation; both sides may now move to RTS."""

    comm_id: int
    remote_comm_id: int


@dataclass(frozen=True)
class CmRej(_Checked):
    """Reject, with a human-readable reason (e.g. P_Key mismatch, no such service)."""

    comm_id: int
    reason: str


CmMsg = Union[CmReq, CmRep, CmRtu, CmRej]
_TYPES: dict[str, type] = {"REQ": CmReq, "REP": CmRep, "RTU": CmRtu, "REJ": CmRej}
_NAMES = {v: k for k, v in _TYPES.items()}
_BITS = {"comm_id": 32, "remote_comm_id": 32, "local_qpn": 24, "start_psn": 24, "pkey": 16,
         "udp_sport": 16, "rkey": 32, "mr_addr": 64, "mr_len": 64}


def _validate(msg: object) -> None:
    for f in fields(msg):  # type: ignore[arg-type]
        v = getattr(msg, f.name)
        if f.name in _BITS:
            _check(f.name, v, _BITS[f.name])
        elif f.name == "path_mtu" and v not in PATH_MTUS:
            raise CmError(f"path_mtu: must be one of {PATH_MTUS}, got {v!r}")
        elif f.name == "fabric_ip":
            try:
                ipaddress.IPv4Address(v)
            except (ValueError, TypeError) as e:
                raise CmError(f"fabric_ip: not an IPv4 address: {v!r}") from e
        elif f.name == "reason" and not isinstance(v, str):
            raise CmError(f"reason: must be a string, got {v!r}")


def encode(msg: CmMsg) -> bytes:
    """Length-prefixed JSON bytes of a CM message."""
    body = json.dumps({"type": _NAMES[type(msg)], **asdict(msg)}, sort_keys=True).encode()
    return struct.pack("!I", len(body)) + body


def decode_body(body: bytes) -> CmMsg:
    """Parse one message body (without the length prefix)."""
    try:
        obj = json.loads(body.decode())
        cls = _TYPES[obj.pop("type")]
        return cls(**obj)  # type: ignore[no-any-return]
    except CmError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CmError(f"body: malformed CM message: {e}") from e


def decode(data: bytes) -> CmMsg:
    """Parse exactly one length-prefixed message."""
    if len(data) < 4:
        raise CmError(f"length: need a 4-byte prefix, got {len(data)} bytes")
    (n,) = struct.unpack("!I", data[:4])
    if n != len(data) - 4:
        raise CmError(f"length: prefix says {n}, body has {len(data) - 4} bytes")
    return decode_body(data[4:])


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise CmError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_msg(sock: socket.socket) -> CmMsg:
    """Read one message from a stream socket."""
    (n,) = struct.unpack("!I", _recv_exact(sock, 4))
    if n > MAX_MSG:
        raise CmError(f"length: {n} exceeds {MAX_MSG}")
    return decode_body(_recv_exact(sock, n))


def send_msg(sock: socket.socket, msg: CmMsg) -> None:
    """Write one message to a stream socket."""
    sock.sendall(encode(msg))


def _expect(msg: CmMsg, cls: type) -> None:
    if isinstance(msg, CmRej) and cls is not CmRej:
        raise CmError(f"rejected: {msg.reason}")
    if not isinstance(msg, cls):
        raise CmError(f"type: expected {_NAMES[cls]}, got {_NAMES[type(msg)]}")


class CmListener:
    """The server side: a listening TCP socket answering one handshake per accept()."""

    def __init__(self, sock_addr: tuple[str, int], backlog: int = 16) -> None:
        """Bind and listen on (host, port); port 0 picks a free one (see .address)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(sock_addr)
        self.sock.listen(backlog)
        self.address: tuple[str, int] = self.sock.getsockname()

    def accept(self, on_req: Callable[[CmReq], CmRep | CmRej],
               timeout: float | None = 30.0) -> tuple[CmReq, CmRep | CmRej]:
        """Serve one REQ -> REP (or REJ) -> RTU exchange; returns what was agreed."""
        self.sock.settimeout(timeout)
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(timeout)
            req = recv_msg(conn)
            _expect(req, CmReq)
            assert isinstance(req, CmReq)
            reply = on_req(req)
            send_msg(conn, reply)
            if isinstance(reply, CmRep):
                rtu = recv_msg(conn)
                _expect(rtu, CmRtu)
                assert isinstance(rtu, CmRtu)
                if (rtu.comm_id, rtu.remote_comm_id) != (req.comm_id, reply.comm_id):
                    raise CmError(f"comm_id: RTU {rtu.comm_id}/{rtu.remote_comm_id} does not match")
            return req, reply

    def close(self) -> None:
        """Stop listening."""
        self.sock.close()

    @property
    def closed(self) -> bool:
        return self.sock.fileno() == -1

    def __enter__(self) -> CmListener:
        """Context manager: closes on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the listening socket."""
        self.close()


def cm_listen(sock_addr: tuple[str, int]) -> CmListener:
    """Listen for CM handshakes on (host, port)."""
    return CmListener(sock_addr)


def bind_source(sock: socket.socket, ip: str, rng: random.Random | None,
                tries: int = BIND_TRIES) -> bool:
    """Bind `sock` to (ip, port), the port drawn from `rng` in SOURCE_PORTS; a port in use
    (EADDRINUSE) draws again, up to `tries` ports, then the kernel picks (port 0, logged).
    True when the port is a drawn one; False when the kernel's (or `rng` is None)."""
    if rng is not None:
        for _ in range(tries):
            port = rng.randint(*SOURCE_PORTS)
            try:
                sock.bind((ip, port))
                return True
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        log.warning("CM source port: %d drawn ports on %s in use, the kernel's choice "
                    "(fallback %d of this process)", tries, ip or "*", next(FALLBACKS))
    sock.bind((ip, 0))
    return False


@contextlib.contextmanager
def client_socket(ip: str, rng: random.Random | None,
                  timeout: float) -> Iterator[socket.socket]:
    """A TCP socket for one handshake attempt, bound by `bind_source`. An attempt that
    fails on the network (an OSError: refused, reset, timed out - what traffic.nic.ctl
    retries) is closed with an RST (SO_LINGER 0), so no TIME_WAIT holds the drawn port
    from the retry, which draws it again; a CmError closes as usual (FIN)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        bind_source(sock, ip, rng)
        yield sock
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raise
    finally:
        sock.close()


def cm_connect(addr: tuple[str, int], req: CmReq, timeout: float = 30.0,
               source: tuple[str, random.Random | None] = ("", None)) -> CmRep:
    """Client side: send REQ, receive REP, send RTU; raises CmError on REJ or bad replies.
    `source`: the local IP and the generator of the source port (`bind_source`)."""
    with client_socket(*source, timeout) as sock:
        sock.connect(addr)
        send_msg(sock, req)
        rep = recv_msg(sock)
        _expect(rep, CmRep)
        assert isinstance(rep, CmRep)
        if rep.remote_comm_id != req.comm_id:
            raise CmError(f"remote_comm_id: REP answers {rep.remote_comm_id}, sent {req.comm_id}")
        send_msg(sock, CmRtu(req.comm_id, rep.comm_id))
        return rep
