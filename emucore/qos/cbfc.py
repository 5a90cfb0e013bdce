"""Credit-based flow control, modelled (issue 16 "CBFC";
seed 004 "Credit-Based Flow Control"): per virtual channel, a link's sender may only
send what its receiver has buffer for. The receiver starts its partner with `credits`
bytes per lossless channel and returns credits as frames leave its buffer (an update
every `update` bytes, `emucore.wire.credit`); a sender whose credits fall below one frame
stops that channel until credits come back - no pause frame, no pause timer, no
headroom. It replaces PFC on switch-to-switch links where both partners advertise it
(the UE link-capabilities LLDP TLV, bit 1); the emulated NICs speak PFC, so host links
keep PFC. Modelled in the switch agent, not below a MAC: the updates are frames.

Link start (`switch_agent.dcbx`): when a port turns CBFC on it may send nothing on the
lossless channels until its partner's initial grant arrives (a grant that came before
is kept and applied), and it grants its partner its buffer less the bytes of the
partner's frames it still holds (those are returned as they leave). So neither side
spends credits the other does not count - the start-up race of a link whose two ends
agree at different times.

YAML (a QoS file's `cbfc:` or `emu run --cbfc`): `cbfc: {credits: 3200KB, update: 64KB}`
(default credits: the QoS's xOFF, the buffer PFC would let fill before pausing).
"""

from __future__ import annotations

from dataclasses import dataclass

from emucore.qos.fields import int_in, size
from emucore.yamlform import Form, optional

__all__ = ["Cbfc", "CreditState"]


@dataclass(frozen=True)
class Cbfc:
    """CBFC on the lossless channels of every switch-to-switch link that agrees."""

    credits_bytes: int | None = None  #: buffer per channel per link (None: the QoS xOFF)
    update_bytes: int = 65536         #: return credits in steps of this many bytes

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        if self.credits_bytes is not None:
            int_in("credits", self.credits_bytes, 16384, 1 << 32)
        int_in("update", self.update_bytes, 1, 1 << 30)

    def to_dict(self) -> dict:
        """JSON-able form (what from_dict reads)."""
        return CBFC.dict_of(self)

    @classmethod
    def from_dict(cls, data: dict | bool | None, source: str = "cbfc") -> "Cbfc":
        """From the YAML mapping (`true`: the defaults); errors name ``source.field``."""
        return CBFC.build(source, cls, data)


#: the YAML form (`emucore.yamlform`); the field names are accepted too
CBFC = Form({"credits": "credits_bytes", "update": "update_bytes"},
            read={"credits": optional(size), "update": optional(size)},
            aliases={"credits_bytes": "credits", "update_bytes": "update"}, switch=True)


class CreditState:
    """Both directions of one port's CBFC (pure): credits to send with, per channel, and
    credits owed to the partner."""

    __slots__ = ("vcs", "credits", "owed", "update", "floor", "blocked", "blocks",
                 "updates_tx", "updates_rx")

    def __init__(self, vcs: frozenset[int], credits: int, update: int, mtu: int,
                 start: int | None = None) -> None:
        """`credits`: the partner's buffer per channel; `start`: what we may send before
        the partner's first grant (None: `credits`). A link coming up starts at 0 and
        waits for the partner's initial grant, as PCIe's InitFC: neither side counts
        frames the other sent before it counted them (`Dcbx` sends the grants)."""
        self.vcs = vcs
        first = credits if start is None else start
        self.credits = [first if v in vcs else 0 for v in range(8)]
        self.owed = [0] * 8
        self.update = update
        self.floor = mtu  # below this a frame might not fit: the channel stops
        self.blocked = sum(1 << v for v in vcs) if first < mtu else 0  # bit v: too few credits
        self.blocks = self.updates_tx = self.updates_rx = 0

    def consume(self, vc: int, nbytes: int) -> bool:
        """A frame of channel `vc` was sent; True if the channel just stopped."""
        if not self.vcs or vc not in self.vcs:
            return False
        c = self.credits[vc] = self.credits[vc] - nbytes
        if c < self.floor and not self.blocked >> vc & 1:
            self.blocked |= 1 << vc
            self.blocks += 1
            return True
        return False

    def grant(self, vc: int, credits: int) -> bool:
        """Credits came back; True if the channel may send again."""
        self.updates_rx += 1
        if vc not in self.vcs:
            return False
        c = self.credits[vc] = self.credits[vc] + credits
        if c >= self.floor and self.blocked >> vc & 1:
            self.blocked &= ~(1 << vc)
            return True
        return False

    def freed(self, vc: int, nbytes: int) -> int:
        """A frame received on channel `vc` left our buffer: the credits to return now
        (0 until `update` bytes are owed)."""
        o = self.owed[vc] = self.owed[vc] + nbytes
        if o < self.update:
            return 0
        self.owed[vc] = 0
        self.updates_tx += 1
        return o

    def counters(self) -> dict:
        """For the port's counters."""
        return {"vcs": sorted(self.vcs), "credits": list(self.credits), "owed": list(self.owed),
                "blocked": [bool(self.blocked >> v & 1) for v in range(8)],
                "blocks": self.blocks, "updates_tx": self.updates_tx,
                "updates_rx": self.updates_rx}
