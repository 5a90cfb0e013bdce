"""RoCEv2 packet formats as Scapy layers: the source of truth for every frame on the fabric.

Book ch.9 (Figure 9-5: Eth / IP / UDP 4791 / IB BTH / RETH / data; P_Key 0x8012, QP
0x12345678, PSN 0x000abc), ch.11 (Figure 11-3: data with DSCP 24 + ECT, CNP with DSCP 48)
and ch.12 (Figures 12-1..12-3 WRITE FIRST/MIDDLE/LAST, Figure 12-7 WRITE ONLY with a
RETH in every packet). Formats from the InfiniBand Architecture Specification Vol. 1
(ch.9.2-9.5: BTH, RETH, AETH, ImmDt; Table 38 opcodes) and its RoCEv2 annex A17 (UDP
port 4791, the ICRC over an IP pseudo-header, the CNP).

`scapy.contrib.roce` already provides BTH (with the ICRC computed in its post_build),
AETH (bound to ACK 0x11) and the CNP's 16 reserved bytes (`CNPPadding`, bound to 0x81).
This module adds RETH and ImmDt as Scapy layers bound to BTH by opcode (the opcodes and
which headers follow them are `emucore.wire.ib.Op`), the IP/UDP choices of every RoCE
frame, and `scapy_frame`, the reference builder every byte template
(`emucore.wire.templates`) is tested against.

Choices, fixed here so that templates and Scapy agree byte for byte:
* IPv4: identification 0 and DF set (RoCEv2 is never fragmented; the path MTU is
  negotiated), TTL 64, no options.
* TOS: data and ACKs DSCP 24 + ECN 10 (ECT(0)); CNPs DSCP 48 + ECN 10 too, as the
  ConnectX-4 Lx CNP captured in Scapy's roce tests (TOS 0xc2): an ECT CNP crossing a
  WRED queue is marked rather than dropped (CNPs normally ride strict queue 7, no WRED).
* UDP checksum 0 (allowed for IPv4 and what RoCEv2 NICs send; the ICRC protects the
  payload); UDP source port always explicit (flow entropy per QP pair, see `udp_sport`;
  Scapy's default 53 would make Wireshark decode DNS).
* Payloads that are not a multiple of 4 bytes are padded with zero bytes and BTH
  padcount says how many (IBA 9.2: the pad aligns the payload to 4 bytes; the pad is
  covered by the ICRC). Scapy does not do this itself; `scapy_frame` does.
"""

from __future__ import annotations

import zlib

from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import IntField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_bottom_up, bind_layers

from emucore.wire.dscp import DSCP_CNP, DSCP_ROCEV2
from emucore.wire.ib import IMM_OPS, RETH_OPS, Op
from emucore.wire.roce_codes import (CNP_ECN, DATA_ECN, DEFAULT_TTL, IP_FLAGS_DF, IP_ID,  # noqa: F401
                                     ROCE_UDP_PORT, icrc_of, is_cnp, pad_count, udp_sport)

__all__ = ["RETH", "ImmDt", "AETH", "BTH", "CNPPadding", "ROCE_UDP_PORT",
           "DATA_ECN", "CNP_ECN", "IP_ID", "IP_FLAGS_DF", "DEFAULT_TTL",
           "pad_count", "udp_sport", "scapy_frame", "scapy_cnp", "icrc_reference", "icrc_of",
           "is_cnp"]



class RETH(Packet):
    """RDMA Extended Transport Header (IBA 9.3.3): virtual address, R_Key, DMA length."""

    name = "RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        IntField("dlen", 0),
    ]

    def guess_payload_class(self, payload: bytes):
        """An ImmDt follows the RETH only in RDMA WRITE ONLY with Immediate."""
        under = self.underlayer
        if isinstance(under, BTH) and under.opcode == Op.WRITE_ONLY_IMM:
            return ImmDt
        return Raw


