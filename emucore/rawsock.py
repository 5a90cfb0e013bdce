"""Socket I/O of the switch agent and the NIC: raw AF_PACKET port sockets, a netlink
monitor, the kernel's arrival stamp of each received frame (SO_TIMESTAMPNS, socket(7)),
and the timer slack of their event loops.

The only module of the agent that opens sockets on the data path (docs/ARCHITECTURE.md
"Switch agent pipeline"). Gotcha (docs/ARCHITECTURE.md): a raw socket also sees the frames
its own process sends; PACKET_IGNORE_OUTGOING (Linux >= 4.20) makes the kernel skip
them, so the agent never re-forwards its own output.
"""

from __future__ import annotations

import ctypes
import socket
import struct

#: timer slack asked by `tighten_timer_slack`, ns (Linux's default is 50,000)
TIMER_SLACK_NS = 1000
PR_SET_TIMERSLACK = 29  # prctl(2)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_QDISC_BYPASS = 20
NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTMGRP_NEIGH = 0x4
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV4_ROUTE = 0x40
SOCKET_BUFFER = 8 * 1024 * 1024
#: SO_TIMESTAMPNS (asm-generic/socket.h, x86-64 and arm64: 35; Python's socket module
#: has no name for it): a struct timespec of CLOCK_REALTIME per received frame
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")
RX_ANC = socket.CMSG_SPACE(_TIMESPEC.size)  #: recvmsg's ancillary buffer for one stamp


def open_port(ifname: str, bypass_qdisc: bool = True, drain_first: bool = True) -> socket.socket:
    """A non-blocking raw socket bound to one interface, ignoring our own output.

    bypass_qdisc: skip the kernel qdisc layer on send (the agent does its own queueing
    and shaping); the NIC keeps it, which would otherwise hide its frames from captures
    of its interface. drain_first: discard the frames of other interfaces that arrived
    before bind() (the agent's ports)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    if bypass_qdisc:
        s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        except OSError:
            pass
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    if drain_first:
        drain(s)
    return s


def open_netlink_monitor() -> socket.socket:
    """A netlink socket that becomes readable on route, neighbour or address changes."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    s.bind((0, RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE))
    s.setblocking(False)
    return s


def drain(s: socket.socket) -> int:
    """Read and discard everything pending on a non-blocking socket."""
    n = 0
    while True:
        try:
            s.recv(65535)
        except (BlockingIOError, InterruptedError):
            return n
        n += 1


def tighten_timer_slack(ns: int = TIMER_SLACK_NS) -> bool:
    """Ask Linux to wake the calling thread's timed sleeps (select, epoll, nanosleep)
    within `ns` of their deadline (prctl PR_SET_TIMERSLACK); False where unsupported.
    Loops that act on a model schedule call it: the default 50 us slack is a quarter of
    the fidelity guard's bound at TDF 2000 (emucore.fidelity)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def enable_rx_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp each frame `sock` receives; whether it agreed."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def arrival(anc: list, mono_minus_real: float) -> float | None:
    """A frame's arrival on the monotonic clock from recvmsg's ancillary data (None
    without a stamp); `mono_minus_real`: time.monotonic() - time.time() now."""
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9 + mono_minus_real
    return None
