-- Ultra Ethernet Transport (UET) dissector for Wireshark 4.0 and later (Lua 5.2+), as emu
-- sends it.
--
--   tshark -X lua_script:wireshark/uet.lua -r run/pcaps/h1-nic1.pcap -Y emu_uet
--   Wireshark GUI: copy this file into the personal Lua plugins folder
--   (Help > About Wireshark > Folders > Personal Lua Plugins), restart.
--
-- It registers a protocol of its own, "emu_uet" / "Ultra Ethernet Transport (emu)", with
-- fields emu_uet.*: newer Wireshark ships a built-in dissector named "uet" / "Ultra
-- Ethernet Transport", and Wireshark refuses a second protocol of the same name or
-- description. Loaded, this script takes UDP 4793 (Lua scripts run after the built-in
-- handoffs); the built-in one stays reachable with Decode As (tshark -d udp.port==4793,uet).
--
-- Layouts: the UE 1.0.1 specification as the UEC's reference provider (uet-ref-prov,
-- uet_pkt_hdr.h) defines it (docs/UET.md says where Wireshark's built-in dissector
-- differs). UDP port 4793; the PDS prologue (type 5 bits, next header or control type 4,
-- flags 7), then the PDS header of that type (RUD/ROD requests, ACK, ACK_CC with the NSCC
-- state, NACK, CTRL), then, by the next header, an SES header (standard, medium, small,
-- response, response with data), then the payload. A short header is an expert error on
-- the packet, never a Lua error.

local uet = Proto("emu_uet", "Ultra Ethernet Transport (emu)")

local pds_types = { [1]="TSS", [2]="RUD_REQ", [3]="ROD_REQ", [4]="RUDI_REQ", [5]="RUDI_RESP",
  [6]="UUD_REQ", [7]="ACK", [8]="ACK_CC", [9]="ACK_CCX", [10]="NACK", [11]="CTRL",
  [12]="NACK_CCX", [13]="RUD_CC_REQ", [14]="ROD_CC_REQ" }
local next_hdrs = { [0]="NONE", [1]="REQ_SMALL", [2]="REQ_MEDIUM", [3]="REQ_STD", [4]="RSP",
  [5]="RSP_DATA", [6]="RSP_DATA_SMALL" }
local ctl_types = { [0]="NOOP", [1]="REQ_ACK", [2]="CLEAR", [3]="REQ_CLEAR", [4]="CLOSE",
  [5]="REQ_CLOSE", [6]="PROBE", [7]="CREDIT", [8]="CREDIT_REQ", [9]="NEGOTIATION" }
local nack_codes = { [0x01]="TRIMMED", [0x02]="TRIMMED_LASTHOP",
  [0x03]="TRIMMED_ACK (reserved from 1.0.3)",
  [0x04]="NO_PDC_AVAIL", [0x0A]="NO_RESOURCE", [0x0B]="PSN_OOR_WINDOW", [0x0D]="ROD_OOO",
  [0x0E]="INV_DPDCID", [0x16]="PDC_MODE_MISMATCH", [0x1A]="RCVR_INFER_LOSS" }
local ses_opcodes = { [0]="NO_OP", [1]="WRITE", [2]="READ", [3]="ATOMIC",
  [4]="FETCHING_ATOMIC", [5]="SEND", [6]="RENDEZVOUS_SEND", [7]="DATAGRAM_SEND",
  [8]="DEFERRABLE_SEND", [9]="TAGGED_SEND" }
local rsp_opcodes = { [0]="DEFAULT_RESPONSE", [1]="RESPONSE", [2]="RESPONSE_W_DATA",
  [3]="NO_RESPONSE" }
local ret_codes = { [0]="NULL", [1]="OK", [5]="NO_MATCH", [0x1C]="BAD_MKEY", [0x1D]="BAD_ADDR",
  [0x22]="TOO_LONG" }

local f = uet.fields
f.pds = ProtoField.bytes("emu_uet.pds", "PDS")
f.pds_type = ProtoField.uint16("emu_uet.pds.type", "Type", base.DEC, pds_types, 0xF800)
f.pds_nh = ProtoField.uint16("emu_uet.pds.nh", "Next header", base.DEC, next_hdrs, 0x0780)
f.pds_ctl_type = ProtoField.uint16("emu_uet.pds.ctl_type", "Control type", base.DEC, ctl_types,
  0x0780)
