"""UET in namespaces (root, issue 16): the NICs speak Ultra Ethernet over UDP 4793; the
switches' ordinary flow ECMP spreads one message over both spines because every packet
carries its own entropy value, and a congested egress trims instead of queueing; the
receiver NACKs the trimmed packets and the senders resend them - every byte arrives."""

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import topologies
from emu.realise.net import FabricNet
from emucore.qos.cbfc import Cbfc
from emucore.qos.qosconfig import QosConfig
from emucore.qos.trim import Trim
from emu.observe.capture import Captures
from traffic.workloads import rdma

pytestmark = pytest.mark.netns
MB = 1 << 20
TRIM = Trim(threshold_bytes=20_000)


@pytest.fixture(scope="module")
def fnet():
    with FabricNet(topologies.load("rail2x4", tdf=5000), qos=QosConfig(trim=TRIM)) as f:
        assert f.wait_pfc() == {}
        f.start_nics(gpus=["h1g1", "h2g1", "h3g1", "h4g1", "h4g2"], transport="uet",
                     uet={"trimming": True}, trimmed_dscps=(TRIM.trimmed_dscp, TRIM.lasthop_dscp))
        yield f


def uplink_bytes(fnet):
    ports = fnet.counters("rail1")["ports"]
    return ports["eth5"]["tx_bytes"], ports["eth6"]["tx_bytes"]


LUA = Path(__file__).resolve().parents[2] / "wireshark" / "uet.lua"


def test_one_uet_write_is_byte_exact_and_spread_over_both_spines(fnet, tmp_path):
    before = uplink_bytes(fnet)
    caps = Captures(tmp_path, bound_kb=20_000, snaplen=128)
    caps.start(fnet, [("h4", "nic2")])
    r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", 4 * MB)
    caps.stop()
    after = uplink_bytes(fnet)
    assert r["status"] == "SUCCESS" and r["byte_exact"] and r["recv_imm"] is not None
    d5, d6 = after[0] - before[0], after[1] - before[1]
    assert d5 + d6 > 4 * MB and min(d5, d6) > 0.3 * (d5 + d6), (d5, d6)  # ~1:1 by EV
    assert r["timeouts"] == 0, r
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark (./setup.sh installs it)")
    out = subprocess.run(["tshark", "-X", f"lua_script:{LUA}", "-r", str(tmp_path / "h4-nic2.pcap"),
                          "-Y", "emu_uet", "-T", "fields", "-E", "occurrence=f",
                          "-e", "emu_uet.pds.type", "-e", "emu_uet.pds.flags.syn", "-e", "udp.srcport",
                          "-e", "emu_uet.ses.request_length"],
                         capture_output=True, text=True, timeout=300)
    assert "Lua" not in out.stderr, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    reqs = [x for x in rows if x[0] == "2"]  # RUD_REQ, as the dissector decodes it
    acks = [x for x in rows if x[0] == "8"]  # ACK_CC from h4g2
    # (dumpcap on a loaded 2-core machine may miss a few: the decode is what is checked)
    assert len(reqs) >= 0.9 * 4 * MB // 4096 and reqs[0][1] == "1" and acks
    syn = [x[1] for x in reqs]
    assert syn.count("1") < len(syn) // 2 and syn[-1] == "0", syn.count("1")  # SYN until ACKed
    assert len({x[2] for x in reqs}) > 100  # an entropy value per packet: many source ports


def test_an_incast_is_trimmed_nacked_resent_and_byte_exact(fnet):
    port = next(p for p, c in fnet.counters("rail1")["ports"].items()
                if c["peer"].startswith("h4:"))  # rail1's port to h4 (its nic1: h4g1)
    before = fnet.counters("rail1")["ports"][port]["trimmed"]
    r = rdma.incast(fnet.fabric, fnet.nic_sockets, "h4g1", ["h1g1", "h2g1", "h3g1"], 2 * MB)
    assert set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values()), r
    trimmed = fnet.counters("rail1")["ports"][port]["trimmed"] - before
    assert trimmed > 0
    assert sum(r["retransmits"].values()) >= trimmed  # each cut packet NACKed and resent


