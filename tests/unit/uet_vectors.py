"""Hand-written UET header bytes (issue 32): the one byte table in emu that does not come
from emu. Each vector is the UET headers (PDS [+ SES]) of one packet, typed field by field
from the public layouts, with each field's source; test_uet_vectors.py holds all three of
emu's implementations against it - the codec (emucore/wire/uet_codec.py), the Scapy layers
(emucore/wire/uet.py) and the Lua dissector (wireshark/uet.lua via tshark).

Sources (named as in docs/UET.md):
  REF  the UEC's reference provider, uet-ref-prov `uet_pkt_hdr.h` (the struct or constant)
  SPEC the UE 1.0.1 specification (where REF leaves a field opaque)
Fields are big-endian (REF packs its structs and byte-swaps with htons/htonl). Nothing
here imports emu: the values are plain numbers, the bytes plain hex.

`pds` and `ses` give the field values under the Scapy layers' names (`ses_layer` names
the SES layer class), so the tests can build and read each vector with every
implementation; `size` is the header bytes the sources give, checked against the hex.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRLG = "REF uet_pds_prlg: type 0xf800 | next_hdr (CTRL: ctrl_type) 0x0780 | flags 0x007f"
REQ = "REF uet_pds_req"
ACK = "REF uet_pds_ack"
ACK_CC = "REF uet_pds_ack_cc"
NSCC = ("SPEC NSCC ack_cc_state: service_time 16 | restore_cwnd 1 | rcv_cwnd_pend 7 | "
        "rcvd_bytes 24 | ooo_count 16 (REF keeps ack_cc_state one opaque uint64)")
NACK = "REF uet_pds_nack"
CTRL = "REF uet_pds_ctrl"
CMN = "REF uet_ses_req_cmn"
STD = "REF uet_ses_req_std"
MED = "REF uet_ses_req_smsg (UET_HDR_REQ_MEDIUM)"
SMALL = "REF uet_ses_req_onm (UET_HDR_REQ_SMALL)"
RSP = "REF uet_ses_rsp (uet_ses_rsp_cmn + mod_len)"

#: the SES ids the requests below address: generation 0x0A, job 0x0ABCDE, PID on FEP 0x123,
#: resource index 0x456
IDS = (("0A", "ri_gen 0x0A (ri_gen_job_id 0xff000000)", CMN),
       ("0ABCDE", "job_id 0x0ABCDE (ri_gen_job_id 0x00ffffff)", CMN),
       ("0123", "rsvd 0 | pid_on_fep 0x123 (rsvd_pid_on_fep 0x0fff)", CMN),
       ("0456", "rsvd 0 | res_index 0x456 (rsvd_res_index 0x0fff)", CMN))
IDS_VALUES = {"index_generation": 0x0A, "job_id": 0x0ABCDE, "pid_on_fep": 0x123,
              "resource_index": 0x456}


@dataclass(frozen=True)
class Vector:
    """One packet's UET headers: (hex, field = value, source) parts and the values."""

    name: str
    size: int
    parts: tuple[tuple[str, str, str], ...]
    pds: dict
    ses: dict = field(default_factory=dict)
    ses_layer: str | None = None

    @property
    def data(self) -> bytes:
        """The bytes the parts spell."""
        return bytes.fromhex("".join(h for h, _f, _s in self.parts))