f.pds_flags = ProtoField.uint16("emu_uet.pds.flags", "Flags", base.HEX, nil, 0x007F)
f.pds_flag_epsn = ProtoField.bool("emu_uet.pds.flags.epsn", "0-RTT closing ACK (EPSN)", 16, nil,
  0x0040)
f.pds_flag_m = ProtoField.bool("emu_uet.pds.flags.m", "ECN marked (M)", 16, nil, 0x0020)
f.pds_flag_isrod = ProtoField.bool("emu_uet.pds.flags.isrod", "ROD PDC (ISROD)", 16, nil, 0x0020)
f.pds_flag_p = ProtoField.bool("emu_uet.pds.flags.p", "Answers a probe (P)", 16, nil, 0x0008)
f.pds_flag_nt = ProtoField.bool("emu_uet.pds.flags.nt", "RUDI NACK (NT)", 16, nil, 0x0008)
f.pds_flag_req = ProtoField.uint16("emu_uet.pds.flags.req", "Target requests (REQ)", base.DEC,
  { [0]="none", [1]="clear", [2]="close" }, 0x0006)
f.pds_flag_retx = ProtoField.bool("emu_uet.pds.flags.retx", "Retransmission (RETX)", 16, nil,
  0x0010)
f.pds_flag_ar = ProtoField.bool("emu_uet.pds.flags.ar", "ACK request (AR)", 16, nil, 0x0008)
f.pds_flag_syn = ProtoField.bool("emu_uet.pds.flags.syn", "New PDC (SYN)", 16, nil, 0x0004)
f.pds_clear_psn_offset = ProtoField.int16("emu_uet.pds.clear_psn_offset", "Clear PSN offset")
f.pds_psn = ProtoField.uint32("emu_uet.pds.psn", "PSN")
f.pds_spdcid = ProtoField.uint16("emu_uet.pds.spdcid", "Source PDC ID")
f.pds_dpdcid = ProtoField.uint16("emu_uet.pds.dpdcid", "Destination PDC ID")
f.pds_use_rsv = ProtoField.bool("emu_uet.pds.use_rsv", "Use reserved PDC", 16, nil, 0x8000)
f.pds_psn_offset = ProtoField.uint16("emu_uet.pds.psn_offset", "PSN offset", base.DEC, nil, 0x0FFF)
f.pds_start_psn = ProtoField.uint32("emu_uet.pds.start_psn", "Start PSN")
f.pds_ccc_id = ProtoField.uint8("emu_uet.pds.ccc_id", "CCC ID")
f.pds_credit_target = ProtoField.uint24("emu_uet.pds.credit_target", "Credit target")
f.pds_ack_psn_offset = ProtoField.int16("emu_uet.pds.ack_psn_offset", "ACK PSN offset")
f.pds_cack_psn = ProtoField.uint32("emu_uet.pds.cack_psn", "Cumulative ACK PSN")
f.pds_ack_psn = ProtoField.uint32("emu_uet.pds.ack_psn", "ACK PSN")
f.pds_cc_type = ProtoField.uint8("emu_uet.pds.cc_type", "CC type", base.DEC,
  { [0]="NSCC", [1]="CREDIT" }, 0xF0)
f.pds_mpr = ProtoField.uint8("emu_uet.pds.mpr", "Maximum PSN range (x128 PSNs, 0: none)")
f.pds_epsn_payload = ProtoField.uint32("emu_uet.pds.epsn_payload", "Expected PSN payload",
  base.HEX)
f.pds_sack_offset = ProtoField.uint16("emu_uet.pds.sack_offset", "SACK offset")
f.pds_sack_bitmap = ProtoField.uint64("emu_uet.pds.sack_bitmap", "SACK bitmap", base.HEX)
f.pds_service_time = ProtoField.uint16("emu_uet.pds.nscc.service_time", "Service time")
f.pds_restore_cwnd = ProtoField.bool("emu_uet.pds.nscc.restore_cwnd", "Restore cwnd", 8, nil, 0x80)
f.pds_rcv_cwnd_pend = ProtoField.uint8("emu_uet.pds.nscc.rcv_cwnd_pend", "Cwnd penalty",
  base.DEC, nil, 0x7F)
