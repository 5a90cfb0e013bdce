"""LLDP with IEEE DCBX (802.1Qaz / 802.1Qbb) TLVs: their formats, build and parse (book ch.11).

Book ch.11 "LLDP with DCBX", Capture 11-1: PFC is negotiated by LLDP (IEEE 802.1AB)
carrying the IEEE DCBX organisationally specific TLVs (type 127, OUI 00-80-C2;
IEEE 802.1Q-2018 Annex D.2.8-D.2.10, formerly 802.1Qaz):

* 0x09 ETS Configuration: willing | CBS | 3 reserved bits | max TCs (3 bits, 0 = 8),
  priority -> TC table (8 nibbles), TC bandwidth % (8 bytes), TSA per TC (8 bytes:
  0 strict, 1 CBS, 2 ETS, 255 vendor). Length 25.
* 0x0A ETS Recommendation: reserved byte + the same three tables. Length 25.
* 0x0B PFC Configuration: willing | MBC | 2 reserved bits | PFC cap (4 bits, the
  book's capture: "1000 = Max PFC Enabled Traffic Classes"), enable bitmap (bit n =
  priority n). Length 6.
* 0x0C Application Priority: reserved byte + entries of 3 bytes: priority (3 bits),
  2 reserved bits, selector (3 bits: 1 Ethertype, 2 TCP/SCTP port, 3 UDP/DCCP port,
  4 TCP/SCTP/UDP/DCCP port, 5 DSCP), protocol ID (16 bits). Length 5 + 3n.

scapy.contrib.lldp has LLDPDU, the basic TLVs and a generic organisation-specific TLV
but none of these, so they are added here as Scapy layers and registered in front of
the generic one. The UE link-capabilities TLV is a generic organisation-specific TLV
whose one value byte holds bit 0 LLR, bit 1 CBFC. What a port advertises of its QoS and
what it turns on after hearing its partner (`pfc_active`) is policy:
`emucore.qos.dcbx`. This module imports nothing of the QoS.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from scapy.contrib.lldp import (LLDP_NEAREST_BRIDGE_MAC, LLDPDU, LLDPDU_CLASS_TYPES,
                                LLDPDUChassisID, LLDPDUEndOfLLDPDU,
                                LLDPDUGenericOrganisationSpecific, LLDPDUPortID,
                                LLDPDUSystemName, LLDPDUTimeToLive)
from scapy.fields import (BitEnumField, BitField, BitFieldLenField, ByteEnumField, ByteField,
                          FieldListField, FlagsField, PacketListField, ShortField,
                          X3BytesField, XByteField)
from scapy.layers.l2 import Ether
from scapy.packet import Packet

OUI_IEEE_802_1 = 0x0080C2
UE_LLR, UE_CBFC = 0x01, 0x02  #: the UE link-capabilities TLV's flags (emucore.qos.llr)
TSA = {0: "strict", 1: "cbs", 2: "ets", 255: "vendor"}
APP_SELECTORS = {1: "ethertype", 2: "tcp", 3: "udp", 4: "tcp/udp", 5: "dscp"}
APP_SEL_UDP, APP_SEL_DSCP = 3, 5  #: the Application Priority selectors emu advertises
PRIO_FLAGS = [f"p{i}" for i in range(8)]


def _matcher(subtype: int):
    def match(payload: bytes) -> bool:
        return (len(payload) >= 6 and payload[0] >> 1 == 127
                and int.from_bytes(payload[2:5], "big") == OUI_IEEE_802_1 and payload[5] == subtype)
    return staticmethod(match)


def _ets_tables() -> list:
    return ([BitField(f"tc_of_prio{i}", i, 4) for i in range(8)]
            + [FieldListField("tc_bandwidth", [0] * 8, ByteField("bw", 0), count_from=lambda p: 8),
               FieldListField("tsa", [2] * 8, ByteEnumField("tsa", 2, TSA),
                              count_from=lambda p: 8)])


class LLDPDUDcbxEtsConfiguration(LLDPDU):
    """IEEE 802.1Qaz ETS Configuration TLV (OUI 00-80-C2, subtype 0x09)."""

    name = "IEEE 802.1 ETS Configuration"
    fields_desc = [BitEnumField("_type", 127, 7, LLDPDU.TYPES), BitField("_length", 25, 9),
                   X3BytesField("org_code", OUI_IEEE_802_1), XByteField("subtype", 0x09),
                   BitField("willing", 0, 1), BitField("cbs", 0, 1), BitField("reserved", 0, 3),
                   BitField("max_tcs", 0, 3)] + _ets_tables()
    _match_organization_specific = _matcher(0x09)


class LLDPDUDcbxEtsRecommendation(LLDPDU):
    """IEEE 802.1Qaz ETS Recommendation TLV (OUI 00-80-C2, subtype 0x0A)."""

    name = "IEEE 802.1 ETS Recommendation"
    fields_desc = [BitEnumField("_type", 127, 7, LLDPDU.TYPES), BitField("_length", 25, 9),
                   X3BytesField("org_code", OUI_IEEE_802_1), XByteField("subtype", 0x0A),
                   ByteField("reserved", 0)] + _ets_tables()
    _match_organization_specific = _matcher(0x0A)


class LLDPDUDcbxPfcConfiguration(LLDPDU):
    """IEEE 802.1Qbb/Qaz PFC Configuration TLV (OUI 00-80-C2, subtype 0x0B)."""

    name = "IEEE 802.1 PFC Configuration"
    fields_desc = [BitEnumField("_type", 127, 7, LLDPDU.TYPES), BitField("_length", 6, 9),
                   X3BytesField("org_code", OUI_IEEE_802_1), XByteField("subtype", 0x0B),
                   BitField("willing", 0, 1), BitField("mbc", 0, 1), BitField("reserved", 0, 2),
                   BitField("pfc_cap", 8, 4), FlagsField("pfc_enable", 0, 8, PRIO_FLAGS)]
    _match_organization_specific = _matcher(0x0B)


class DcbxAppPriorityEntry(Packet):
    """One Application Priority entry: priority, selector, protocol ID."""

    name = "Application Priority entry"
    fields_desc = [BitField("priority", 0, 3), BitField("reserved", 0, 2),
                   BitEnumField("sel", 3, 3, APP_SELECTORS), ShortField("protocol", 0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        """Entries are fixed 3-byte records."""
        return b"", s


class LLDPDUDcbxAppPriority(LLDPDU):
    """IEEE 802.1Qaz Application Priority TLV (OUI 00-80-C2, subtype 0x0C)."""

    name = "IEEE 802.1 Application Priority"
    fields_desc = [BitEnumField("_type", 127, 7, LLDPDU.TYPES),
                   BitFieldLenField("_length", None, 9, length_of="apps",
                                    adjust=lambda pkt, x: x + 5),
                   X3BytesField("org_code", OUI_IEEE_802_1), XByteField("subtype", 0x0C),
                   ByteField("reserved", 0),
                   PacketListField("apps", [], DcbxAppPriorityEntry,
                                   length_from=lambda p: (p._length or 5) - 5)]
    _match_organization_specific = _matcher(0x0C)


DCBX_LAYERS = (LLDPDUDcbxEtsConfiguration, LLDPDUDcbxEtsRecommendation,
               LLDPDUDcbxPfcConfiguration, LLDPDUDcbxAppPriority)
for _cls in reversed(DCBX_LAYERS):  # like bind_layers: teach LLDPDU's dispatcher (idempotent)
    if _cls not in LLDPDU_CLASS_TYPES[127]:
        LLDPDU_CLASS_TYPES[127].insert(0, _cls)


@dataclass(frozen=True)
class Neighbor:
    """What one LLDPDU told us about the peer on a port (`show lldp neighbors`)."""

    chassis_id: str
    port_id: str
    ttl: int
    system_name: str = ""
    src_mac: str = ""
    pfc_enabled: frozenset[int] | None = None  # None: no PFC TLV (no DCBX)
    pfc_willing: bool = False
    pfc_cap: int = 0
    ets_tc_of_prio: tuple[int, ...] = ()
    ets_bandwidth: tuple[int, ...] = ()
    ets_tsa: tuple[int, ...] = ()
    app: tuple[tuple[int, int, int], ...] = ()  # (priority, selector, protocol)
    #: other organisationally specific TLVs: (OUI, subtype, first value byte or -1)
    org: tuple[tuple[int, int, int], ...] = ()

    def to_dict(self) -> dict:
        """JSON-able record (the `lldp` entries of show.py's state dict)."""
        d = asdict(self)
        d["pfc_enabled"] = None if self.pfc_enabled is None else sorted(self.pfc_enabled)
        d["app"] = [list(a) for a in self.app]
        d["org"] = [list(o) for o in self.org]
        for k in ("ets_tc_of_prio", "ets_bandwidth", "ets_tsa"):
            d[k] = list(d[k])
        return d


def _bitmap(prios) -> int:
    return sum(1 << p for p in prios)


def dcbx_layers(tc_of_prio: list[int], bandwidth: list[int], tsa: list[int],
                pfc_enabled, apps: list[tuple[int, int, int]], willing: bool = False) -> Packet:
    """The four DCBX TLVs: ETS Configuration and Recommendation (TC of each priority,
    bandwidth % and TSA per TC), PFC Configuration (the `pfc_enabled` priorities, cap 8)
    and Application Priority ((priority, selector, protocol) entries)."""
    tables = {**{f"tc_of_prio{i}": t for i, t in enumerate(tc_of_prio)},
              "tc_bandwidth": bandwidth, "tsa": tsa}
    return (LLDPDUDcbxEtsConfiguration(willing=int(willing), max_tcs=0, **tables)
            / LLDPDUDcbxEtsRecommendation(**tables)
            / LLDPDUDcbxPfcConfiguration(willing=int(willing), pfc_cap=8,
                                         pfc_enable=_bitmap(pfc_enabled))
            / LLDPDUDcbxAppPriority(apps=[DcbxAppPriorityEntry(priority=p, sel=s, protocol=v)
                                          for p, s, v in apps]))


def ue_link_tlv(oui: int, subtype: int, flags: int) -> Packet:
    """The UE link-capabilities TLV: organisation-specific, one byte of flags
    (`UE_LLR` | `UE_CBFC`)."""
    return LLDPDUGenericOrganisationSpecific(org_code=oui, subtype=subtype, data=bytes([flags]))


def lldp_frame(src_mac: str, chassis_mac: str, port_id: str, system_name: str,
               tlvs: Packet | None = None, ttl: int = 120) -> bytes:
    """An LLDPDU frame (to 01:80:C2:00:00:0E, Ethertype 0x88CC): chassis ID (MAC), port
    ID (interface name), TTL, system name, then `tlvs`, then the End TLV."""
    pkt = (Ether(dst=LLDP_NEAREST_BRIDGE_MAC, src=src_mac)
           / LLDPDUChassisID(subtype=4, id=chassis_mac)
           / LLDPDUPortID(subtype=5, id=port_id)
           / LLDPDUTimeToLive(ttl=ttl)
           / LLDPDUSystemName(system_name=system_name))
    if tlvs is not None:
        pkt = pkt / tlvs
    return bytes(pkt / LLDPDUEndOfLLDPDU())


def org_value(neighbour: Neighbor, oui: int, subtype: int) -> int:
    """The first value byte of the neighbour's organisation-specific TLV `oui`/`subtype`
    (0 if it sent none)."""
    return next((v for o, s, v in neighbour.org if o == oui and s == subtype and v >= 0), 0)


def _text(v) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


#: (OUI 00-80-C2 subtype) -> its fixed TLV length; Application Priority: 5 + 3 n
DCBX_TLV_LEN = {0x09: 25, 0x0A: 25, 0x0B: 6}


def check_tlvs(frame: bytes) -> None:
    """ValueError unless the LLDPDU's TLVs tile the frame (each length within it, up to
    the End TLV or the frame's end), every organisation-specific TLV holds its OUI and
    subtype (IEEE 802.1AB 8.6.1: length >= 4) and every DCBX TLV has its length (Annex
    D.2.8-D.2.10; issue 14: fuzzed frames). Pure, never anything but ValueError."""
    off, n = 14, len(frame)
    while off < n:
        if off + 2 > n:
            raise ValueError(f"LLDP: TLV header cut at byte {off}")
        t, length = frame[off] >> 1, (frame[off] & 1) << 8 | frame[off + 1]
        val = off + 2
        if val + length > n:
            raise ValueError(f"LLDP: TLV type {t} at byte {off}: length {length} overruns "
                             f"the {n}-byte frame")
        if t == 0:
            return
        if t == 127:
            if length < 4:
                raise ValueError(f"LLDP: organisation-specific TLV at byte {off}: length "
                                 f"{length} < 4")
            sub = frame[val + 3]
            if int.from_bytes(frame[val:val + 3], "big") == OUI_IEEE_802_1 and (
                    length != DCBX_TLV_LEN[sub] if sub in DCBX_TLV_LEN else
                    sub == 0x0C and (length < 5 or (length - 5) % 3)):
                raise ValueError(f"LLDP: DCBX TLV subtype {sub:#04x} at byte {off}: bad "
                                 f"length {length}")
        off = val + length


def parse_lldp_frame(frame: bytes) -> Neighbor:
    """Neighbour record from a received LLDP frame; ValueError if it is not one or is
    malformed (`check_tlvs`, or what Scapy's strict LLDP dissection rejects: mandatory
    TLVs missing or out of order, zero-length IDs, a TTL not 2 bytes long)."""
    if len(frame) < 14 or frame[12:14] != b"\x88\xcc":
        et = int.from_bytes(frame[12:14], "big") if len(frame) >= 14 else None
        raise ValueError(f"not an LLDP frame (ethertype {et if et is None else hex(et)})")
    check_tlvs(frame)
    try:
        return _neighbor(Ether(frame))
    except ValueError:
        raise
    except Exception as exc:  # Scapy's LLDP errors, struct.error, ... on a garbage LLDPDU
        raise ValueError(f"LLDP: malformed LLDPDU: {type(exc).__name__}: {exc}") from exc


def _neighbor(pkt: Packet) -> Neighbor:
    if LLDPDUChassisID not in pkt:
        raise ValueError("LLDP: no Chassis ID TLV")
    kw: dict = {"chassis_id": _text(pkt[LLDPDUChassisID].id),
                "port_id": _text(pkt[LLDPDUPortID].id) if LLDPDUPortID in pkt else "",
                "ttl": pkt[LLDPDUTimeToLive].ttl if LLDPDUTimeToLive in pkt else 0,
                "src_mac": pkt.src}
    if LLDPDUSystemName in pkt:
        kw["system_name"] = _text(pkt[LLDPDUSystemName].system_name)
    if LLDPDUDcbxPfcConfiguration in pkt:
        pfc = pkt[LLDPDUDcbxPfcConfiguration]
        kw.update(pfc_enabled=frozenset(i for i in range(8) if int(pfc.pfc_enable) >> i & 1),
                  pfc_willing=bool(pfc.willing), pfc_cap=pfc.pfc_cap)
    if LLDPDUDcbxEtsConfiguration in pkt:
        ets = pkt[LLDPDUDcbxEtsConfiguration]
        kw.update(ets_tc_of_prio=tuple(getattr(ets, f"tc_of_prio{i}") for i in range(8)),
                  ets_bandwidth=tuple(ets.tc_bandwidth), ets_tsa=tuple(ets.tsa))
    if LLDPDUDcbxAppPriority in pkt:
        kw["app"] = tuple((a.priority, a.sel, a.protocol)
                          for a in pkt[LLDPDUDcbxAppPriority].apps)
    org, layer = [], pkt.getlayer(LLDPDUGenericOrganisationSpecific)
    while layer is not None:
        if isinstance(layer, LLDPDUGenericOrganisationSpecific) and \
                type(layer) is LLDPDUGenericOrganisationSpecific:
            data = bytes(layer.data or b"")
            org.append((int(layer.org_code), int(layer.subtype), data[0] if data else -1))
        layer = layer.payload.getlayer(LLDPDUGenericOrganisationSpecific) \
            if layer.payload else None
    kw["org"] = tuple(org)
    return Neighbor(**kw)
