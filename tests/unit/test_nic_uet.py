"""The NIC with `transport="uet"` (issue 16): the verbs client's WRITEs go out as UET
RUD/ROD requests on UDP 4793 and come back as ACKs, through the same data path as RoCE;
socket-less NICs joined by a fake wire that may reorder, trim or lose frames."""

import json
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emucore.timedil import TimeDilation
from emucore.wire.uet import F_SYN, UET_UDP_PORT, PDSAck, PDSRequest, PdsType
from emucore.wire.uet_codec import parse as uet_parse
from emucore.wire.uet_codec import trim_frame
from traffic.nic.nicconfig import NicConfig
from traffic.uet.uetconfig import UetConfig
from traffic.uet.nscc import Nscc, NsccConfig
from traffic.workreq import WCStatus
from tests.unit.test_nic import BASE, connected

TRIM = (11, 12)  #: trimmed / trimmed-at-last-hop DSCPs of these tests


def _write(c, size, imm=None):
    w = {"wr_id": 1, "local_addr": c.ma["addr"], "length": size, "lkey": c.ma["lkey"],
         "remote_addr": c.mb["addr"], "rkey": c.mb["rkey"]}
    if imm is not None:
        w["imm"] = imm
        c.b.post_recv(c.qb.qpn, [9])
    c.a.post_send(c.qa.qpn, [w])


def pump(c, now, mangle=lambda fs, rng: fs, rounds=400, seed=3):
    """Run both NICs until a's send CQ has a completion: a transmits what its port and
    window allow, the wire (`mangle`) delivers a's frames to b, b's replies to a. Returns
    (the completion, now, every frame a sent)."""
    rng, sent = random.Random(seed), []
    for _ in range(rounds):
        c.a.step(now)
        out, c.a.raw.frames = c.a.raw.frames, []
        sent += out
        for f in mangle(out, rng):
            c.b.on_frame(memoryview(bytearray(f)), now)
        back, c.b.raw.frames = c.b.raw.frames, []
        for f in back:
            c.a.on_frame(memoryview(bytearray(f)), now)
        wcs = c.a.cqs[c.ca].poll(1)
        if wcs:
            return wcs[0], now, sent
        now = max(now + 1e-6, min(c.a.port_next, now + 0.01))
        d = c.qa.ep.deadline
        if not out and not back and d is not None:
            now = max(now, d)  # nothing moving: let the retransmission timer run
    raise AssertionError("no completion")


def test_uet_write_with_immediate_is_placed_and_completes_on_both_sides():
    size = 5 * 4096 + 321
    data = random.Random(1).randbytes(size)
    with connected(size, data, transport="uet", trimmed_dscps=TRIM) as c:
        _write(c, size, imm=0x55)
        wc, _, sent = pump(c, 100.0)
        assert (wc.wr_id, wc.status) == (1, WCStatus.SUCCESS)
        assert bytes(c.sb.buf[:size]) == data
        [rwc] = c.b.cqs[c.cb].poll(1)
        assert (rwc.wr_id, rwc.status, rwc.imm, rwc.byte_len) == (9, WCStatus.SUCCESS, 0x55, size)
        assert len(sent) == 6
        first = Ether(sent[0])
        assert first[UDP].dport == UET_UDP_PORT and first[IP].tos >> 2 == c.qa.dscp
        pds = first[PDSRequest]
        assert pds.type == PdsType.RUD_REQ and pds.flags & F_SYN
        f = uet_parse(sent[0])
        assert (f.ses.pid_on_fep << 12 | f.ses.resource_index) == c.qb.qpn  # addresses b's QP
        assert len({Ether(s)[UDP].sport for s in sent}) > 1  # oblivious spraying: EVs vary
        snap = c.a.counters()["qps"][str(c.qa.qpn)]
        assert snap["transport"] == "uet" and snap["uet"]["completions"] == 1
        assert snap["tx_packets"] == 6 and snap["nscc"]["acks"] >= 1
        assert snap["pdc"]["local"] in c.a.pdcs and snap["pdc"]["peer"] in c.b.pdcs
        assert snap["rate_model_bps"] == pytest.approx(200e9)  # an idle path: full rate
        assert c.b.counters()["qps"][str(c.qb.qpn)]["pdc"]["target"] is not None