class ImmDt(Packet):
    """Immediate Data Extended Transport Header (IBA 9.3.6): 32 bits for the responder's CQE."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def guess_payload_class(self, payload: bytes):
        """Application payload follows."""
        return Raw


# Dissection by opcode (bottom-up); building BTH()/RETH() without an opcode picks WRITE
# ONLY, BTH()/ImmDt() picks WRITE LAST with IMM (top-down, last binding wins).
for _op in sorted(RETH_OPS - {Op.WRITE_ONLY}):
    bind_bottom_up(BTH, RETH, opcode=int(_op))
bind_layers(BTH, RETH, opcode=int(Op.WRITE_ONLY))
for _op in sorted(IMM_OPS - RETH_OPS - {Op.WRITE_LAST_IMM}):
    bind_bottom_up(BTH, ImmDt, opcode=int(_op))
bind_layers(BTH, ImmDt, opcode=int(Op.WRITE_LAST_IMM))
# AETH on ACK 0x11 and CNPPadding on 0x81 are bound by scapy.contrib.roce already.
del _op


def scapy_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, opcode: int,
                dqpn: int, psn: int, pkey: int = 0xFFFF, ackreq: bool = False,
                reth: tuple[int, int, int] | None = None, imm: int | None = None,
                aeth: tuple[int, int] | None = None, payload: bytes = b"",
                dscp: int = DSCP_ROCEV2, ecn: int = DATA_ECN, becn: bool = False,
                ttl: int = DEFAULT_TTL) -> Packet:
    """One RoCEv2 frame as a Scapy packet: Ether/IPv4/UDP 4791/BTH[/RETH][/ImmDt][/AETH]/data.

    `reth` is (va, rkey, dlen), `aeth` (syndrome, msn). For a CNP (opcode 0x81) pass
    `payload=bytes(16)` or use `scapy_cnp`. The ICRC is computed by Scapy's BTH."""
    if not 0 <= sport <= 0xFFFF:
        raise ValueError(f"sport: must be 0..65535, got {sport!r}")
    if not 0 <= dscp < 64:
        raise ValueError(f"dscp: must be 0..63, got {dscp!r}")
    if not 0 <= ecn < 4:
        raise ValueError(f"ecn: must be 0..3, got {ecn!r}")
    pad = pad_count(len(payload)) if opcode != Op.CNP else 0
    pkt = (Ether(src=src_mac, dst=dst_mac)
           / IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, id=IP_ID, flags="DF", ttl=ttl)
           / UDP(sport=sport, dport=ROCE_UDP_PORT, chksum=0)
           / BTH(opcode=int(opcode), padcount=pad, pkey=pkey, becn=int(becn), dqpn=dqpn,
                 ackreq=int(ackreq), psn=psn))
    if reth is not None:
        va, rkey, dlen = reth
        pkt /= RETH(va=va, rkey=rkey, dlen=dlen)
    if imm is not None:
        pkt /= ImmDt(imm=imm)
    if aeth is not None:
        syndrome, msn = aeth
        pkt /= AETH(syndrome=syndrome, msn=msn)
    if opcode == Op.CNP and not payload:
        pkt /= CNPPadding()
    elif payload or pad:
        pkt /= Raw(bytes(payload) + bytes(pad))
    return pkt


def scapy_cnp(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, dqpn: int,
              pkey: int = 0xFFFF, ttl: int = DEFAULT_TTL) -> Packet:
    """A CNP to the sender's QP `dqpn`: opcode 0x81, BECN, 16 reserved bytes, DSCP 48."""
    return scapy_frame(src_mac, dst_mac, src_ip, dst_ip, sport, Op.CNP, dqpn, 0, pkey=pkey,
                       becn=True, dscp=DSCP_CNP, ecn=CNP_ECN, ttl=ttl)


def icrc_reference(frame: bytes) -> int:
    """The ICRC of an Ethernet/IPv4 (no options)/UDP/BTH frame, recomputed byte-wise as
    Linux rxe_icrc.c does: 8 bytes of 1s for the LRH, IP TOS/TTL/checksum, UDP checksum
    and BTH resv8a masked to 1s, CRC-32 up to the ICRC. Independent of Scapy's layers."""
    ps = bytearray(b"\xff" * 8) + bytearray(frame[14:-4])
    ps[8 + 1] = 0xFF            # IP TOS
    ps[8 + 8] = 0xFF            # IP TTL
    ps[8 + 10:8 + 12] = b"\xff\xff"  # IP header checksum
    ps[8 + 26:8 + 28] = b"\xff\xff"  # UDP checksum
    ps[8 + 28 + 4] = 0xFF       # BTH FECN/BECN/resv6
    return zlib.crc32(ps) & 0xFFFFFFFF
