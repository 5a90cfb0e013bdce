"""Both halves of one emu endpoint over UET, behind the RC transport's interface (issue
16): the NIC drives `next_packet(now)`, `on_frame(fields, now)`, `on_timer(now)` and
`deadline` as it drives traffic.rc.endpoint.RcEndpoint, so the verbs client - and the emu
backend's channels above it - run over either transport unchanged.

An emu QP is a verbs object; on UET it stands for a FEP's endpoint talking to one peer
endpoint: its writes go out on an initiator PDC (`initiator`, set up on the fly with
SYN), the peer's writes arrive on a target PDC that their first SYN packet creates
(`target`). Emu addresses the peer endpoint in the SES header by its 24-bit QP number,
split into the PID on FEP (high 12 bits) and the resource index (low 12) - the CM
exchange that tells each side the other's QPN, R_Key and buffer stands for libfabric's
address vector and memory-key exchange. PDC ids come from the NIC (`alloc`), unique on
it. Pure: time and randomness from outside.
"""

from __future__ import annotations

import random
from typing import Callable

from emucore.wire.uet_codes import F_M, F_SYN, PdsType
from emucore.wire.uet_codec import UetFields
from traffic.uet.uetconfig import UetConfig
from traffic.uet.initiator import Initiator, TxReq
from traffic.uet.target import Target, TargetCounters, TxAck, TxNack
from traffic.verbs import QP

REQUESTS = (PdsType.RUD_REQ, PdsType.ROD_REQ, PdsType.RUD_CC_REQ, PdsType.ROD_CC_REQ)


def endpoint_of(pid_on_fep: int, resource_index: int) -> int:
    """The QP number an SES header addresses (PID on FEP << 12 | resource index)."""
    return (pid_on_fep & 0xFFF) << 12 | (resource_index & 0xFFF)


class UetEndpoint:
    """One QP's UET transport: an initiator PDC out, a target PDC in."""

    def __init__(self, qp: QP, cfg: UetConfig, alloc: Callable[[], int], link_bps: float,
                 rng: random.Random, job_id: int = 0,
                 trimmed_dscps: tuple[int, int] = (-1, -1)) -> None:
        self.qp, self.cfg, self.alloc = qp, cfg, alloc
        self.requester = Initiator(qp, cfg, alloc(), link_bps, rng, job_id)
        self.target: Target | None = None
        self.trimmed_dscps = trimmed_dscps
        self.ack_ev = rng.randint(*cfg.ev_range)  # ACKs keep one path
        self._idle_counters = TargetCounters()

    @property
    def responder(self) -> Target | object:
        """The target side (its counters: `.counters`), or one with zero counters."""
        return self.target if self.target is not None else self

    @property
    def counters(self) -> TargetCounters:
        """Zero target counters while no peer packet has arrived (see `responder`)."""
        return self._idle_counters

    @property
    def pdcids(self) -> list[int]:
        """This endpoint's PDC ids on the NIC (initiator, then target if set up)."""
        return [self.requester.spdcid] + ([self.target.pdcid] if self.target else [])

    def next_packet(self, now: float) -> TxReq | None:
        """The next request packet the window and pacing allow."""
        return self.requester.next_packet(now)

    def on_frame(self, f: UetFields, now: float) -> list[TxAck | TxNack]:
        """A UET frame for this endpoint; what to send back."""
        if f.pds_type in REQUESTS:
            if self.target is None:
                if not f.flags & F_SYN:
                    return []  # a request for a PDC this endpoint never had
                start = (f.psn - f.psn_offset) & 0xFFFFFFFF
                self.target = Target(self.qp, self.cfg, self.alloc(), f.spdcid, start,
                                     self.trimmed_dscps)
            return self.target.on_packet(f)
        if f.pds_type in (PdsType.ACK, PdsType.ACK_CC):
            self.requester.on_ack(f.cack_psn, f.ack_psn, f.spdcid, f.sack_offset,
                                  f.sack_bitmap, bool(f.flags & F_M), now, f.rsp)
        elif f.pds_type == PdsType.NACK:
            self.requester.on_nack(f.nack_code, f.psn, now)
        return []

    def on_timer(self, now: float) -> None:
        """Run the retransmission timer."""
        self.requester.on_timer(now)

    @property
    def deadline(self) -> float | None:
        """When on_timer next needs calling (None: nothing in flight)."""
        return self.requester.deadline
