"""The NIC process's pure parts: configuration, frame <-> descriptor mapping, pacing,
and one NIC pair wired back to back in memory (no sockets, no root)."""

import contextlib
import json
import random
import types
from multiprocessing import resource_tracker, shared_memory

import pytest

import topologies
from emucore.wire.pause import pause_frame
from emucore.timedil import TimeDilation
from emucore.wire.ib import Op, RocePkt
from emucore.wire.templates import FrameTemplate, parse
from traffic.nic.client import access_from_json, wc_from_json, wc_to_json
from traffic.nic.nicconfig import NicConfig
from traffic.nic.datapath import Nic, frame_of, pace, pkt_of
from traffic.verbs import Access
from traffic.workreq import WC, WCOpcode, WCStatus

BASE = dict(gpu="h1g1", ifname="nic1", ip="10.0.1.11", mac="02:00:00:00:01:01",
            gateway_mac="02:00:00:00:05:00", control="/tmp/x.sock")


def test_config_round_trip_and_for_gpu():
    fab = topologies.load("rail2x4")
    c = NicConfig.for_gpu(fab, "h1g1", "/run/emu/t/nic-h1g1.sock", dcqcn="nvidia")
    assert (c.ip, c.ifname, c.model_bps, c.tdf, c.mtu) == ("10.0.1.11", "nic1", 200e9, 5000.0, 4096)
    assert NicConfig.from_json(c.to_json()) == c
    # same rail: the peer's own MAC; another rail: the gateway (rail switch) MAC
    assert c.next_hop_mac("10.0.1.14") == fab.gpus["h4g1"].mac
    assert c.next_hop_mac("10.0.2.14") == fab.gpus["h1g1"].gateway_mac


@pytest.mark.parametrize("field,value", [
    ("mtu", 9000), ("dcqcn", "fast"), ("ip", "10.0.1"), ("timeout_s", 0), ("tdf", -1),
    ("retry_cnt", 8), ("cm_port", 0), ("window", 0), ("gpu", ""), ("prefix_len", 33),
    ("cnp_dscp", 64), ("events_path", "")])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        NicConfig(**{**BASE, field: value})


def test_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="bogus"):
        NicConfig.from_json(json.dumps({**BASE, "bogus": 1}))


T = FrameTemplate("02:00:00:00:01:01", "02:00:00:00:05:00", "10.0.1.11", "10.0.2.14",
                  0xC123, 0x123456, pkey=0x8012)


@pytest.mark.parametrize("pkt,kw", [
    (RocePkt(Op.WRITE_FIRST, 0x123456, 0xabc, va=0x1000, rkey=0x55, dlen=8192,
             payload=b"\x01" * 4096), dict(reth=(0x1000, 0x55, 8192), payload=b"\x01" * 4096)),
    (RocePkt(Op.WRITE_MIDDLE, 0x123456, 0xabd, payload=b"\x02" * 4096), dict(payload=b"\x02" * 4096)),
    (RocePkt(Op.WRITE_LAST_IMM, 0x123456, 0xabe, ackreq=True, imm=7, payload=b"abc"),
     dict(ackreq=True, imm=7, payload=b"abc")),
    (RocePkt(Op.WRITE_ONLY_IMM, 0x123456, 5, va=0x2000, rkey=9, dlen=5, imm=1, payload=b"hello"),
     dict(reth=(0x2000, 9, 5), imm=1, payload=b"hello")),
    (RocePkt(Op.ACK, 0x123456, 0xabe, syndrome=0x1F, msn=3), dict(aeth=(0x1F, 3))),
    (RocePkt(Op.ACK, 0x123456, 0xabe, syndrome=0x62, msn=0), dict(aeth=(0x62, 0))),
])
def test_descriptor_to_frame_is_scapys_and_parses_back(pkt, kw):
    frame = frame_of(T, pkt)
    assert frame == bytes(T.scapy(pkt.opcode, pkt.psn, **kw))
    back = pkt_of(parse(frame, verify_icrc=True))
    for f in ("opcode", "dqpn", "psn", "ackreq", "va", "rkey", "dlen", "imm", "syndrome", "msn"):
        assert getattr(back, f) == getattr(pkt, f), f
    assert bytes(back.payload) == bytes(pkt.payload)
    assert (back.src, back.dst, back.pkey) == ("10.0.1.11", "10.0.2.14", 0x8012)


def test_cnp_is_dscp_48_with_becn():
    f = parse(T.build_cnp())
    assert (f.opcode, f.dscp, f.becn, f.dqpn) == (Op.CNP, 48, True, 0x123456)