VECTORS = (
    Vector("rud_req_syn_ses_std_som", 12 + 44, (
        ("118C", "type 2 RUD_REQ | next_hdr 3 REQ_STD | flags AR 0x08 + SYN 0x04", PRLG),
        ("0003", "clear_psn_offset 3 (int16)", REQ),
        ("01020304", "psn 0x01020304", REQ),
        ("0A0B", "spdcid 0x0A0B", REQ),
        ("0011", "SYN: pdc_info 0 | psn_offset 17 (UET_PDS_REQ_PSN_OFFSET_MASK 0x0fff)", REQ),
        ("01", "rsvd 0 | opcode 1 UET_WRITE (uet_ses_req_opcode_t)", CMN),
        ("05", "ver 0 | flags HD 0x04 + SOM 0x01 (UET_SES_REQ_FLAG_*)", CMN),
        ("0007", "msg_id 7 (UET_HDR_REQ_STD)", CMN),
        ("5A", "ri_gen 0x5A", CMN), *IDS[1:],
        ("0000000000010000", "buf_off 0x10000", STD),
        ("00000005", "initiator 5", STD),
        ("00000000FEEDF00D", "mem_key 0xFEEDF00D", STD),
        ("0000000080000001", "cmpl_data (header data, SOM) 0x80000001", STD),
        ("00003000", "req_len 12288", STD)),
        {"type": 2, "nh": 3, "flags": 0x0C, "clear_psn_offset": 3, "psn": 0x01020304,
         "spdcid": 0x0A0B, "use_rsv": 0, "pdc_rsv": 0, "psn_offset": 17},
        {"opcode": 1, "ses_flags": 0x05, "message_id": 7, **IDS_VALUES,
         "index_generation": 0x5A, "buffer_offset": 0x10000, "initiator": 5,
         "mem_key": 0xFEEDF00D, "header_data": 0x80000001, "request_length": 12288},
        "SESStandard"),
    Vector("rod_req_ses_std_middle", 12 + 44, (
        ("1990", "type 3 ROD_REQ | next_hdr 3 REQ_STD | flags RETX 0x10", PRLG),
        ("FFFE", "clear_psn_offset -2 (int16)", REQ),
        ("80000001", "psn 0x80000001", REQ),
        ("0A0B", "spdcid 0x0A0B", REQ),
        ("0C0D", "dpdcid 0x0C0D (no SYN)", REQ),
        ("01", "rsvd 0 | opcode 1 UET_WRITE", CMN),
        ("02", "ver 0 | flags EOM 0x02", CMN),
        ("0007", "msg_id 7", CMN), *IDS,
        ("0000000000010000", "buf_off 0x10000", STD),
        ("00000000", "initiator 0", STD),
        ("00000000FEEDF00D", "mem_key 0xFEEDF00D", STD),
        ("0000100000002000", "payload_len 4096 (0x00003fff00000000) | msg_off 8192", STD),
        ("00003000", "req_len 12288", STD)),
        {"type": 3, "nh": 3, "flags": 0x10, "clear_psn_offset": -2, "psn": 0x80000001,
         "spdcid": 0x0A0B, "dpdcid": 0x0C0D},
        {"opcode": 1, "ses_flags": 0x02, "message_id": 7, **IDS_VALUES,
         "buffer_offset": 0x10000, "initiator": 0, "mem_key": 0xFEEDF00D,
         "payload_length": 4096, "message_offset": 8192, "request_length": 12288},
        "SESStandard"),
    Vector("rud_req_ses_medium_hd_send", 12 + 32, (
        ("1108", "type 2 RUD_REQ | next_hdr 2 REQ_MEDIUM | flags AR 0x08", PRLG),
        ("0000", "clear_psn_offset 0", REQ),
        ("00000009", "psn 9", REQ),
        ("0003", "spdcid 3", REQ),
        ("0004", "dpdcid 4", REQ),
        ("05", "rsvd 0 | opcode 5 UET_SEND", CMN),
        ("07", "ver 0 | flags HD 0x04 + EOM 0x02 + SOM 0x01", CMN),
        ("3FFF", "rsvd 0 | req_len 16383 (UET_SES_REQ_LEN_MASK 0x3fff)", CMN), *IDS,
        ("00000000DEADBEEF", "hdr_data 0xDEADBEEF (HD set)", MED),
        ("00000000", "initiator 0", MED),
        ("0000000000000000", "match_bits 0", MED)),
        {"type": 2, "nh": 2, "flags": 0x08, "clear_psn_offset": 0, "psn": 9, "spdcid": 3,
         "dpdcid": 4},
        {"opcode": 5, "ses_flags": 0x07, "request_length": 16383, **IDS_VALUES,
         "header_data": 0xDEADBEEF, "initiator": 0, "mem_key": 0},
        "SESMedium"),
    Vector("rud_req_ses_medium_write", 12 + 32, (
        ("1100", "type 2 RUD_REQ | next_hdr 2 REQ_MEDIUM | flags 0", PRLG),
        ("0000", "clear_psn_offset 0", REQ),
        ("0000000A", "psn 10", REQ),
        ("0003", "spdcid 3", REQ),
        ("0004", "dpdcid 4", REQ),
        ("01", "rsvd 0 | opcode 1 UET_WRITE", CMN),
        ("03", "ver 0 | flags EOM 0x02 + SOM 0x01", CMN),
        ("1000", "rsvd 0 | req_len 4096", CMN), *IDS,
        ("0000000000007000", "buf_off 0x7000 (HD clear)", MED),
        ("00000005", "initiator 5", MED),
        ("00000000FEEDF00D", "mem_key 0xFEEDF00D", MED)),
        {"type": 2, "nh": 2, "flags": 0, "clear_psn_offset": 0, "psn": 10, "spdcid": 3,
         "dpdcid": 4},
        {"opcode": 1, "ses_flags": 0x03, "request_length": 4096, **IDS_VALUES,
         "buffer_offset": 0x7000, "initiator": 5, "mem_key": 0xFEEDF00D},
        "SESMedium"),
    Vector("rud_req_ses_small_send", 12 + 20, (
        ("1088", "type 2 RUD_REQ | next_hdr 1 REQ_SMALL | flags AR 0x08", PRLG),
        ("0000", "clear_psn_offset 0", REQ),
        ("0000000B", "psn 11", REQ),
        ("0003", "spdcid 3", REQ),
        ("0004", "dpdcid 4", REQ),
        ("05", "rsvd 0 | opcode 5 UET_SEND", CMN),
        ("03", "ver 0 | flags EOM 0x02 + SOM 0x01", CMN),
        ("03E8", "rsvd 0 | req_len 1000", CMN), *IDS,
        ("0000000000000040", "buf_off 0x40", SMALL)),
        {"type": 2, "nh": 1, "flags": 0x08, "clear_psn_offset": 0, "psn": 11, "spdcid": 3,
         "dpdcid": 4},
        {"opcode": 5, "ses_flags": 0x03, "request_length": 1000, **IDS_VALUES,
         "buffer_offset": 0x40},
        "SESSmall"),
    Vector("ack_cc_nscc_ses_response", 32 + 12, (
        ("4220", "type 8 ACK_CC | next_hdr 4 RSP | flags M 0x20 (UET_PDS_ACK_FLAGS_M)", PRLG),
        ("0003", "ack_psn_offset 3 (int16)", ACK),
        ("000003E8", "cack_psn 1000", ACK),
        ("0004", "spdcid 4", ACK),
        ("0009", "dpdcid 9", ACK),
        ("00", "cc_type 0 NSCC (0xf0) | cc flags 0 (0x0f)", ACK_CC),
        ("01", "mpr 1 (REF UET_DEFAULT_MPR: 128 PSNs / UET_PDS_MPR_GRANULARITY 128)", ACK_CC),
        ("0001", "sack_psn_offset 1 (int16)", ACK_CC),
        ("8000000000000005", "sack_bitmap 0x8000000000000005", ACK_CC),
        ("000C", "service_time 12", NSCC),
        ("00", "restore_cwnd 0 | rcv_cwnd_pend 0", NSCC),
        ("123456", "rcvd_bytes 0x123456", NSCC),
        ("0002", "ooo_count 2", NSCC),
        ("01", "list 0 (0xc0) | opcode 1 UET_RESPONSE (uet_ses_rsp_opcode_t)", RSP),
        ("01", "ver 0 | ret_code 1 UET_RC_OK (uet_ses_rc_t)", RSP),
        ("0007", "msg_id 7", RSP),
        ("000ABCDE", "ri_gen 0 | job_id 0x0ABCDE", RSP),
        ("00003000", "mod_len 12288", RSP)),
        {"type": 8, "nh": 4, "flags": 0x20, "ack_psn_offset": 3, "cack_psn": 1000,
         "spdcid": 4, "dpdcid": 9, "cc_type": 0, "cc_flags": 0, "mpr": 1, "sack_offset": 1,
         "sack_bitmap": 0x8000000000000005, "service_time": 12, "restore_cwnd": 0,
         "rcv_cwnd_pend": 0, "rcvd_bytes": 0x123456, "ooo_count": 2},
        {"list": 0, "rsp_opcode": 1, "return_code": 1, "message_id": 7,
         "index_generation": 0, "job_id": 0x0ABCDE, "mod_length": 12288},
        "SESResponse"),
    Vector("ack_cc_nscc_alone", 32, (
        ("4010", "type 8 ACK_CC | next_hdr 0 NONE | flags RETX 0x10", PRLG),
        ("FFFF", "ack_psn_offset -1 (int16)", ACK),
        ("00010000", "cack_psn 0x10000", ACK),
        ("0102", "spdcid 0x0102", ACK),
        ("0304", "dpdcid 0x0304", ACK),
        ("00", "cc_type 0 NSCC | cc flags 0", ACK_CC),
        ("00", "mpr 0 (none advertised: emu's choice)", ACK_CC),
        ("0000", "sack_psn_offset 0", ACK_CC),
        ("F0F0000000000001", "sack_bitmap 0xF0F0000000000001", ACK_CC),
        ("FFFF", "service_time 65535", NSCC),
        ("00", "restore_cwnd 0 | rcv_cwnd_pend 0", NSCC),
        ("FFFFFF", "rcvd_bytes 0xFFFFFF", NSCC),
        ("FFFF", "ooo_count 65535", NSCC)),
        {"type": 8, "nh": 0, "flags": 0x10, "ack_psn_offset": -1, "cack_psn": 0x10000,
         "spdcid": 0x0102, "dpdcid": 0x0304, "cc_type": 0, "cc_flags": 0, "mpr": 0,
         "sack_offset": 0, "sack_bitmap": 0xF0F0000000000001, "service_time": 0xFFFF,
         "restore_cwnd": 0, "rcv_cwnd_pend": 0, "rcvd_bytes": 0xFFFFFF, "ooo_count": 0xFFFF}),
    Vector("ack_plain_req_clear", 12, (
        ("3802", "type 7 ACK | next_hdr 0 | flags REQ_CLR 0x02 (REQ field = 1 clear)", PRLG),
        ("0000", "ack_psn_offset 0", ACK),
        ("00000064", "cack_psn 100", ACK),
        ("0005", "spdcid 5", ACK),
        ("0006", "dpdcid 6", ACK)),
        {"type": 7, "nh": 0, "flags": 0x02, "ack_psn_offset": 0, "cack_psn": 100,
         "spdcid": 5, "dpdcid": 6}),
    Vector("ack_epsn", 16, (
        ("3840", "type 7 ACK | next_hdr 0 | flags EPSN 0x40 (UET_PDS_ACK_FLAGS_EPSN)", PRLG),
        ("0000", "ack_psn_offset 0", ACK),
        ("00000064", "cack_psn 100", ACK),
        ("0005", "spdcid 5", ACK),
        ("0006", "dpdcid 6", ACK),
        ("00000065", "payload 0x65 (REF uet_pds_ack_epsn)", "REF uet_pds_ack_epsn")),
        {"type": 7, "nh": 0, "flags": 0x40, "ack_psn_offset": 0, "cack_psn": 100,
         "spdcid": 5, "dpdcid": 6, "epsn_payload": 0x65}),
    Vector("nack_trimmed_lasthop", 16, (
        ("5010", "type 10 NACK | next_hdr 0 | flags RETX 0x10", PRLG),
        ("02", "nack_code 0x02 UET_NACK_TRIMMED_LAST_HOP (uet_pds_nack_code_t)", NACK),
        ("00", "vendor_code 0", NACK),
        ("0000004D", "nack_psn 77", NACK),
        ("0004", "spdcid 4", NACK),
        ("0009", "dpdcid 9", NACK),
        ("00000050", "payload 80", NACK)),
        {"type": 10, "nh": 0, "flags": 0x10, "nack_code": 2, "vendor_code": 0,
         "nack_psn": 77, "spdcid": 4, "dpdcid": 9, "nack_payload": 80}),
    Vector("ctrl_negotiation", 16, (
        ("5CA8", "type 11 CTRL | ctrl_type 9 NEGOTIATION | flags ISROD 0x20 + AR 0x08",
         PRLG + "; REF uet_pds_ctrl_type_t, UET_PDS_CTRL_FLAGS_ISROD"),
        ("0000", "rsvd 0", CTRL),
        ("00000100", "psn 0x100", CTRL),
        ("0007", "spdcid 7", CTRL),
        ("0008", "dpdcid 8", CTRL),
        ("00000000", "payload 0 (all other control types: zero)", CTRL)),
        {"type": 11, "nh": 9, "flags": 0x28, "probe_opaque": 0, "psn": 0x100, "spdcid": 7,
         "dpdcid": 8, "ctrl_payload": 0}),
)
