"""The RDMA Reliable Connection (RC) transport for RDMA WRITE: one QP's endpoint.

Book ch.9 (Figures 9-5/9-6) and ch.12 (Figures 12-1..12-3 WRITE FIRST/MIDDLE/LAST,
Figure 12-7 "RDMA Write Only" for packet spraying); IBA Vol. 1 ch.9 (BTH, RETH, AETH,
PSN rules, ACK/NAK, go-back-N) as used by RoCEv2.

The transport is pure state machines over packet descriptors (`emucore.wire.ib.RocePkt`),
never bytes: the RNIC maps them to frames. Time (`now`, seconds of the caller's clock)
and the pacing decision come from outside; nothing sleeps, reads a clock or touches a
socket. The pieces: traffic.rc.rcconfig (knobs), traffic.rc.segment (message -> packets),
traffic.rc.requester, traffic.rc.responder, and here `RcEndpoint`, both halves of one QP
(their WRITE packets' common case in C unless EMU_DATAPATH=python: traffic.fast.rc).
"""

from __future__ import annotations

from emucore.wire.ib import Op, RocePkt
from traffic.fast.rc import IN_ORDER_WRITE, NEXT_WRITE
from traffic.rc.rcconfig import RcConfig
from traffic.rc.requester import FastRequester, Requester
from traffic.rc.responder import FastResponder, Responder
from traffic.verbs import QP

__all__ = ["RcEndpoint"]


class RcEndpoint:
    """Both halves of one RC QP behind one packet interface (what the RNIC drives)."""

    def __init__(self, qp: QP, cfg: RcConfig | None = None) -> None:
        """Requester and responder sharing `qp` and `cfg`."""
        self.qp = qp
        self.requester = (Requester if NEXT_WRITE is None else FastRequester)(qp, cfg)
        self.responder = (Responder if IN_ORDER_WRITE is None else FastResponder)(qp, cfg)

    def next_packet(self, now: float) -> RocePkt | None:
        """Next request packet to transmit when the pacer allows one."""
        return self.requester.next_packet(now)

    def on_packet(self, pkt: RocePkt, now: float) -> list[RocePkt]:
        """Feed a received packet; returns ACK/NAK packets to transmit."""
        if pkt.opcode == Op.ACK:
            self.requester.on_response(pkt, now)
            return []
        return self.responder.on_packet(pkt, now)

    def on_timer(self, now: float) -> None:
        """Run the retransmission timer."""
        self.requester.on_timer(now)

    @property
    def deadline(self) -> float | None:
        """When on_timer next needs calling (None: no timer armed)."""
        return self.requester.deadline