@pytest.mark.parametrize("next_t,now,nbytes,rate,slack,expect", [
    (0.0, 0.0, 1000, 8000.0, 0.5, 1.0),     # 1000 B at 8 kbit/s = 1 s
    (1.0, 0.8, 1000, 8000.0, 0.5, 2.0),     # early by 0.2 s (within slack): keeps the grid
    (1.0, 1.3, 1000, 8000.0, 0.5, 2.0),     # late by 0.3 s: catches up (small burst)
    (1.0, 3.0, 1000, 8000.0, 0.5, 4.0),     # 2 s behind: restarts from now, no burst
    (0.0, 0.0, 4170, 100e6, 0.001, 4170 * 8 / 100e6),
])
def test_pace(next_t, now, nbytes, rate, slack, expect):
    assert pace(next_t, now, nbytes, rate, slack) == pytest.approx(expect)


def test_pace_long_run_rate_is_exact():
    t, now, rate = 0.0, 0.0, 40e6
    rng = random.Random(1)
    for _ in range(1000):
        now = max(now, t) + rng.uniform(0, 2e-4)  # the loop wakes late, never early
        t = pace(t, now, 4170, rate, 0.001)
    assert 1000 * 4170 * 8 / t == pytest.approx(rate, rel=0.02)


def test_access_and_wc_json():
    assert access_from_json(["local_write", "REMOTE_WRITE"]) == Access.LOCAL_WRITE | Access.REMOTE_WRITE
    assert access_from_json(2) == Access.REMOTE_WRITE
    with pytest.raises(ValueError, match="access"):
        access_from_json(["REMOTE_ATOMIC"])
    wc = WC(7, WCStatus.REM_ACCESS_ERR, WCOpcode.RDMA_WRITE, 0, 0x1234, None)
    assert wc_from_json(json.loads(json.dumps(wc_to_json(wc)))) == wc


class Wire:
    """Collects what a socket-less Nic sends."""

    def __init__(self):
        self.frames = []

    def send(self, f):
        self.frames.append(bytes(f))

    def recv_into(self, buf):
        raise BlockingIOError


def _pair(dcqcn="paper", events=None, **kw):
    """NICs h1g1 and h4g2 (TDF 1000) without sockets; with `events` (a directory), each
    writes its event log to events/<gpu>.jsonl; `kw` more NicConfig fields."""
    fab = topologies.load("rail2x4", tdf=1000)
    nics = {}
    for g in ("h1g1", "h4g2"):
        if events is not None:
            kw["events_path"] = str(events / f"{g}.jsonl")
        n = Nic(NicConfig.for_gpu(fab, g, "/nonexistent", seed=1, dcqcn=dcqcn, **kw),
                open_sockets=False)
        n.raw = Wire()
        nics[g] = n
    return fab, nics["h1g1"], nics["h4g2"]


def _qp(nic, size, fill, **qp):
    pd = nic.alloc_pd()
    shm = shared_memory.SharedMemory(create=True, size=size)
    shm.buf[:size] = fill
    mr = nic.reg_mr(pd, shm.name, size, 3)
    resource_tracker.register(shm._name, "shared_memory")  # the NIC untracked it (one process here)
    cq = nic.create_cq()
    return shm, mr, cq, nic.qps[nic.create_qp(pd, cq, cq, **qp)]


@contextlib.contextmanager
def own_qps(nic, *qp_kws, size=100, clear_shms=True):
    """One QP of `nic` per dict of create_qp knobs, each with a `size`-byte MR and a CQ
    (`_qp`'s tuples); their memory is freed afterwards and, with `clear_shms`, all of the
    NIC's shared memory forgotten (not for QPs added beside `connected`'s)."""
    made = []
    try:
        for kw in qp_kws:
            made.append(_qp(nic, size, bytes(size), **kw))
        yield made
    finally:
        for shm, mr, _, _ in made:
            nic.dereg_mr(mr["lkey"])
            shm.close()
            shm.unlink()
        if clear_shms:
            nic.shms.clear()


