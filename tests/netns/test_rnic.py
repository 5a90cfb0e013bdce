"""The emulated RDMA NIC end to end in namespaces (root), book ch.9, 11, 12: byte-exact
RDMA WRITEs across rails, go-back-N recovery from drops, R_Key protection, Wireshark
decoding of the frames, and DCQCN under a 3:1 incast with the book's QoS."""

import shutil
import subprocess
import time

import pytest

import topologies
from emu.observe import guard
from emu.observe.capture import Captures
from emu.realise.net import FabricNet
from emucore.qos.qosconfig import QosConfig
from traffic.nic.client import request
from traffic.workloads import rdma

pytestmark = pytest.mark.netns
MB = 1 << 20
GPUS = ["h1g1", "h2g1", "h3g1", "h4g1", "h4g2"]


@pytest.fixture(scope="module")
def fnet():
    # TDF 5000: 40 Mbps lab per 200G link; a 16 MB write takes ~3.5 s lab
    with FabricNet(topologies.load("rail2x4", tdf=5000), qos=QosConfig()) as f:
        assert f.wait_pfc() == {}
        f.start_nics(gpus=GPUS)
        yield f


def tshark(path, flt, *fields):
    out = subprocess.run(["tshark", "-r", str(path), "-Y", flt, "-T", "fields",
                          *[x for fl in fields for x in ("-e", fl)]],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def guarded(fnet, gpus, work):
    """(work(), the fidelity guard's verdict on the agents and the NICs of `gpus` over
    exactly that window) - a rate counts only when the lab kept up (emu.observe.guard)."""
    switches = [s.name for s in fnet.fabric.switches()]
    for s in switches:
        assert fnet.agent_request(s, {"cmd": "fidelity_reset"})["ok"]
    for g in gpus:
        assert request(fnet.nic_sockets[g], {"cmd": "fidelity_reset"})["ok"]
    r = work()
    counters = {s: fnet.counters(s) for s in switches}
    counters |= {g: request(fnet.nic_sockets[g], {"cmd": "counters"}) for g in gpus}
    fid = guard.judge(fnet.fabric, counters)["fidelity"]
    assert fid["measured"] == len(counters) and fid["actions"] > 0, fid
    return r, fid


def write_16mb(f):
    """The 16 MB WRITE h1g1 -> h4g2, under the guard (`guarded`), its exactness judged."""
    r, fid = guarded(f, ["h1g1", "h4g2"],
                     lambda: rdma.write(f.fabric, f.nic_sockets, "h1g1", "h4g2", 16 * MB))
    assert (r["status"], r["recv_status"], r["recv_imm"]) == ("SUCCESS", "SUCCESS", rdma.IMM)
    assert r["byte_exact"]
    assert r["retransmits"] == 0
    return r, fid


def test_16mb_write_across_rails_is_byte_exact(fnet):
    r, fid = write_16mb(fnet)
    if not fid["kept_up"]:  # a busy machine: once more at the guard's TDF, in a fabric of its own
        tdf = fid["suggested_tdf"]
        with FabricNet(topologies.load("rail2x4", tdf=tdf), qos=QosConfig()) as f:
            assert f.wait_pfc() == {}
            f.start_nics(gpus=["h1g1", "h4g2"])
            r, fid = write_16mb(f)
    if fid["kept_up"]:  # a rate counts only from a run that kept up (emu.observe.guard)
        assert r["link_fraction"] > 0.7, (r, fid)


def test_write_survives_one_percent_drops(fnet):
    # 4 MB = 1024 data frames: with each dropped at 1 %, none at all has probability
    # 0.99^1024 = 3.4e-5 (binomial); at TDF 5000 (2026-11-28 12:06 UTC) 4 MB took 1.3-1.4 s
    # with 317-495 retransmits, 16 MB 5.5 s, or 10.4 s with a 5 s lab timeout among them
    fnet.agent_request("rail1", {"cmd": "set", "test_drop_rate": 0.01})
    try:
        r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 4 * MB)
    finally:
        fnet.agent_request("rail1", {"cmd": "set", "test_drop_rate": 0.0})
    assert r["status"] == "SUCCESS" and r["byte_exact"]
    assert r["retransmits"] > 0 and r["rx_out_of_order"] > 0  # go-back-N did the work