f.pds_rcvd_bytes = ProtoField.uint24("emu_uet.pds.nscc.rcvd_bytes", "Received bytes")
f.pds_ooo_count = ProtoField.uint16("emu_uet.pds.nscc.ooo_count", "Out-of-order count")
f.pds_nack_code = ProtoField.uint8("emu_uet.pds.nack_code", "NACK code", base.HEX, nack_codes)
f.pds_nack_vendor = ProtoField.uint8("emu_uet.pds.nack_vendor_code", "Vendor code", base.HEX)
f.pds_nack_payload = ProtoField.uint32("emu_uet.pds.nack_payload", "Highest PSN received + 1")
f.pds_probe_opaque = ProtoField.uint16("emu_uet.pds.probe_opaque", "Probe opaque", base.HEX)
f.pds_ctrl_payload = ProtoField.uint32("emu_uet.pds.ctrl_payload", "Payload", base.HEX)
f.ses = ProtoField.bytes("emu_uet.ses", "SES")
f.ses_opcode = ProtoField.uint8("emu_uet.ses.opcode", "Opcode", base.DEC, ses_opcodes, 0x3F)
f.ses_ver = ProtoField.uint8("emu_uet.ses.ver", "Version", base.DEC, nil, 0xC0)
f.ses_flags = ProtoField.uint8("emu_uet.ses.flags", "Flags", base.HEX, nil, 0x3F)
f.ses_dc = ProtoField.bool("emu_uet.ses.dc", "Delivery complete (DC)", 8, nil, 0x20)
f.ses_ie = ProtoField.bool("emu_uet.ses.ie", "Initiator error (IE)", 8, nil, 0x10)
f.ses_rel = ProtoField.bool("emu_uet.ses.rel", "Relative addressing", 8, nil, 0x08)
f.ses_hd = ProtoField.bool("emu_uet.ses.hd", "Header data (HD)", 8, nil, 0x04)
f.ses_eom = ProtoField.bool("emu_uet.ses.eom", "End of message (EOM)", 8, nil, 0x02)
f.ses_som = ProtoField.bool("emu_uet.ses.som", "Start of message (SOM)", 8, nil, 0x01)
f.ses_message_id = ProtoField.uint16("emu_uet.ses.message_id", "Message ID")
f.ses_index_generation = ProtoField.uint8("emu_uet.ses.index_generation", "Index generation")
f.ses_job_id = ProtoField.uint24("emu_uet.ses.job_id", "Job ID")
f.ses_pid_on_fep = ProtoField.uint16("emu_uet.ses.pid_on_fep", "PID on FEP", base.DEC, nil, 0x0FFF)
f.ses_resource_index = ProtoField.uint16("emu_uet.ses.resource_index", "Resource index", base.DEC,
  nil, 0x0FFF)
f.ses_buffer_offset = ProtoField.uint64("emu_uet.ses.buffer_offset", "Buffer offset", base.HEX)
f.ses_initiator = ProtoField.uint32("emu_uet.ses.initiator", "Initiator", base.HEX)
f.ses_mem_key = ProtoField.uint64("emu_uet.ses.mem_key", "Memory key / match bits", base.HEX)
f.ses_header_data = ProtoField.uint64("emu_uet.ses.header_data", "Header data", base.HEX)
f.ses_payload_length = ProtoField.uint16("emu_uet.ses.payload_length", "Payload length", base.DEC,
  nil, 0x3FFF)
f.ses_message_offset = ProtoField.uint32("emu_uet.ses.message_offset", "Message offset")
f.ses_request_length = ProtoField.uint32("emu_uet.ses.request_length", "Request length")
f.ses_small_length = ProtoField.uint16("emu_uet.ses.request_length_small", "Request length",
  base.DEC, nil, 0x3FFF)
f.ses_rsp_list = ProtoField.uint8("emu_uet.ses.rsp_list", "List", base.DEC, nil, 0xC0)
f.ses_rsp_opcode = ProtoField.uint8("emu_uet.ses.rsp_opcode", "Response opcode", base.DEC,
  rsp_opcodes, 0x3F)
