"""The transport counters RC (traffic.rc) and UET (traffic.uet) share, under the same
names, so the NIC reports either transport's QP the same way
(`traffic.nic.nicverbs.NicQp.snapshot`: tx_packets, retransmits, ..., rx_*)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SenderCounters", "ReceiverCounters"]


@dataclass
class SenderCounters:
    """The sending side (RC requester, UET initiator): data packets and bytes sent,
    resends, retransmission timeouts, ACKs and NAKs received, completed WRs."""

    packets: int = 0
    bytes: int = 0
    retransmitted: int = 0
    timeouts: int = 0
    acks: int = 0
    naks: int = 0
    completions: int = 0


@dataclass
class ReceiverCounters:
    """The receiving side (RC responder, UET target): data packets received, payload
    bytes placed, duplicates, packets ahead of the expected one, ACKs sent."""

    packets: int = 0
    bytes_placed: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    acks: int = 0
