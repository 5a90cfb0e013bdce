"""Ingress classification: DSCP -> qos-group -> egress queue and PFC priority, and ECN
helpers on the IPv4 TOS byte (pure, no I/O).

Book ch.11, "DCQCN Configuration", Examples 11-1 (class-maps: DSCP 24 = ROCEv2,
DSCP 48 = CNP) and 11-2 (policy-map QOS_CLASSIFICATION: ROCEv2 -> qos-group 3,
CNP -> qos-group 7, class-default -> qos-group 0). "The mapping between internal QoS
labels and queues is fixed": qos-group n -> egress queue n. DSCP-based PFC (ch.11,
"DSCP-Based Priority Flow Control") pauses the priority the DSCP maps to; like the book
(and NX-OS) we use PFC priority = qos-group unless told otherwise (NVIDIA NICs put CNPs
on priority 6: pass ``priority_of_group={7: 6}``).

`Classification` is the configuration (validated, frozen); `Classifier` is the stage,
tables precomputed from one Classification.

ECN (RFC 3168, book ch.11 "Explicit Congestion Notification"): the two low bits of the
TOS byte; 00 Not-ECT, 01 ECT(1), 10 ECT(0), 11 CE. Marking rewrites them to CE and
patches the IPv4 header checksum incrementally (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).

Hot path: ``queue = classifier.queue_by_tos[frame[15]]`` (IPv4 right after a 14-byte
Ethernet header) - one list index, no allocation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from emucore.qos.fields import NUM_QUEUES, int_in, normalise
from emucore.wire.dscp import DSCP_CNP, DSCP_ROCEV2, ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT

ROCE_PRIORITY = 3  #: qos-group, egress queue and no-drop PFC priority of RoCEv2 data (11-2)
CNP_PRIORITY = 7  #: qos-group and strict-priority queue of CNPs (Examples 11-2, 11-3)


@dataclass(frozen=True)
class TrafficClass:
    """A `class-map type qos` plus its `set qos-group` (Examples 11-1, 11-2)."""

    name: str
    dscp: tuple[int, ...]
    qos_group: int

    def __post_init__(self) -> None:
        dscp = self.dscp
        normalise(self, "dscp", tuple(dscp) if isinstance(dscp, (list, tuple)) else (dscp,))
        for d in self.dscp:
            int_in("dscp", d, 0, 63)
        int_in("qos_group", self.qos_group, 0, NUM_QUEUES - 1)


BOOK_CLASSES = (TrafficClass("ROCEv2", (DSCP_ROCEV2,), ROCE_PRIORITY),
                TrafficClass("CNP", (DSCP_CNP,), CNP_PRIORITY))


@dataclass(frozen=True)
class Classification:
    """DSCP -> qos-group (first matching class wins; the rest -> default_group)."""

    policy: str = "QOS_CLASSIFICATION"
    classes: tuple[TrafficClass, ...] = BOOK_CLASSES
    default_group: int = 0

    def __post_init__(self) -> None:
        normalise(self, "classes", tuple(self.classes))
        int_in("default_group", self.default_group, 0, NUM_QUEUES - 1)

    @functools.cached_property
    def table(self) -> tuple[int, ...]:
        """64 entries: qos-group of each DSCP value (what the classify stage indexes)."""
        t = [-1] * 64
        for c in self.classes:
            for d in c.dscp:
                if t[d] < 0:
                    t[d] = c.qos_group
        return tuple(self.default_group if g < 0 else g for g in t)

    def group_of(self, dscp: int) -> int:
        """qos-group (= egress queue = PFC priority) of a DSCP value."""
        return self.table[dscp & 0x3F]


class Classifier:
    """The classify stage: (queue, PFC priority) of every TOS byte, from a Classification."""

    __slots__ = ("classification", "queue_by_tos", "priority_by_tos")

    def __init__(self, classification: Classification,
                 priority_of_group: Mapping[int, int] | None = None) -> None:
        prio = list(range(NUM_QUEUES))
        for g, p in (priority_of_group or {}).items():
            int_in("priority_of_group key", g, 0, NUM_QUEUES - 1)
            prio[g] = int_in(f"priority_of_group[{g}]", p, 0, NUM_QUEUES - 1)
        self.classification = classification
        #: indexed by the whole TOS byte (DSCP = tos >> 2), so no shift on the hot path
        self.queue_by_tos = [classification.table[tos >> 2] for tos in range(256)]
        self.priority_by_tos = [prio[g] for g in self.queue_by_tos]

    @classmethod
    def book(cls) -> "Classifier":
        """Examples 11-1/11-2: DSCP 24 -> 3, DSCP 48 -> 7, everything else -> 0."""
        return cls(Classification())

    def classify(self, tos: int) -> tuple[int, int]:
        """(egress queue, PFC priority) of a TOS byte."""
        return self.queue_by_tos[tos], self.priority_by_tos[tos]

    def priority_of_dscp(self, dscp: int) -> int:
        """The PFC priority frames of this DSCP travel (and are paused) on."""
        return self.priority_by_tos[int_in("dscp", dscp, 0, 63) << 2]


# -- ECN on the TOS byte ------------------------------------------------------------
def ecn_bits(tos: int) -> int:
    """The ECN codepoint (two low bits) of a TOS byte."""
    return tos & 0b11


def is_ect(tos: int) -> bool:
    """True for ECT(0) or ECT(1): ECN-capable and not yet marked."""
    return (tos & 0b11) in (ECN_ECT0, ECN_ECT1)


def ecn_capable(tos: int) -> bool:
    """True for any codepoint but Not-ECT (a CE packet stays markable, RFC 3168 s.5)."""
    return tos & 0b11 != ECN_NOT_ECT


def set_ce(tos: int) -> int:
    """TOS byte with the ECN field set to CE (11), DSCP unchanged."""
    return tos | ECN_CE


def _ce_checksum(hc: int, b0: int, tos: int) -> int:
    """RFC 1624 eqn. 3 for the first header word changing from (b0, tos) to (b0, tos|3)."""
    m = (b0 << 8) | tos
    s = (~hc & 0xFFFF) + (~m & 0xFFFF) + (m | ECN_CE)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def mark_ce_inplace(buf: bytearray, l3: int = 14) -> bool:
    """Set CE in the IPv4 header at offset `l3` of `buf` and patch the checksum; return
    False (buffer untouched) for a Not-ECT packet or one already CE."""
    tos = buf[l3 + 1]
    if tos & 0b11 in (ECN_NOT_ECT, ECN_CE):
        return False
    hc = _ce_checksum((buf[l3 + 10] << 8) | buf[l3 + 11], buf[l3], tos)
    buf[l3 + 1] = tos | ECN_CE
    buf[l3 + 10] = hc >> 8
    buf[l3 + 11] = hc & 0xFF
    return True


def mark_ce(frame: bytes, l3: int = 14) -> bytes:
    """Copy of `frame` with CE set in its IPv4 header at offset `l3` (RFC 1624 checksum
    update); the frame itself if it is Not-ECT or already CE."""
    tos = frame[l3 + 1]
    if tos & 0b11 in (ECN_NOT_ECT, ECN_CE):
        return frame
    hc = _ce_checksum((frame[l3 + 10] << 8) | frame[l3 + 11], frame[l3], tos)
    return b"".join((frame[:l3 + 1], bytes((tos | ECN_CE,)), frame[l3 + 2:l3 + 10],
                     bytes((hc >> 8, hc & 0xFF)), frame[l3 + 12:]))