@contextlib.contextmanager
def connected(size, data, dcqcn="paper", clock=None, qa_kw=None, qb_kw=None, **kw):
    """NICs a (h1g1) and b (h4g2), each with an MR of `size` bytes (a's holds `data`) and
    a CQ, and one QP connected to the other's (RTS); with `clock`, both NICs read it.
    qa_kw / qb_kw: create_qp knobs of the two QPs; kw: `_pair`'s."""
    _, a, b = _pair(dcqcn, **kw)
    if clock is not None:
        a.clock = b.clock = clock
    sa, ma, ca, qa = _qp(a, size, data, **(qa_kw or {}))
    sb, mb, cb, qb = _qp(b, size, bytes(size), **(qb_kw or {}))
    try:
        a.to_rtr(qa, qb.qpn, qb.start_psn, b.cfg.ip, 4096)
        a.to_rts(qa)
        b.to_rtr(qb, qa.qpn, qa.start_psn, a.cfg.ip, 4096)
        b.to_rts(qb)
        yield types.SimpleNamespace(a=a, b=b, qa=qa, qb=qb, ma=ma, mb=mb, ca=ca, cb=cb, sb=sb)
    finally:
        for nic, mr, shm in ((a, ma, sa), (b, mb, sb)):
            nic.dereg_mr(mr["lkey"])
            nic.shms.clear()
            shm.close()
            shm.unlink()


def test_back_to_back_write_places_bytes_paces_and_answers_ce_with_one_cnp():
    size = 3 * 4096 + 100
    data = bytes(random.Random(2).randbytes(size))
    with connected(size, data) as c:
        a, b, qa, qb, ma, mb, ca, cb, sb = c.a, c.b, c.qa, c.qb, c.ma, c.mb, c.ca, c.cb, c.sb
        a.post_send(qa.qpn, [{"wr_id": 1, "local_addr": ma["addr"], "length": size,
                               "lkey": ma["lkey"], "remote_addr": mb["addr"], "rkey": mb["rkey"],
                               "imm": 5}])
        b.post_recv(qb.qpn, [9])
        now = 100.0
        a.transmit(now)
        assert len(a.raw.frames) == 1  # the port paces: one frame now, the next later
        gap = a.port_next - now
        assert gap == pytest.approx(len(a.raw.frames[0]) * 8 / a.link_lab_bps, rel=1e-6)
        for _ in range(3):
            now = a.port_next
            a.transmit(now)
        assert len(a.raw.frames) == 4
        frames = a.raw.frames
        # the switch marked them all CE: one CNP (cnp_interval), ACK for the last
        for f in frames:
            m = bytearray(f)
            m[15] |= 3
            csum = 0
            m[24:26] = b"\0\0"
            for i in range(14, 34, 2):
                csum += m[i] << 8 | m[i + 1]
            while csum >> 16:
                csum = (csum & 0xFFFF) + (csum >> 16)
            m[24:26] = (~csum & 0xFFFF).to_bytes(2, "big")
            b.on_frame(memoryview(m), now)
        assert bytes(sb.buf[:size]) == data
        out = [parse(f) for f in b.raw.frames]
        assert [f.opcode for f in out] == [Op.CNP, Op.ACK]
        assert out[0].dscp == 48 and out[1].dscp == 24
        for f in b.raw.frames:
            a.on_frame(memoryview(bytearray(f)), now)
        assert qa.cnp_rx == 1 and qa.rp.rc == pytest.approx(100e9)  # alpha 1: rate halved
        [wc] = a.cqs[ca].poll(1)
        [rwc] = b.cqs[cb].poll(1)
        assert (wc.wr_id, wc.status) == (1, WCStatus.SUCCESS)
        assert (rwc.wr_id, rwc.status, rwc.imm, rwc.byte_len) == (9, WCStatus.SUCCESS, 5, size)
        snap = a.counters()["qps"][str(qa.qpn)]
        assert snap["tx_packets"] == 4 and snap["cnps_rx"] == 1 and snap["rate_model_bps"] == 100e9


def test_pfc_pause_stops_data_until_it_expires():
    fab, a, b = _pair(dcqcn="off")
    size = 8192
    with own_qps(a, {}, size=size) as [(_, ma, _, qa)]:
        a.to_rtr(qa, 0x42, 0, b.cfg.ip, 4096)
        a.to_rts(qa)
        a.post_send(qa.qpn, [{"wr_id": 1, "local_addr": ma["addr"], "length": size,
                               "lkey": ma["lkey"], "remote_addr": 0, "rkey": 1}])
        a.on_frame(memoryview(pause_frame(b"\x02" * 6, 3, 0xFFFF)), 10.0)
        a.transmit(10.0)
        assert a.raw.frames == []
        lab = TimeDilation(1000).pause_lab_s(0xFFFF, 200e9)
        assert 0 < a.step(10.0) <= lab + 1e-9  # sleeps while paused, no spinning
        a.transmit(10.0 + lab + 1e-6)
        assert len(a.raw.frames) == 1


def test_close_closes_the_wake_pair_and_leaves_fakes_alone():
    _, a, b = _pair()
    wire = a.raw
    a.close()
    assert a.wake_r.fileno() == -1 and a.wake_w.fileno() == -1 and a.raw is wire
    b.close()
