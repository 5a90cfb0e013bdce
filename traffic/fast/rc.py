"""Which RC transport the NIC runs for its commonest frames: the C of traffic/fast/rc.c or
the Python reference (issue 30).

traffic/fast/rc.c, built by emucore/cbuild.py as `traffic.fast._rc`, does
`traffic.rc.responder.Responder.on_packet` for an in-order RDMA WRITE packet it can take
as it comes - a WRITE MIDDLE / LAST (/ LAST with immediate) inside an accepted message,
a WRITE FIRST / ONLY (/ ONLY with immediate) whose R_Key, access and bounds pass - (IBA
Vol. 1 9.7, 9.4.3, 9.7.4.1.5; book ch.9 Figure 9-6, ch.12 Figures 12-1..12-3) and
`in_order_send` likewise for an in-order SEND FIRST / MIDDLE / LAST / ONLY (with
immediate too) landing in a posted receive WR with room (IBA 9.7.4.1.4; ch.9 Figure 9-6);
both answer NotImplemented, having changed nothing, for every other packet, which the
Python then handles (`traffic.rc.responder.FastResponder`); the responder's state stays
in the Python object. Likewise `next_write` does `traffic.rc.requester.Requester.next_packet`
for a packet of an RDMA WRITE already in the PSN space (segment, payload view, RETH, ImmDt,
AckReq, counters, the timer; `FastRequester`), and `on_ack` its `on_response` for an ACK
(AETH syndrome kind 00, IBA 9.7.5.1) of PSNs in flight: una, nxt, the retry counters,
the WRs it completes (by the Python's `_complete`), the timer; a NAK, an RNR NAK or a
stale ACK is the Python's. tests/unit/test_fast_rc.py holds them equal to the Python on
a fake wire with loss and reordering, also under ASan + UBSan.

`EMU_DATAPATH` chooses (emucore.datapath), read once at import: `IN_ORDER_WRITE`,
`IN_ORDER_SEND`, `NEXT_WRITE` and `ON_ACK` are the C functions under auto and fast, None under python;
with auto or fast and the C not built from today's sources, importing this module is
emucore.datapath.NotBuilt.
"""

from __future__ import annotations

from typing import Callable

from emucore import datapath

__all__ = ["MODULE", "in_order_write", "in_order_send", "next_write", "on_ack",
           "IN_ORDER_WRITE", "IN_ORDER_SEND", "NEXT_WRITE", "ON_ACK"]

MODULE = "traffic.fast._rc"


def _c(name: str | None, fn: str) -> Callable | None:
    """Function `fn` of the C module on data path `name` (default $EMU_DATAPATH), or None."""
    c = datapath.compiled(MODULE, name)
    return c and getattr(c, fn)


def in_order_write(name: str | None = None) -> Callable | None:
    """The responder's C in-order WRITE packet on data path `name`; None: Python."""
    return _c(name, "in_order_write")


def in_order_send(name: str | None = None) -> Callable | None:
    """The responder's C in-order SEND packet on data path `name`; None: Python."""
    return _c(name, "in_order_send")


def next_write(name: str | None = None) -> Callable | None:
    """The requester's C next WRITE packet on data path `name`; None: Python."""
    return _c(name, "next_write")


def on_ack(name: str | None = None) -> Callable | None:
    """The requester's C in-order ACK on data path `name`; None: Python."""
    return _c(name, "on_ack")


IN_ORDER_WRITE = in_order_write()
IN_ORDER_SEND = in_order_send()
NEXT_WRITE = next_write()
ON_ACK = on_ack()
