"""The knobs of the RC transport (both sides of a QP): MTU, write-only mode, window,
AckReq and ACK coalescing, the write-only reorder window.

Book ch.12 (Figure 12-7, WRITE ONLY for packet spraying); IBA ch.9.7 (PSN window: at
most 2**23 - 1 PSNs outstanding, PSN comparisons are within half the 24-bit space).

The window is not a congestion window. An RC requester of a ConnectX-class RNIC keeps
no small packet window for SEND/WRITE: it transmits as fast as its rate limiter
(DCQCN) lets it, and what it may have unacknowledged is bounded only by IBA ch.9.7's
PSN rule (fewer than 2**23 PSNs outstanding, so that the responder can tell a new PSN
from a duplicate) and by the work posted on its send queue (max_send_wr WQEs). RDMA
READ and atomics are limited separately (max_rd_atomic, 16 on ConnectX), and this
transport has no READ. So `DEFAULT_WINDOW` is that PSN bound: in-flight data is what
the application posted and congestion control allows, as on the real NIC (a 1 MB
window of 256 packets at 4 KB MTU used to cap a 3:1 incast at 3 MB at the switch).
Nothing is sized by the window: the requester re-reads retransmissions from the MR,
and the write-only responder's reorder bitmap grows only as far as packets arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

from emucore.wire.ib import PSN_HALF

__all__ = ["RcConfig", "DEFAULT_WINDOW"]

DEFAULT_WINDOW = PSN_HALF - 1  #: IBA ch.9.7: at most 2**23 - 1 unacknowledged PSNs


@dataclass
class RcConfig:
    """Transport knobs (both sides). mtu=None uses the QP's path MTU."""

    mtu: int | None = None
    write_only: bool = False   # ch.12: every packet WRITE ONLY with its own RETH
    window: int = DEFAULT_WINDOW  # requester: max packets in flight (unacked)
    ackreq_every: int = 16     # requester: AckReq every N packets (0: only at message end)
    ack_every: int = 0         # responder: also ACK every K accepted packets (0: AckReq only)
    reorder_window: int = DEFAULT_WINDOW  # write-only responder: PSNs accepted ahead of
    #                                       the expected one (>= window when write_only)

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        if self.mtu is not None and not 1 <= self.mtu <= 1 << 16:
            raise ValueError(f"mtu: must be 1..65536, got {self.mtu}")
        for name in ("window", "reorder_window"):
            v = getattr(self, name)
            if not 1 <= v < PSN_HALF:
                raise ValueError(f"{name}: must be 1..2^23-1, got {v}")
        for name in ("ackreq_every", "ack_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.write_only and self.window > self.reorder_window:
            raise ValueError(f"window: {self.window} exceeds reorder_window {self.reorder_window}")
