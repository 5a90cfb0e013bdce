"""The knobs of the RC transport (both sides of a QP): MTU, write-only mode, window,
AckReq and ACK coalescing, the write-only reorder window.

Book ch.12 (Figure 12-7, WRITE ONLY for packet spraying); IBA ch.9.7 (PSN window: at
most 2**23 - 1 PSNs outstanding, PSN comparisons are within half the 24-bit space).
"""

from __future__ import annotations

from dataclasses import dataclass

from fabric.wire.ib import PSN_HALF

__all__ = ["RcConfig"]


@dataclass
class RcConfig:
    """Transport knobs (both sides). mtu=None uses the QP's path MTU."""

    mtu: int | None = None
    write_only: bool = False   # ch.12: every packet WRITE ONLY with its own RETH
    window: int = 256          # requester: max packets in flight (unacked)
    ackreq_every: int = 16     # requester: AckReq every N packets (0: only at message end)
    ack_every: int = 0         # responder: also ACK every K accepted packets (0: AckReq only)
    reorder_window: int = 1024  # write-only responder: PSNs accepted ahead of the expected one

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