def test_wrong_rkey_is_naked_and_memory_untouched(fnet):
    r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 1 * MB, rkey=0x1BAD)
    assert r["status"] == "REM_ACCESS_ERR" and r["recv_status"] is None
    assert r["rx_nak_access"] == 1 and r["target_untouched"]


def test_wireshark_decodes_every_frame_as_rroce(fnet, tmp_path):
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    caps = Captures(tmp_path, snaplen=4400, bound_kb=10_000)
    caps.start(fnet, [("h4", "nic2")])
    a = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 1 * MB)
    b = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 256 * 1024, write_only=True,
                   port=18600)
    time.sleep(1.0)  # let dumpcap write out its buffer
    caps.stop()
    assert a["byte_exact"] and b["byte_exact"]
    pcap = caps.path("h4", "nic2")
    rows = tshark(pcap, "udp.dstport == 4791 && ip.src == 10.0.1.11", "infiniband.bth.opcode",
                  "infiniband.reth.dmalen", "infiniband.reth.r_key", "infiniband.reth.va",
                  "ip.dsfield.dscp", "ip.dsfield.ecn")
    ib = tshark(pcap, "infiniband && ip.src == 10.0.1.11", "frame.number")
    assert len(rows) == len(ib) == 256 + 64  # every RoCE frame decodes as InfiniBand
    first, only = rows[:256], rows[256:]
    assert [int(r[0]) for r in first] == [6] + [7] * 254 + [9]  # FIRST, MIDDLE.., LAST w/ imm
    assert int(first[0][1]) == MB
    assert (int(first[0][2], 16), int(first[0][3], 16)) == (a["remote"]["rkey"], a["remote"]["addr"])
    assert all(r[1] == "" for r in first[1:])  # MIDDLE/LAST carry no RETH
    assert [int(r[0]) for r in only] == [10] * 63 + [11]  # WRITE ONLY, each with a RETH
    assert {r[1] for r in only} == {"4096"}
    assert [int(r[3], 16) for r in only] == [b["remote"]["addr"] + 4096 * i for i in range(64)]
    assert {(r[4], r[5]) for r in rows} == {("24", "2")}  # DSCP 24, ECT(0)
    acks = tshark(pcap, "infiniband.bth.opcode == 17", "ip.src", "infiniband.aeth.syndrome")
    assert acks and {r[0] for r in acks} == {"10.0.2.14"}
    assert tshark(pcap, "_ws.malformed || _ws.expert.severity >= error", "frame.number") == []
    assert tshark(pcap, "icmp", "frame.number") == []


def test_a_send_lands_in_the_posted_buffer_and_wireshark_names_it(fnet, tmp_path):
    caps = Captures(tmp_path, snaplen=128, bound_kb=10_000)
    caps.start(fnet, [("h4", "nic2")])
    r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 64 * 4096 + 5, send=True,
                   port=18601)
    caps.stop()
    assert r["op"] == "send" and r["status"] == "SUCCESS" and r["byte_exact"], r
    assert (r["recv_status"], r["recv_imm"]) == ("SUCCESS", rdma.IMM)
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    ops = [int(x[0]) for x in tshark(caps.path("h4", "nic2"),
                                     "udp.dstport == 4791 && ip.src == 10.0.1.11",
                                     "infiniband.bth.opcode")]
    assert ops == [0] + [1] * 63 + [3], ops[:3]   # SEND FIRST, MIDDLE.., LAST with immediate


