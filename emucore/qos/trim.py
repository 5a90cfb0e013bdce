"""Packet trimming in the switch (issue 16 "Packet
trimming", seed 004 "Packet trimming"): a congested egress queue does not drop - or pause
the sender - a packet of a trimmable DSCP, it cuts the payload, rewrites the DSCP to the
trimmed code point and sends the header on in its own class; the receiving FEP
answers NACK TRIMMED (or TRIMMED_LASTHOP when the cut happened on the last switch, at the
port facing the destination host) and the sender retransmits at once.

No standard values exist. Emu's defaults: trimmable DSCP 24 (emu's UET data shares
RoCE's class), trimmed DSCP 11 (Cumulus 5.14's default trim DSCP) and 12 at the last hop
(emu's choice: the receiver must tell the two apart and the header carries no other
mark), 64 bytes of UDP payload kept (uet-htsim; the UET headers are never cut), the
header queued on its own queue (6: served after the strict control queue 7 - ACKs,
NACKs, CNPs - and before the data queues, capped at `share` = 25 % of what the strict
queue leaves while data is backlogged: the UE spec's trimmed class is "below control and
above data, at most 50 % of the bandwidth, WDRR 25 % suggested"; the scheduling is
`switch_agent.queues.PortQueues`; a `queue` configured strict keeps the old behaviour,
strict and uncapped), a trimmable packet trimmed once its egress queue would hold more than 100 KB (model bytes: 4 us at 200 G).
Only UET frames (UDP 4793) are trimmed; anything else of that DSCP is queued as usual.

YAML (a QoS file's `trim:` or `emu run --trim`):

    trim: {dscps: [24], threshold: 100KB, keep: 64, trimmed_dscp: 11,
           lasthop_dscp: 12, queue: 6, share: 25}

Pure: the decision is `Trim.dscp_for(tos, depth, nbytes, last_hop)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emucore.qos.fields import NUM_QUEUES, int_in, size
from emucore.yamlform import Form

__all__ = ["Trim"]


@dataclass(frozen=True)
class Trim:
    """Where and how a switch trims."""

    dscps: tuple[int, ...] = (24,)   #: trimmable DSCPs
    threshold_bytes: int = 100_000   #: trim once the egress queue would exceed this
    keep: int = 64                   #: UDP payload bytes kept (at least the UET headers)
    trimmed_dscp: int = 11
    lasthop_dscp: int = 12           #: trimmed at the port facing the destination host
    queue: int = 6                   #: egress queue (and PFC priority) of trimmed headers
    share: int = 25                  #: % of the non-strict bandwidth they may take under load
    trimmable: tuple[bool, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate, naming the bad field; build the per-TOS table."""
        if not self.dscps:
            raise ValueError("dscps: at least one trimmable DSCP")
        for d in self.dscps:
            int_in("dscps", d, 0, 63)
        int_in("threshold", self.threshold_bytes, 0, 1 << 40)
        int_in("keep", self.keep, 0, 9216)
        int_in("trimmed_dscp", self.trimmed_dscp, 0, 63)
        int_in("lasthop_dscp", self.lasthop_dscp, 0, 63)
        int_in("queue", self.queue, 0, NUM_QUEUES - 1)
        int_in("share", self.share, 1, 100)
        marks = {self.trimmed_dscp, self.lasthop_dscp}
        if len(marks) != 2 or marks & set(self.dscps):
            raise ValueError(f"trimmed_dscp, lasthop_dscp: two DSCPs apart from the "
                             f"trimmable ones {list(self.dscps)}, got {self.trimmed_dscp} "
                             f"and {self.lasthop_dscp}")
        object.__setattr__(self, "trimmable",
                           tuple(tos >> 2 in self.dscps for tos in range(256)))

    def dscp_for(self, tos: int, depth: int, nbytes: int, last_hop: bool) -> int | None:
        """The DSCP to trim a frame of this TOS byte and size to, on an egress queue now
        holding `depth` bytes (None: queue it whole)."""
        if not self.trimmable[tos] or depth + nbytes <= self.threshold_bytes:
            return None
        return self.lasthop_dscp if last_hop else self.trimmed_dscp

    def is_trimmed(self, tos: int) -> bool:
        """Does this TOS byte carry a trimmed code point (its header goes to `queue`)?"""
        return tos >> 2 in (self.trimmed_dscp, self.lasthop_dscp)

    # -- text forms ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-able form (what from_dict reads)."""
        return TRIM.dict_of(self)

    @classmethod
    def from_dict(cls, data: dict | bool | None, source: str = "trim") -> "Trim":
        """From the YAML mapping (`true` or an empty mapping: the defaults); unknown keys
        and bad values name ``source.field``."""
        return TRIM.build(source, cls, data)

    def describe(self) -> str:
        """One line for `show` and the summary."""
        return (f"trim DSCP {','.join(map(str, self.dscps))} above "
                f"{self.threshold_bytes / 1000:g} KB to {self.keep} B -> DSCP "
                f"{self.trimmed_dscp} ({self.lasthop_dscp} at the last hop), queue {self.queue} "
                f"(at most {self.share} % under load)")


def _dscps(path: str, value) -> tuple:
    """One DSCP or a list of them."""
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


#: the YAML form (`emucore.yamlform`); the field name threshold_bytes is accepted too
TRIM = Form({"dscps": "dscps", "threshold": "threshold_bytes", "keep": "keep",
             "trimmed_dscp": "trimmed_dscp", "lasthop_dscp": "lasthop_dscp", "queue": "queue",
              "share": "share"},
            read={"dscps": _dscps, "threshold": size}, write={"dscps": list},
            aliases={"threshold_bytes": "threshold"}, switch=True)
