"""DCBX policy: what a port advertises of its QoS in LLDP and what it turns on after
hearing its partner (book ch.11 "LLDP with DCBX", Capture 11-1, Example 11-7;
IEEE 802.1Q-2018 Annex D.2.8-D.2.10, formerly 802.1Qaz).

The TLV formats are `emucore.wire.lldp`; here the QoS configuration is mapped onto them:
the ETS tables (priority n -> TC n, a strict queue TSA 0), the application priorities
(UDP 4791 -> the lowest no-drop priority, each classified DSCP -> its qos-group), the PFC
enable bitmap, and the UE link-capabilities TLV when LLR or CBFC runs
(`emucore.qos.llr`, `emucore.qos.cbfc`). `pfc_active` implements
``priority-flow-control mode auto|on|off`` (Example 11-7): in auto a priority is lossless
only when both ends advertise it; `llr_active` / `cbfc_active` need both ends too.
"""

from __future__ import annotations

from scapy.packet import Packet

from emucore.qos.fields import NUM_QUEUES
from emucore.qos.llr import Llr
from emucore.qos.qosconfig import QosConfig
from emucore.wire.lldp import (APP_SEL_DSCP, APP_SEL_UDP, UE_CBFC, UE_LLR, Neighbor,
                               dcbx_layers, lldp_frame, org_value, ue_link_tlv)
from emucore.wire.roce_codes import ROCE_UDP_PORT

__all__ = ["app_priorities", "build_lldp_frame", "cbfc_active", "dcbx_tlvs", "ets_tables",
           "llr_active", "pfc_active", "ue_link_ids"]


def ets_tables(cfg: QosConfig) -> tuple[list[int], list[int], list[int]]:
    """(TC of each priority, bandwidth % per TC, TSA per TC): identity map, strict queues TSA 0."""
    bw = [0 if q.strict else q.bandwidth_percent for q in cfg.queuing.queues]
    tsa = [0 if q.strict else 2 for q in cfg.queuing.queues]
    return list(range(NUM_QUEUES)), bw, tsa


def app_priorities(cfg: QosConfig) -> list[tuple[int, int, int]]:
    """(priority, selector, protocol): UDP 4791 -> lowest no-drop priority, each classified DSCP."""
    out = []
    if cfg.pfc.no_drop:
        out.append((min(cfg.pfc.no_drop), APP_SEL_UDP, ROCE_UDP_PORT))
    for c in cfg.classification.classes:
        for d in c.dscp:
            out.append((c.qos_group, APP_SEL_DSCP, d))
    return out


def _mode(cfg: QosConfig, ifname: str | None) -> str:
    return cfg.port(ifname).pfc_mode if ifname else cfg.default_interface.pfc_mode


def dcbx_tlvs(cfg: QosConfig, ifname: str | None = None, willing: bool = False) -> Packet:
    """The four DCBX TLVs advertising `cfg` on a port (PFC enable empty if its mode is off)."""
    enabled = frozenset() if _mode(cfg, ifname) == "off" else cfg.pfc.no_drop
    return dcbx_layers(*ets_tables(cfg), enabled, app_priorities(cfg), willing)


def ue_link_ids(cfg: QosConfig) -> tuple[int, int]:
    """(OUI, subtype) of the UE link-capabilities TLV: LLR's, else its defaults."""
    llr = cfg.llr or Llr()
    return llr.oui, llr.subtype


def build_lldp_frame(src_mac: str, chassis_mac: str, port_id: str, system_name: str,
                     cfg: QosConfig | None = None, ttl: int = 120, willing: bool = False,
                     cbfc_capable: bool = True) -> bytes:
    """An LLDPDU frame (to 01:80:C2:00:00:0E, Ethertype 0x88CC) with DCBX TLVs if `cfg`,
    and the UE link-capabilities TLV when it has LLR or (`cbfc_capable`: a switch) CBFC."""
    tlvs = None
    if cfg is not None:
        tlvs = dcbx_tlvs(cfg, port_id, willing)
        flags = (UE_LLR if cfg.llr else 0) | (UE_CBFC if cfg.cbfc and cbfc_capable else 0)
        if flags:  # emucore.qos.llr / emucore.qos.cbfc
            tlvs = tlvs / ue_link_tlv(*ue_link_ids(cfg), flags)
    return lldp_frame(src_mac, chassis_mac, port_id, system_name, tlvs, ttl)


def _ue_flags(cfg: QosConfig, neighbour: Neighbor | None) -> int:
    return 0 if neighbour is None else org_value(neighbour, *ue_link_ids(cfg))


def llr_active(local_cfg: QosConfig, neighbour: Neighbor | None) -> bool:
    """LLR runs on a link when we have it and the partner advertised it (our TLV)."""
    return local_cfg.llr is not None and bool(_ue_flags(local_cfg, neighbour) & UE_LLR)


def cbfc_active(local_cfg: QosConfig, neighbour: Neighbor | None) -> bool:
    """CBFC replaces PFC on a link when we have it and the partner advertised it."""
    return local_cfg.cbfc is not None and bool(_ue_flags(local_cfg, neighbour) & UE_CBFC)


def pfc_active(local_cfg: QosConfig, neighbour: Neighbor | None,
               ifname: str | None = None) -> frozenset[int]:
    """Lossless priorities on a port: mode on = ours, off = none, auto = ours advertised by both."""
    mode = _mode(local_cfg, ifname)
    if mode == "on":
        return frozenset(local_cfg.pfc.no_drop)
    if mode == "off" or neighbour is None or neighbour.pfc_enabled is None:
        return frozenset()
    return frozenset(local_cfg.pfc.no_drop) & neighbour.pfc_enabled