def test_a_uet_send_lands_in_the_posted_buffer(fnet, tmp_path):
    caps = Captures(tmp_path, bound_kb=20_000, snaplen=128)
    caps.start(fnet, [("h4", "nic2")])
    r = rdma.write(fnet.fabric, fnet.nic_sockets, "h1g1", "h4g2", MB + 5, send=True)
    caps.stop()
    assert r["op"] == "send" and r["status"] == "SUCCESS" and r["byte_exact"], r
    assert r["recv_status"] == "SUCCESS" and r["recv_imm"] == rdma.IMM
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark (./setup.sh installs it)")
    out = subprocess.run(["tshark", "-X", f"lua_script:{LUA}", "-r", str(tmp_path / "h4-nic2.pcap"),
                          "-Y", "emu_uet.pds.type == 2", "-T", "fields", "-E", "occurrence=f",
                          "-e", "emu_uet.ses.opcode", "-e", "emu_uet.ses.hd"],
                         capture_output=True, text=True, timeout=300)
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert rows and {x[0] for x in rows} == {"5"}, rows[:3]   # SES opcode SEND
    assert rows.count(["5", "1"]) <= 1   # the immediate as header data on the first packet


def test_cbfc_on_the_spine_links_leaks_no_credit():
    """CBFC (modelled) between switches, from link start through a cross-rail write: at
    rest every sender holds its partner's whole buffer less what that partner still owes
    (under one update), on every switch-to-switch link - including the credits of the
    link start, whose two ends agree at different times."""
    cb = Cbfc(credits_bytes=400_000, update_bytes=32_768)
    with FabricNet(topologies.load("rail2x4", tdf=5000), qos=QosConfig(cbfc=cb)) as f:
        f.wait_pfc()
        f.start_nics(gpus=["h1g1", "h4g2"])
        r = rdma.write(f.fabric, f.nic_sockets, "h1g1", "h4g2", 8 * MB)
        assert r["status"] == "SUCCESS" and r["byte_exact"], r
        time.sleep(1.0)  # what is in flight lands, the last updates come back
        ports = {(s.name, p): c for s in f.fabric.switches()
                 for p, c in f.counters(s.name)["ports"].items()}
        links, moved = 0, 0
        for (sw, p), c in ports.items():
            if c["cbfc"] is None:
                continue
            peer_sw, peer_p = c["peer"].split(":")
            owed = ports[(peer_sw, peer_p)]["cbfc"]
            links += 1
            moved += c["cbfc"]["updates_rx"]
            # what I may send + what my partner owes me back = its buffer
            assert c["cbfc"]["credits"][3] + owed["owed"][3] == 400_000, (sw, p, c["cbfc"], owed)
        assert links == 8 and moved > 8   # 4 uplinks, both ends; credits came back


# -- a trimmed incast keeps control traffic moving (issue 32) ---------------------------------
#: bytes of the frames the bounds below count, as emu builds them (emucore.wire.uet_codec):
#: Ethernet 14 + IPv4 20 + UDP 8, then the UET headers (docs/UET.md "On the wire")
ETH_IP_UDP = 14 + 20 + 8
ACK_MAX = ETH_IP_UDP + 32 + 12            #: ACK_CC with an SES response, the longest control frame
DATA_FULL = ETH_IP_UDP + 12 + 44 + 4096   #: RUD request, SES standard header, a 4096 B payload


def control_bounds(port: dict, mtu: int, tdf: float, trim: Trim) -> tuple[float, float]:
    """(ACK bound, trimmed-header bound), model seconds, for one egress port's strict queue
    7 and trimmed class, from the queue design - not from a run:

    * the wire (switch_agent/shaper.py) books frames up to burst = max(1 ms lab, 2 MTU at
      the link's lab rate) ahead, plus the last booked frame, at most L = MTU + 18 bytes
      (Ethernet header and an 802.1Q tag): what a frame arriving now must wait for at
      the least, whatever its class;
    * control (ACKs, NACKs: DSCP 48, queue 7) is strict above everything
      (switch_agent/queues.py, docs/UET.md "Trimming in the switch"): it waits only for
      that and for the control frames ahead of it, at most the queue's deepest Q7:
      W7 <= burst + (L + Q7) / R;
    * a trimmed header (queue 6) waits, besides, for the trimmed frames ahead (<= Q6,
      the class's deepest) and the data the 25 % cap lets through meanwhile: a data
      frame goes only while the class ran ahead by more than its burst, and pays back
      share x its length against (100 - share) x each trimmed frame's length, so data
      <= (100 - share) / share x (Q6 + l6) + L, l6 the trimmed frame (keep + 42 B); and
      for the control frames: the Q7 queued, and those arriving meanwhile - at most one
      per data frame the target received (ACK on every 4th packet or AR, never more
      than one per packet: docs/UET.md), ACK_MAX bytes per DATA_FULL, so a fraction
      rho = ACK_MAX / DATA_FULL of the wire:
      W6 <= (burst + (2 L + Q7 + 100 / share x Q6 + (100 - share) / share x l6) / R)
      / (1 - rho).
    """
    rate = port["model_bps"] / 8                            # model bytes per second
    burst = max(1e-3 / tdf, 2 * mtu / rate)                 # Shaper.burst_s, in model time
    big = mtu + 18
    q6 = port["queues"]["6"]["max_depth_bytes"]
    q7 = port["queues"]["7"]["max_depth_bytes"]
    l6 = ETH_IP_UDP + trim.keep
    pay = (100 - trim.share) / trim.share
    w7 = burst + (big + q7) / rate
    w6 = (burst + (2 * big + q7 + (1 + pay) * q6 + pay * l6) / rate) / (1 - ACK_MAX / DATA_FULL)
    return w7, w6