@pytest.fixture(scope="module")
def incast(fnet, tmp_path_factory):
    """4 MB from each of 3 senders into h4g1. The tests judge that marks, CNPs and a cut
    of every QP happen, which they do once the queue passes the book's WRED min (150 KB),
    long before 4 MB ends (at TDF 5000, 2026-11-28 11:23 UTC: 965 marks, 18 CNPs, each QP
    cut 6 times, done in 5-8 s lab). 16 MB, as before, took 59-75 s lab (12-15 ms model:
    the cuts leave the senders at ~0.1 of C/3) for the same verdicts."""
    d = tmp_path_factory.mktemp("incast")
    caps = Captures(d, snaplen=128, bound_kb=10_000)
    caps.start(fnet, [("h4", "nic1")])
    before = fnet.counters("rail1")["ports"]["eth4"]["queues"]["3"]
    r = rdma.incast(fnet.fabric, fnet.nic_sockets, "h4g1", ["h1g1", "h2g1", "h3g1"], 4 * MB)
    after = fnet.counters("rail1")["ports"]["eth4"]["queues"]["3"]
    time.sleep(1.0)
    caps.stop()
    return r, before, after, caps.path("h4", "nic1")


def test_incast_marks_ce_sends_cnps_and_cuts_rates(incast):
    r, before, after, pcap = incast
    print(rdma.describe(r))
    assert set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values())
    marks = after["ecn_marks"] - before["ecn_marks"]
    assert sum(after["drops"].values()) == sum(before["drops"].values())  # no-drop class
    # the notification point answers CE-marked frames only (at most one CNP per QP per
    # cnp_interval), and every rate cut is a CNP the reaction point received: so
    # cuts <= CNPs <= marks; that each of the 3 QPs was cut at least once is the claim
    assert 0 < r["cnps_sent_by_receiver"] <= marks, (r["cnps_sent_by_receiver"], marks)
    assert all(n > 0 for n in r["rate_cuts"].values()), r["rate_cuts"]
    assert sum(r["rate_cuts"].values()) <= r["cnps_sent_by_receiver"]
    if shutil.which("tshark"):
        cnps = tshark(pcap, "infiniband.bth.opcode == 129", "ip.src", "ip.dsfield.dscp")
        assert len(cnps) == r["cnps_sent_by_receiver"]
        assert {tuple(c) for c in cnps} == {("10.0.1.14", "48")}


@pytest.mark.xfail(strict=True, reason=(
    "A finding about the book's ECN (ch.11 Example 11-3: WRED 150 KB..3 MB, 7 %), not "
    "DCQCN's convergence: this 4 MB incast (each sender's) is ~1-1.5 ms of model time, "
    "judged over 0.3-0.9 of it (the 16 MB one it replaced lasted 12-15 ms: 0.10-0.14 of "
    "C/3 over that window; 4 MB 0.13-0.20; both TDF 5000, 2026-11-28), and with the "
    "book's band the first CNP comes only once the queue is past 150 KB, each QP is cut "
    "again every cnp_interval (50 us) while it stays deep, and alpha starts at 1: all "
    "three fall far below C/3 and climb back at Rai (40 Mb/s per "
    "55 us) for much longer than 2 ms. Measured with the guard saying the lab kept up: "
    "0.17 / 0.13 / 0.13 of C/3 (TDF 8000, emu bench fidelity). The model with all three "
    "starting together (python -m emu.bench.dcqcnsim --senders 3 --qos book --ms 3 "
    "--stagger-ms 0 --frame 4154 --slack-us 0.74 --wred-seed 1:eth4 --every-ms 0.5; "
    "no PFC, so deeper): 7-8 CNPs each in the first 0.5 ms, then 0.03-0.09 of C/3 to "
    "3 ms. The 3:1 with the paper's ECN over 25-30 ms is "
    "tests/netns/test_fairshare.py (issue 31), the 2:1 there too. Strict: a pass means "
    "the book preset, DCQCN's start or this window changed - update this test and "
    "docs/NIC.md."))
def test_incast_converges_to_a_third_each(incast):
    r = incast[0]
    third = r["link_model_bps"] / 3
    for g, rate in r["steady_rate_model_bps"].items():
        assert rate == pytest.approx(third, rel=0.15), (g, r["steady_rate_model_bps"])