def test_uet_survives_reordering_trimming_and_loss_byte_exact(tmp_path):
    size = 40 * 4096
    data = random.Random(2).randbytes(size)

    def wire(frames, rng):
        rng.shuffle(frames)
        out = []
        for f in frames:
            x = rng.random()
            if x < 0.15:
                out.append(trim_frame(f, 64, TRIM[0]))  # a switch trimmed it
            elif x < 0.2:
                continue  # lost
            else:
                out.append(f)
        return out

    with connected(size, data, transport="uet", trimmed_dscps=TRIM, events=tmp_path) as c:
        _write(c, size)
        wc, _, sent = pump(c, 100.0, wire, rounds=5000)
        assert wc.status == WCStatus.SUCCESS and bytes(c.sb.buf[:size]) == data
        u = c.a.counters()["qps"][str(c.qa.qpn)]
        assert u["uet"]["retransmitted"] > 0 and u["nscc"]["nacks"] > 0
        assert len(sent) == 40 + u["uet"]["retransmitted"]
        t = c.b.counters()["qps"][str(c.qb.qpn)]
        assert t["rx_trimmed"] > 0 and t["rx_nacks"] == t["rx_trimmed"]
        assert t["rx_bytes_placed"] >= size
        evs = [json.loads(x) for x in (tmp_path / "h4g2.jsonl").read_text().splitlines()]
        nacks = [e for e in evs if e["ev"] == "nack_tx"]
        assert len(nacks) == t["rx_nacks"] and {e["code"] for e in nacks} == {"TRIMMED"}


def test_rod_mode_delivers_in_order_despite_a_reordering_wire():
    size = 12 * 4096
    data = random.Random(4).randbytes(size)
    with connected(size, data, transport="uet", uet={"mode": "rod"}) as c:
        _write(c, size)
        wc, _, sent = pump(c, 100.0, lambda fs, rng: fs[::-1], rounds=3000)
        assert wc.status == WCStatus.SUCCESS and bytes(c.sb.buf[:size]) == data
        assert uet_parse(sent[0]).pds_type == PdsType.ROD_REQ


def test_frames_for_unknown_pdcs_and_cut_frames_are_counted_not_fatal():
    size = 4096
    with connected(size, bytes(size), transport="uet") as c:
        _write(c, size)
        c.a.step(100.0)
        [f] = c.a.raw.frames
        c.b.on_frame(memoryview(bytearray(f[:60])), 100.0)  # cut inside the UET headers
        assert c.b.c["rx_malformed"] == 1 and not c.b.raw.frames
        c.b.on_frame(memoryview(bytearray(f)), 100.0)
        assert c.b.c["rx_unknown_pdc"] == 0 and bytes(c.sb.buf[:size]) == bytes(size)
        [ack] = c.b.raw.frames
        assert uet_parse(ack).pds_type in (PdsType.ACK, PdsType.ACK_CC)
        bad = Ether(ack)
        bad[PDSAck].dpdcid ^= 0x5A5A  # a PDC a does not have
        c.a.on_frame(memoryview(bytearray(bytes(bad))), 100.0)
        assert c.a.c["rx_unknown_pdc"] == 1 and c.a.cqs[c.ca].poll(1) == []
        c.a.on_frame(memoryview(bytearray(ack)), 100.0)
        assert c.a.cqs[c.ca].poll(1)[0].status == WCStatus.SUCCESS


def test_config_names_the_bad_uet_field():
    with pytest.raises(ValueError, match="transport"):
        NicConfig(**BASE, transport="tcp")
    with pytest.raises(ValueError, match="uet: unknown knob"):
        NicConfig(**BASE, transport="uet", uet={"speed": 1})
    with pytest.raises(ValueError, match="mode"):
        NicConfig(**BASE, transport="uet", uet={"mode": "xyz"})
    with pytest.raises(ValueError, match="trimmed_dscps"):
        NicConfig(**BASE, transport="uet", trimmed_dscps=(64, 1))
    cfg = NicConfig(**{**BASE, "tdf": 100}, transport="uet", uet={"ev": "reps", "trimming": True})
    u = cfg.uet_config()
    assert u.ev == "reps" and u.nscc.trimming and u.rto_s == cfg.timeout_s
    assert NicConfig.from_json(cfg.to_json()) == cfg


def test_dilated_nscc_evolves_exactly_as_in_model_time():
    """The NIC runs NSCC on the lab clock with times x TDF and the rate / TDF."""
    tdf = 5000.0
    cfg = UetConfig(nscc=NsccConfig(trimming=True))
    lab = cfg.dilated(tdf)
    assert lab.rto_s == cfg.rto_s * tdf and lab.nscc.base_rtt_s == cfg.nscc.base_rtt_s * tdf
    td = TimeDilation(tdf)
    m, l_ = Nscc(200e9, 4096, cfg.nscc), Nscc(td.lab_rate(200e9), 4096, lab.nscc)
    rng = random.Random(5)
    t = 0.0
    for _ in range(2000):
        t += rng.uniform(0.1e-6, 2e-6)
        rtt = rng.uniform(8e-6, 40e-6)
        ecn = rng.random() < 0.3
        acked = rng.choice([4096, 8192, 16384])
        if rng.random() < 0.02:
            m.on_nack(t, 4096)
            l_.on_nack(t * tdf, 4096)
        assert m.on_ack(t, acked, rtt, ecn) == l_.on_ack(t * tdf, acked, rtt * tdf, ecn)
        assert l_.cwnd == pytest.approx(m.cwnd, rel=1e-9)