def test_a_trimmed_incast_keeps_acks_and_trimmed_headers_moving():
    """h1g1, h2g1, h3g1 write 2 MB each into h4g1 (trimming at the default 100 KB) while
    h4g1 writes 16 MB into h1g1: Rail-1's port to h4 carries the incast's data, its
    trimmed headers and the ACKs of h4g1's write. Every ACK and every trimmed header
    there started within the bounds of `control_bounds`, worked out from the queue
    design and the port's rate with the queues' deepest fill (the switch's own
    sojourn and depth counters, a fabric of its own so they count only this run)."""
    trim = Trim()
    fab = topologies.load("rail2x4", tdf=10000)
    with FabricNet(fab, qos=QosConfig(trim=trim)) as f:
        f.wait_pfc()
        f.start_nics(gpus=["h1g1", "h2g1", "h3g1", "h4g1"], transport="uet",
                     uet={"trimming": True}, trimmed_dscps=(trim.trimmed_dscp, trim.lasthop_dscp))
        back: dict = {}

        def write_back():
            back["r"] = rdma.write(f.fabric, f.nic_sockets, "h4g1", "h1g1", 16 * MB)
            back["end"] = time.monotonic()

        t = threading.Thread(target=write_back)
        t.start()
        time.sleep(2.0)                                       # connected and under way
        start = time.monotonic()
        r = rdma.incast(f.fabric, f.nic_sockets, "h4g1", ["h1g1", "h2g1", "h3g1"], 2 * MB)
        end = time.monotonic()
        t.join()
        w = back["r"]
        ports = f.counters("rail1")["ports"]
    assert set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values()), r
    assert w["status"] == "SUCCESS" and w["byte_exact"], w
    # the write and the incast overlapped (not that one held the other: the incast's
    # trimmed retransmits can outlast the write, as in CI's run of 1d0733d)
    assert back["end"] - w["seconds_lab"] < end and start < back["end"]
    port = next(c for c in ports.values() if c["peer"].startswith("h4:"))
    qs = port["queues"]
    # the three classes shared the port: data, trimmed headers, ACKs
    assert port["trimmed"] > 0 and qs["6"]["dequeued"] == port["trimmed"]
    assert qs["3"]["dequeued"] > 0 and qs["7"]["dequeued"] > 0
    w7, w6 = control_bounds(port, fab.mtu, fab.tdf, trim)
    # the bounds are the model's; a frame waits longer in the lab by the wire time its
    # port lost to bookings later than the shaper's catch-up window (the agent not
    # scheduled for that long: CI's run of 98d73a3 had the trimmed headers at 1.691 us
    # against 1.578), which the port counts: at most all of it
    lost = port["lost_service_us"]
    seen = {q: qs[q]["sojourn_max_us"] for q in ("3", "6", "7")}
    print(f"rail1 -> h4, longest wait (model us): data {seen['3']}, trimmed {seen['6']} "
          f"(bound {w6 * 1e6:.3f}), ACKs {seen['7']} (bound {w7 * 1e6:.3f}), both + "
          f"{lost} lost to lateness; deepest "
          f"{ {q: qs[q]['max_depth_bytes'] for q in seen} } B; {port['trimmed']} trimmed")
    assert seen["7"] <= w7 * 1e6 + lost and seen["6"] <= w6 * 1e6 + lost, (
        seen, round(w7 * 1e6, 3), round(w6 * 1e6, 3), lost,
        {q: qs[q]["max_depth_bytes"] for q in seen})
