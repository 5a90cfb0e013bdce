"""The NIC's receive path for Ultra Ethernet frames (issue 16): UDP 4793 frames parsed by
the fast codec, checked, and handed to the endpoint that owns them; its ACKs / NACKs sent.

Which endpoint: a request that carries SYN (its PDC being set up) names the endpoint in
its SES header (PID on FEP and resource index = the QPN, traffic.uet.endpoint); every
other frame names a PDC of this NIC (`NicVerbs.pdcs`: the destination PDC id of a
request, ACK or NACK), registered when the endpoint's initiator or target PDC was made.
Malformed frames (`rx_malformed`), a bad IPv4 checksum or a non-zero UDP checksum
(`rx_bad_checksum`, UET frames carry 0), frames for another address or an unknown PDC
(`rx_other`, `rx_unknown_pdc`) are dropped and counted, never fatal (issue 14). Events
(docs/EVENTS.md): ce_first per QP, nack_tx for every NACK this NIC sends (trimmed
packets).

A mixin of `traffic.nic.datapath.Nic` (its counters, QPs, `send` and event log).
"""

from __future__ import annotations

from emucore.wire.dscp import ECN_CE
from emucore.wire.uet_codes import F_SYN, NackCode, PdsType
from emucore.wire.uet_codec import parse as uet_parse
from traffic.uet.endpoint import REQUESTS, UetEndpoint, endpoint_of
from traffic.uet.target import TxNack

__all__ = ["UetRx", "is_uet"]

UET_PORT_BYTES = b"\x12\xb9"  #: 4793, big endian


def is_uet(mv: memoryview) -> bool:
    """An IPv4 (no options) UDP frame to port 4793: the NIC's UET path takes it."""
    return len(mv) >= 42 and mv[14] == 0x45 and mv[23] == 17 and mv[36:38] == UET_PORT_BYTES


def _code(code: int) -> str:
    """A NACK code's name (its number if the spec table lacks it)."""
    try:
        return NackCode(code).name
    except ValueError:
        return str(code)


class UetRx:
    """Receiving UET frames (mixed into the NIC)."""

    def on_uet(self, mv: memoryview, now: float) -> None:
        """One UDP 4793 frame."""
        c = self.c
        f = uet_parse(mv, verify_csum=True)
        if f is None:
            c["rx_malformed"] += 1
            return
        if not f.csum_ok:
            c["rx_bad_checksum"] += 1
            return
        if f.dst_ip != self.cfg.ip:
            c["rx_other"] += 1
            return
        if f.pds_type in REQUESTS and f.flags & F_SYN:
            q = self.qps.get(endpoint_of(f.ses.pid_on_fep, f.ses.resource_index)) \
                if f.ses is not None else None
            if q is not None and q.ep.target is not None and q.ep.target.peer != f.spdcid:
                q = None  # an endpoint talks to one peer PDC
        else:
            q = self.pdcs.get(f.dpdcid) if f.dpdcid is not None else None
        if q is None or q.tmpl is None or not isinstance(q.ep, UetEndpoint):
            c["rx_unknown_pdc"] = c.get("rx_unknown_pdc", 0) + 1
            return
        if f.ecn == ECN_CE and f.pds_type in REQUESTS:
            q.ce_rx += 1
            if q.ce_rx == 1:
                self.ev.emit("ce_first", now, qp=q.qpn)
        had_target = q.ep.target is not None
        for reply in q.ep.on_frame(f, now):
            self.send(q.build(reply))
            if isinstance(reply, TxNack):
                self.ev.emit("nack_tx", now, qp=q.qpn, psn=reply.psn, code=_code(reply.code))
        if not had_target and q.ep.target is not None:
            self.pdcs[q.ep.target.pdcid] = q
        if f.pds_type in (PdsType.ACK, PdsType.ACK_CC, PdsType.NACK) and q.blocked:
            q.blocked = False  # the window may have opened
            q.ready_at = now
