"""The SES request header each packet of a UET message carries (issue 16 "RUD"; UE 1.0.1
§3.4 SES headers, the layouts in docs/UET.md "On the wire").

A work request (RDMA WRITE or SEND, with immediate) is one SES message: packets of at most
the MTU, each carrying where it goes (the standard header: the target's buffer offset,
memory key, message offset, request length; the first one SOM with the immediate as
header data (HD), the last EOM). A message of one packet takes the shorter header that
holds it: a SEND the small one (20 B), a SEND with immediate the medium one with header
data, a WRITE the medium one with buffer offset and key (32 B); a WRITE with immediate
needs both, so the standard one.
"""

from __future__ import annotations

from emucore.wire.uet_codes import S_EOM, S_HD, S_SOM, NextHdr, SesOpcode
from emucore.wire.uet_codec import SesReq
from traffic.workreq import IMM_WR_OPS, SEND_WR_OPS, WR


def ses_header(wr: WR, message_id: int, npkts: int, i: int, size: int, mtu: int,
               job_id: int, peer: int) -> SesReq:
    """The header of packet `i` (of `npkts`, `size` payload bytes) of `wr`'s message to
    the endpoint `peer` (pid_on_fep << 12 | resource index)."""
    flags = (S_SOM if i == 0 else 0) | (S_EOM if i == npkts - 1 else 0)
    imm = wr.imm if wr.opcode in IMM_WR_OPS else None
    if imm is not None and i == 0:
        flags |= S_HD
    send = wr.opcode in SEND_WR_OPS
    hdr = NextHdr.REQ_STD
    if npkts == 1 and wr.length <= 0x3FFF:
        hdr = (NextHdr.REQ_SMALL if send and imm is None else
               NextHdr.REQ_STD if not send and imm is not None else NextHdr.REQ_MEDIUM)
    return SesReq(SesOpcode.SEND if send else SesOpcode.WRITE, flags, message_id,
                  job_id, peer >> 12 & 0xFFF, peer & 0xFFF,
                  0 if send else wr.remote_addr, 0 if send else wr.rkey, wr.length,
                  header_data=imm or 0, payload_length=size if i else 0,
                  message_offset=i * mtu if i else 0, hdr=hdr)