f.ses_return_code = ProtoField.uint8("emu_uet.ses.return_code", "Return code", base.HEX, ret_codes,
  0x3F)
f.ses_mod_length = ProtoField.uint32("emu_uet.ses.mod_length", "Modified length")
f.ses_read_message_id = ProtoField.uint16("emu_uet.ses.read_message_id", "Read request message ID")
f.payload = ProtoField.bytes("emu_uet.payload", "Payload")

local ef_short = ProtoExpert.new("emu_uet.short", "UET header cut short", expert.group.MALFORMED,
  expert.severity.ERROR)
local ef_type = ProtoExpert.new("emu_uet.unknown_type", "PDS type this dissector does not decode",
  expert.group.UNDECODED, expert.severity.WARN)
uet.experts = { ef_short, ef_type }

local PDS_LEN = { [2]=12, [3]=12, [13]=16, [14]=16, [7]=12, [8]=32, [10]=16, [11]=16 }
local REQ_FLAGS = { f.pds_flag_retx, f.pds_flag_ar, f.pds_flag_syn }
local FLAGS_BY_TYPE = {
  [7] = { f.pds_flag_epsn, f.pds_flag_m, f.pds_flag_retx, f.pds_flag_p, f.pds_flag_req },
  [8] = { f.pds_flag_m, f.pds_flag_retx, f.pds_flag_p, f.pds_flag_req },
  [10] = { f.pds_flag_m, f.pds_flag_retx, f.pds_flag_nt },
  [11] = { f.pds_flag_isrod, f.pds_flag_retx, f.pds_flag_ar, f.pds_flag_syn } }
local REQ_NAMES = { {"SYN", 0x04}, {"AR", 0x08}, {"RETX", 0x10} }
local NAMES_BY_TYPE = {
  [7] = { {"REQ_CLEAR", 0x02}, {"REQ_CLOSE", 0x04}, {"P", 0x08}, {"RETX", 0x10}, {"M", 0x20},
          {"EPSN", 0x40} },
  [8] = { {"REQ_CLEAR", 0x02}, {"REQ_CLOSE", 0x04}, {"P", 0x08}, {"RETX", 0x10}, {"M", 0x20} },
  [10] = { {"NT", 0x08}, {"RETX", 0x10}, {"M", 0x20} },
  [11] = { {"SYN", 0x04}, {"AR", 0x08}, {"RETX", 0x10}, {"ISROD", 0x20} } }
local SES_LEN = { [0]=0, [1]=20, [2]=32, [3]=44, [4]=12, [5]=20 }

