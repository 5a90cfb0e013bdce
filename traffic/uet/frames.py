"""UET descriptors to frames (issue 16): what the NIC sends for the transport's
`TxReq`, `TxAck` and `TxNack`, through a `emucore.wire.uet_codec.UetTemplate` towards the
peer FEP. Requests take the packet's entropy value as UDP source port (spraying); ACKs
and NACKs the endpoint's fixed one."""

from __future__ import annotations

from emucore.wire.uet_codec import UetTemplate
from traffic.uet.initiator import TxReq
from traffic.uet.target import TxAck, TxNack


def frame_of(t: UetTemplate, spdcid: int, tx: TxReq | TxAck | TxNack, ack_ev: int,
             rod: bool = False, ecn: int | None = None) -> bytes:
    """The frame of one descriptor; `spdcid` is the sender's PDC (the initiator's for a
    request, the target's for an ACK / NACK)."""
    if isinstance(tx, TxReq):
        return t.request(tx.ev, tx.psn, spdcid, tx.dpdcid, tx.flags, tx.ses, tx.payload,
                         rod=rod, psn_offset=tx.psn_offset, ecn=ecn)
    if isinstance(tx, TxAck):
        return t.ack(ack_ev, tx.cack_psn, tx.ack_psn_offset, spdcid, tx.dpdcid, tx.flags,
                     tx.sack_offset, tx.sack_bitmap, rcvd_bytes=tx.rcvd_bytes,
                     ooo_count=tx.ooo_count, rsp=tx.rsp)
    return t.nack(ack_ev, tx.code, tx.psn, spdcid, tx.dpdcid, tx.payload)
