"""Link-level retry (LLR), Ultra Ethernet's hop-by-hop replay below the MAC (issue 16;
docs/UET.md "LLR"; seed 004 "Link Level Retry").

On a real UE link the sender keeps every frame in a replay buffer until the link partner
acknowledges it with a PCS ordered set; a frame the partner's MAC discarded (FCS error)
or never saw is replayed, in order, after about a microsecond. None of that can appear on
a veth - there is no PCS - so emu **models** it in the switch agent and says so: on a
port where both partners advertise LLR (the LLDP TLV of `emucore.wire.lldp`), a data frame
the link would lose (`link ... degrade loss=/corrupt=`) is sent again after `timeout`
(model time) with everything behind it held back in order, up to `max_replays` times in a
row; then it is dropped (counted `llr_exhausted`). Counters `llr_replays` per port, an
`llr_replay` event (sampled), docs/EVENTS.md.

YAML (a QoS file's `llr:` or `emu run --llr`): `llr: {timeout: 1us, max_replays: 8,
oui: 0xACDE48, subtype: 1}`.
"""

from __future__ import annotations

from dataclasses import dataclass

from emucore.qos.fields import duration, int_in
from emucore.yamlform import Form

__all__ = ["Llr"]


@dataclass(frozen=True)
class Llr:
    """LLR on every port of a switch whose partner advertises it too."""

    timeout_s: float = 1e-6   #: model seconds until a lost frame is replayed
    max_replays: int = 8      #: replays of one frame in a row before it is dropped
    #: the LLDP TLV advertising it (organisationally specific, type 127). UE's OUI and
    #: subtype are not public: the default OUI AC-DE-48 is the IEEE's example OUI, the
    #: subtype emu's choice - both configurable; the TLV's one byte: bit 0 LLR, bit 1 CBFC
    oui: int = 0xACDE48
    subtype: int = 1

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        if not 0 < self.timeout_s <= 1e-3:
            raise ValueError(f"timeout: must be in (0, 1 ms], got {self.timeout_s!r}")
        int_in("max_replays", self.max_replays, 1, 1000)
        int_in("oui", self.oui, 0, 0xFFFFFF)
        int_in("subtype", self.subtype, 0, 255)

    def to_dict(self) -> dict:
        """JSON-able form (what from_dict reads)."""
        return LLR.dict_of(self)

    @classmethod
    def from_dict(cls, data: dict | bool | None, source: str = "llr") -> "Llr":
        """From the YAML mapping (`true`: the defaults); errors name ``source.field``."""
        return LLR.build(source, cls, data)


#: the YAML form (`emucore.yamlform`); the field name timeout_s is accepted too
LLR = Form({"timeout": "timeout_s", "max_replays": "max_replays", "oui": "oui",
            "subtype": "subtype"},
           read={"timeout": duration}, aliases={"timeout_s": "timeout"}, switch=True)
