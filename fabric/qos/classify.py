"""Ingress classification: DSCP -> qos-group -> egress queue and PFC priority, and ECN
helpers on the IPv4 TOS byte (pure, no I/O).

Book ch.11, "DCQCN Configuration", Examples 11-1 (class-maps: DSCP 24 = ROCEv2,
DSCP 48 = CNP) and 11-2 (policy-map QOS_CLASSIFICATION: ROCEv2 -> qos-group 3,
CNP -> qos-group 7, class-default -> qos-group 0). "The mapping between internal QoS
labels and queues is fixed": qos-group n -> egress queue n. DSCP-based PFC (ch.11,
"DSCP-Based Priority Flow Control") pauses the priority the DSCP maps to; like the book
(and NX-OS) we use PFC priority = qos-group unless told otherwise (NVIDIA NICs put CNPs
on priority 6: pass ``priority_of_group={7: 6}``).

ECN (RFC 3168, book ch.11 "Explicit Congestion Notification"): the two low bits of the
TOS byte; 00 Not-ECT, 01 ECT(1), 10 ECT(0), 11 CE. Marking rewrites them to CE and
patches the IPv4 header checksum incrementally (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).

Hot path: ``queue = classifier.queue_by_tos[frame[15]]`` (IPv4 right after a 14-byte
Ethernet header) - one list index, no allocation.
"""

from __future__ import annotations

from collections.abc import Mapping

DSCP_ROCEV2 = 24
DSCP_CNP = 48
BOOK_DSCP_TO_GROUP: Mapping[int, int] = {DSCP_ROCEV2: 3, DSCP_CNP: 7}

ECN_NOT_ECT = 0b00
ECN_ECT1 = 0b01
ECN_ECT0 = 0b10
ECN_CE = 0b11

NUM_GROUPS = 8


class Classifier:
    """DSCP -> qos-group -> (queue, PFC priority), precomputed for all 256 TOS bytes."""

    __slots__ = ("dscp_to_group", "default_group", "group_by_tos", "queue_by_tos",
                 "priority_by_tos", "queue_of_group", "priority_of_group")

    def __init__(self, dscp_to_group: Mapping[int, int] | None = None, default_group: int = 0,
                 queue_of_group: Mapping[int, int] | None = None,
                 priority_of_group: Mapping[int, int] | None = None) -> None:
        mapping = dict(BOOK_DSCP_TO_GROUP if dscp_to_group is None else dscp_to_group)
        for dscp, group in mapping.items():
            if not (isinstance(dscp, int) and 0 <= dscp <= 63):
                raise ValueError(f"dscp_to_group: DSCP must be an int in 0..63, got {dscp!r}")
            _check_group(f"dscp_to_group[{dscp}]", group)
        _check_group("default_group", default_group)
        self.dscp_to_group = mapping
        self.default_group = default_group
        self.queue_of_group = _table("queue_of_group", queue_of_group)
        self.priority_of_group = _table("priority_of_group", priority_of_group)
        groups = [mapping.get(dscp, default_group) for dscp in range(64)]
        #: indexed by the whole TOS byte (DSCP = tos >> 2), so no shift on the hot path
        self.group_by_tos = [groups[tos >> 2] for tos in range(256)]
        self.queue_by_tos = [self.queue_of_group[g] for g in self.group_by_tos]
        self.priority_by_tos = [self.priority_of_group[g] for g in self.group_by_tos]

    @classmethod
    def book(cls) -> "Classifier":
        """Examples 11-1/11-2: DSCP 24 -> 3, DSCP 48 -> 7, everything else -> 0."""
        return cls(BOOK_DSCP_TO_GROUP)

    @classmethod
    def from_table(cls, groups: "list[int] | tuple[int, ...]") -> "Classifier":
        """From a 64-entry DSCP -> qos-group table (`qos_config.Classification.table`)."""
        if len(groups) != 64:
            raise ValueError(f"groups: need 64 entries (one per DSCP), got {len(groups)}")
        return cls(dict(enumerate(groups)))

    def group(self, dscp: int) -> int:
        """qos-group of a DSCP value (0..63)."""
        return self.group_by_tos[(dscp & 0x3F) << 2]

    def classify(self, tos: int) -> tuple[int, int]:
        """(egress queue, PFC priority) of a TOS byte."""
        return self.queue_by_tos[tos], self.priority_by_tos[tos]


def _check_group(field: str, group: object) -> None:
    if not (isinstance(group, int) and 0 <= group < NUM_GROUPS):
        raise ValueError(f"{field}: must be an int in 0..7, got {group!r}")


def _table(field: str, overrides: Mapping[int, int] | None) -> list[int]:
    table = list(range(NUM_GROUPS))
    for g, v in (overrides or {}).items():
        _check_group(f"{field} key", g)
        _check_group(f"{field}[{g}]", v)
        table[g] = v
    return table


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