local function flag_names(v, names)
  local out = {}
  for _, nb in ipairs(names) do
    if bit32.band(v, nb[2]) ~= 0 then out[#out + 1] = nb[1] end
  end
  return table.concat(out, ",")
end

local function ses_flags(t, b)
  t:add(f.ses_ver, b)
  local ft = t:add(f.ses_flags, b)
  for _, fld in ipairs({ f.ses_dc, f.ses_ie, f.ses_rel, f.ses_hd, f.ses_eom, f.ses_som }) do
    ft:add(fld, b)
  end
end

local function ids(t, buf, at)
  t:add(f.ses_index_generation, buf(at, 1))
  t:add(f.ses_job_id, buf(at + 1, 3))
  t:add(f.ses_pid_on_fep, buf(at + 4, 2))
  t:add(f.ses_resource_index, buf(at + 6, 2))
end

local function dissect_ses(buf, tree, at, nh, info)
  local len = SES_LEN[nh]
  if len == nil or len == 0 then return at end
  local t = tree:add(f.ses, buf(at, len))
  t:set_text("SES " .. next_hdrs[nh])
  if nh == 1 or nh == 2 or nh == 3 then
    t:add(f.ses_opcode, buf(at, 1))
    ses_flags(t, buf(at + 1, 1))
    local op = ses_opcodes[bit32.band(buf(at, 1):uint(), 0x3F)] or "?"
    local fl = buf(at + 1, 1):uint()
    local parts = { op, flag_names(fl, { {"som", 1}, {"eom", 2}, {"hd", 4} }) }
    if nh == 3 then
      t:add(f.ses_message_id, buf(at + 2, 2))
      ids(t, buf, at + 4)
      t:add(f.ses_buffer_offset, buf(at + 12, 8))
      t:add(f.ses_initiator, buf(at + 20, 4))
      t:add(f.ses_mem_key, buf(at + 24, 8))
      if bit32.band(fl, 1) ~= 0 then
        t:add(f.ses_header_data, buf(at + 32, 8))
      else
        t:add(f.ses_payload_length, buf(at + 34, 2))
        t:add(f.ses_message_offset, buf(at + 36, 4))
        parts[#parts + 1] = "off=" .. buf(at + 36, 4):uint()
      end
      t:add(f.ses_request_length, buf(at + 40, 4))
      parts[#parts + 1] = "msg=" .. buf(at + 2, 2):uint()
      parts[#parts + 1] = "len=" .. buf(at + 40, 4):uint()
    else
      t:add(f.ses_small_length, buf(at + 2, 2))
      parts[#parts + 1] = "len=" .. bit32.band(buf(at + 2, 2):uint(), 0x3FFF)
      ids(t, buf, at + 4)
      if nh == 1 then
        t:add(f.ses_buffer_offset, buf(at + 12, 8))
      else
        if bit32.band(fl, 4) ~= 0 then t:add(f.ses_header_data, buf(at + 12, 8))
        else t:add(f.ses_buffer_offset, buf(at + 12, 8)) end
        t:add(f.ses_initiator, buf(at + 20, 4))
        t:add(f.ses_mem_key, buf(at + 24, 8))
      end
    end
    info[#info + 1] = "SES " .. table.concat(parts, " ")
  else
    t:add(f.ses_rsp_list, buf(at, 1))
    t:add(f.ses_rsp_opcode, buf(at, 1))
    t:add(f.ses_ver, buf(at + 1, 1))
    t:add(f.ses_return_code, buf(at + 1, 1))
    t:add(f.ses_message_id, buf(at + 2, 2))
    if nh == 4 then
      t:add(f.ses_index_generation, buf(at + 4, 1))
      t:add(f.ses_job_id, buf(at + 5, 3))
      t:add(f.ses_mod_length, buf(at + 8, 4))
    else
      t:add(f.ses_job_id, buf(at + 5, 3))
      t:add(f.ses_read_message_id, buf(at + 8, 2))
      t:add(f.ses_payload_length, buf(at + 10, 2))
      t:add(f.ses_mod_length, buf(at + 12, 4))
      t:add(f.ses_message_offset, buf(at + 16, 4))
    end
    local rc = ret_codes[bit32.band(buf(at + 1, 1):uint(), 0x3F)] or "?"
    info[#info + 1] = "SES " .. (rsp_opcodes[bit32.band(buf(at, 1):uint(), 0x3F)] or "?") ..
      " " .. rc .. " msg=" .. buf(at + 2, 2):uint()
  end
  return at + len
end

function uet.dissector(buf, pinfo, tree)
  local n = buf:len()
  if n < 2 then return 0 end
  pinfo.cols.protocol = "UET"
  local root = tree:add(uet, buf())
  local w = buf(0, 2):uint()
  local typ = bit32.rshift(w, 11)
  local nh = bit32.band(bit32.rshift(w, 7), 0xF)
  local flags = bit32.band(w, 0x7F)
  local plen = PDS_LEN[typ]
  if typ == 7 and bit32.band(flags, 0x40) ~= 0 then plen = 16 end  -- ACK + EPSN payload
  local pds = root:add(f.pds, buf(0, math.min(plen or 2, n)))
  pds:set_text("PDS " .. (pds_types[typ] or ("type " .. typ)))
  pds:add(f.pds_type, buf(0, 2))
  if typ == 11 then pds:add(f.pds_ctl_type, buf(0, 2)) else pds:add(f.pds_nh, buf(0, 2)) end
  local ft = pds:add(f.pds_flags, buf(0, 2))
  for _, fld in ipairs(FLAGS_BY_TYPE[typ] or REQ_FLAGS) do ft:add(fld, buf(0, 2)) end
  if plen == nil then
    pds:add_proto_expert_info(ef_type)
    pinfo.cols.info = "UET " .. (pds_types[typ] or ("type " .. typ))
    return n
  end
  local need = plen + ((typ ~= 11) and (SES_LEN[nh] or 0) or 0)
  if n < need then
    root:add_proto_expert_info(ef_short, "UET headers need " .. need .. " bytes, " .. n ..
      " captured")
    pinfo.cols.info = "UET " .. pds_types[typ] .. " [cut]"
    return n
  end
  local info = {}
  local head = pds_types[typ]
  if typ == 2 or typ == 3 or typ == 13 or typ == 14 then
    pds:add(f.pds_clear_psn_offset, buf(2, 2))
    pds:add(f.pds_psn, buf(4, 4))
    pds:add(f.pds_spdcid, buf(8, 2))
    if bit32.band(flags, 0x04) ~= 0 then
      pds:add(f.pds_use_rsv, buf(10, 2))
      pds:add(f.pds_psn_offset, buf(10, 2))
      local start = buf(4, 4):uint() - bit32.band(buf(10, 2):uint(), 0x0FFF)
      pds:add(f.pds_start_psn, buf(4, 4), start):set_generated()
    else
      pds:add(f.pds_dpdcid, buf(10, 2))
    end
    if typ >= 13 then
      pds:add(f.pds_ccc_id, buf(12, 1))
      pds:add(f.pds_credit_target, buf(13, 3))
    end
    head = head .. " psn=" .. buf(4, 4):uint()
  elseif typ == 7 or typ == 8 then
    local off = buf(2, 2):int()
    pds:add(f.pds_ack_psn_offset, buf(2, 2))
    pds:add(f.pds_cack_psn, buf(4, 4))
    pds:add(f.pds_ack_psn, buf(2, 6), buf(4, 4):uint() + off):set_generated()
    pds:add(f.pds_spdcid, buf(8, 2))
    pds:add(f.pds_dpdcid, buf(10, 2))
    if plen == 16 then pds:add(f.pds_epsn_payload, buf(12, 4)) end
    if typ == 8 then
      pds:add(f.pds_cc_type, buf(12, 1))
      pds:add(f.pds_mpr, buf(13, 1))
      pds:add(f.pds_sack_offset, buf(14, 2))
      pds:add(f.pds_sack_bitmap, buf(16, 8))
      pds:add(f.pds_service_time, buf(24, 2))
      pds:add(f.pds_restore_cwnd, buf(26, 1))
      pds:add(f.pds_rcv_cwnd_pend, buf(26, 1))
      pds:add(f.pds_rcvd_bytes, buf(27, 3))
      pds:add(f.pds_ooo_count, buf(30, 2))
    end
    head = head .. " cack=" .. buf(4, 4):uint()
  elseif typ == 10 then
    local code = buf(2, 1):uint()
    pds:add(f.pds_nack_code, buf(2, 1))
    pds:add(f.pds_nack_vendor, buf(3, 1))
    pds:add(f.pds_psn, buf(4, 4))
    pds:add(f.pds_spdcid, buf(8, 2))
    pds:add(f.pds_dpdcid, buf(10, 2))
    pds:add(f.pds_nack_payload, buf(12, 4))
    head = head .. " " .. (nack_codes[code] or string.format("0x%02x", code)) .. " psn=" ..
      buf(4, 4):uint()
  elseif typ == 11 then
    pds:add(f.pds_probe_opaque, buf(2, 2))
    pds:add(f.pds_psn, buf(4, 4))
    pds:add(f.pds_spdcid, buf(8, 2))
    pds:add(f.pds_dpdcid, buf(10, 2))
    pds:add(f.pds_ctrl_payload, buf(12, 4))
    head = head .. " " .. (ctl_types[nh] or "?")
  end
  local fl = flag_names(flags, NAMES_BY_TYPE[typ] or REQ_NAMES)
  if fl ~= "" then head = head .. " " .. fl end
  info[1] = head
  local at = plen
  if typ ~= 11 then at = dissect_ses(buf, root, at, nh, info) end
  if at < n then
    root:add(f.payload, buf(at, n - at))
    info[#info + 1] = (n - at) .. " B"
  end
  pinfo.cols.info = table.concat(info, " | ")
  return n
end

DissectorTable.get("udp.port"):add(4793, uet)
