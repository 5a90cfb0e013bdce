"""Switch QoS in real namespaces (root), book ch.11: ECN marking under incast, PFC pause
frames that tshark decodes, no drops in the no-drop class (and drops without PFC),
default class dropped not paused, CNP class latency, the PFC cascade of Figure 11-5,
the PFC watchdog."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import topologies
from emu.observe.capture import Captures
from emu.realise.net import FabricNet
from emucore.qos.qosconfig import InterfaceQos, QosConfig, Watchdog

from .polling import wait_for

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
FRAME = 4170  # a RoCE-sized frame: 4096 B payload + headers
BOOK = QosConfig()  # the book's thresholds, as every switch here runs them
WRED_MIN = BOOK.queuing.queues[3].wred.min_bytes  # 150 KB
WRED_MAX = BOOK.queuing.queues[3].wred.max_bytes  # 3000 KB
XOFF = BOOK.pfc.xoff_bytes  # 3200 KB per ingress port and priority


def blast(fnet, src, dst, seconds, dscp=24, ecn=2, rate_factor=1.0, honor=True):
    """rawgen from GPU src to GPU dst at the host link's lab rate, honouring PFC."""
    fab = fnet.fabric
    s, d = fab.gpus[src], fab.gpus[dst]
    dst_mac = d.mac if s.rail == d.rail else s.gateway_mac
    rate = rate_factor * fnet.td.lab_rate(fab.link_of(s.host, s.nic).model_bps)
    argv = [sys.executable, "-m", "traffic.tools.rawgen", "--iface", s.nic, "--src-ip", s.ip,
            "--dst-ip", d.ip, "--dst-mac", dst_mac, "--size", str(FRAME), "--rate", str(rate),
            "--duration", str(seconds), "--dscp", str(dscp), "--ecn", str(ecn),
            "--dport", "4791", "--sport", str(49152 + hash(src) % 1000),
            "--tdf", str(fab.tdf), "--model-rate", str(fab.link_of(s.host, s.nic).model_bps)]
    if honor:
        argv.append("--honor-pfc")
    return fnet.host(s.host).popen(argv, cwd=str(ROOT), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)


def results(procs):
    out = []
    for p in procs:
        o, e = p.communicate(timeout=60)
        assert p.returncode == 0, e
        out.append(json.loads(o))
    return out


def port(fnet, sw, ifname):
    return fnet.counters(sw)["ports"][ifname]


def q3_drops(c):
    return sum(c["queues"]["3"]["drops"].values())


@pytest.fixture(scope="module")
def fnet():
    with FabricNet(topologies.load("rail2x4"), qos=QosConfig()) as f:
        assert f.wait_pfc() == {}
        yield f


def reset(fnet):
    for s in fnet.fabric.switches():
        fnet.agent_request(s.name, {"cmd": "reset"})


def busy_ports(fnet) -> list[str]:
    """Ports of any switch that still hold frames, hold PFC ingress bytes or are paused."""
    out = []
    for sw in fnet.fabric.switches():
        for name, c in fnet.counters(sw.name)["ports"].items():
            if c["queue_bytes"] or any(c["pfc"]["ingress"]["held_bytes"]) or any(c["pfc"]["paused"]):
                out.append(f"{sw.name}:{name}")
    return out


def wait_drained(fnet, timeout: float = 30.0) -> None:
    """Wait until every queue of every switch is empty and no port is paused."""
    wait_for(lambda: not busy_ports(fnet), timeout, "the fabric's queues to drain")


def rx_bytes(fnet, sw, ports):
    return sum(port(fnet, sw, p)["rx_bytes"] for p in ports)


def test_incast_marks_ecn_and_pfc_prevents_drops(fnet, tmp_path):
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    caps = Captures(tmp_path, bound_kb=5000)
    caps.start(fnet, [("h1", "nic1")])
    before = port(fnet, "rail1", "eth4")
    procs = [blast(fnet, g, "h4g1", 6) for g in ("h1g1", "h2g1", "h3g1")]
    # ping the CNP class once queue 3 is congested (past WRED min), not before
    wait_for(lambda: port(fnet, "rail1", "eth4")["queues"]["3"]["depth_bytes"] > WRED_MIN,
             timeout=5.0, what="rail1 eth4 queue 3 past WRED min")
    ping = fnet.host("h1").cmd("ping -n -c 5 -i 0.2 -Q 0xc0 -I 10.0.1.11 10.0.1.14")
    sent = results(procs)
    caps.stop()
    after = port(fnet, "rail1", "eth4")
    q = after["queues"]["3"]
    assert q3_drops(after) == q3_drops(before) == 0  # no-drop class: nothing lost
    ingress = [port(fnet, "rail1", f"eth{i}")["pfc"]["pause_tx"][3] for i in (1, 2, 3)]
    assert sum(ingress) > 0  # three line-rate senders into one port must trip xOFF
    # An ingress port sends xOFF when it holds > XOFF bytes of priority 3; all of them
    # sit in eth4's queue 3 (held bytes are released at dequeue), so that queue was
    # deeper than XOFF. Since the last time it was below WRED max it grew by more than
    # XOFF - WRED_MAX - FRAME bytes, all of it enqueued at a depth >= WRED max, where
    # every ECT frame is marked: at least that many frames were CE-marked.
    assert q["max_depth_bytes"] > XOFF
    assert q["ecn_marks"] - before["queues"]["3"]["ecn_marks"] >= (XOFF - WRED_MAX - FRAME) // FRAME
    assert sum(s["pfc_rx"] for s in sent) > 0 and sum(s["paused_s"] for s in sent) > 0
    # the pause frames on h1's link decode in tshark as PFC (CBFC) with C3 set
    out = subprocess.run(["tshark", "-r", str(tmp_path / "h1-nic1.pcap"), "-Y", "macc.opcode == 0x0101",
                          "-T", "fields", "-e", "eth.dst", "-e", "macc.cbfc.enbv.c3",
                          "-e", "macc.cbfc.pause_time.c3"], capture_output=True, text=True,
                         timeout=60).stdout.split("\n")
    rows = [r.split("\t") for r in out if r]
    assert rows, "no PFC frame in the capture"
    assert rows[0][0] == "01:80:c2:00:00:01" and rows[0][1] in ("1", "True")
    assert {r[2] for r in rows} >= {"65535"}
    # CNP class (DSCP 48, strict queue 7) keeps a low latency under queue-3 congestion:
    # a few frame times of the 40 Mbps lab link, not the seconds queue 3 holds
    rtts = [float(x.split("time=")[1].split()[0]) for x in ping.splitlines() if "time=" in x]
    assert rtts and min(rtts) < 60, ping
    depth_s = q["max_depth_bytes"] * 8 / fnet.td.lab_rate(200e9)
    assert depth_s > 0.2


def test_without_pfc_the_same_incast_drops():
    qos = QosConfig(default_interface=InterfaceQos(pfc_mode="off"))
    q = list(qos.queuing.queues)
    q[3] = dataclasses.replace(q[3], limit_bytes=1_000_000)
    qos = dataclasses.replace(qos, queuing=dataclasses.replace(qos.queuing, queues=tuple(q)))
    with FabricNet(topologies.load("rail1x4", spines=0), qos=qos) as f:
        procs = [blast(f, g, "h4g1", 3) for g in ("h1g1", "h2g1", "h3g1")]
        results(procs)
        came = rx_bytes(f, "rail1", ("eth1", "eth2", "eth3"))  # before c: a lower bound
        c = port(f, "rail1", "eth4")
        q = c["queues"]["3"]
        # 3 senders at line rate into one port, no PFC: the queue overflows. Every frame
        # that came in on eth1..3 was dropped, dequeued or is still queued, so the drops
        # are exactly the rest (less up to 10 frames' worth of LLDP counted in rx)
        assert q["drops"].get("queue_full", 0) > 0
        in_queue_or_sent = q["dequeued_bytes"] + q["depth_bytes"]
        assert sum(q["drops"].values()) >= (came - in_queue_or_sent) // FRAME - 10
        assert sum(port(f, "rail1", f"eth{i}")["pfc"]["pause_tx"][3] for i in (1, 2, 3)) == 0


def test_default_class_is_dropped_not_paused(fnet):
    reset(fnet)
    procs = [blast(fnet, g, "h4g2", 4, dscp=0, ecn=0) for g in ("h1g2", "h2g2", "h3g2")]
    results(procs)
    came = rx_bytes(fnet, "rail2", ("eth1", "eth2", "eth3"))  # since reset; before c
    c = port(fnet, "rail2", "eth4")
    q = c["queues"]["0"]
    # class-default is not paused (the senders' frames are priority 0): its 10 MB queue
    # overflows, and what came in on eth1..3 since the reset and was neither dequeued
    # nor is still queued was dropped (less up to 10 frames' worth of LLDP in rx).
    # Queue counters are not reset, which only makes dequeued larger: still a bound.
    assert q["drops"].get("queue_full", 0) > 0
    in_queue_or_sent = q["dequeued_bytes"] + q["depth_bytes"]
    assert sum(q["drops"].values()) >= (came - in_queue_or_sent) // FRAME - 10
    for i in (1, 2, 3):
        assert sum(port(fnet, "rail2", f"eth{i}")["pfc"]["pause_tx"]) == 0


def test_cross_rail_incast_cascades_rail_spine_rail_hosts(fnet, tmp_path):
    """Figure 11-5: the congested Rail-1 port pauses the spines, the spines pause Rail-2,
    Rail-2 pauses the senders - in that order (first pause frame on each link)."""
    wait_drained(fnet)  # earlier tests' queues and pauses are gone
    watch = [("spine1", "eth1"), ("spine2", "eth1"), ("rail2", "eth5"), ("rail2", "eth6"),
             ("h1", "nic2"), ("h2", "nic2"), ("h3", "nic2")]
    caps = Captures(tmp_path, bound_kb=5000)
    caps.start(fnet, watch)
    procs = [blast(fnet, g, "h4g1", 8) for g in ("h1g2", "h2g2", "h3g2")]
    results(procs)
    caps.stop()
    first = {}
    for node, ifname in watch:
        out = subprocess.run(["tshark", "-r", str(caps.path(node, ifname)), "-Y",
                              "macc.opcode == 0x0101 && macc.cbfc.pause_time.c3 > 0", "-T",
                              "fields", "-e", "frame.time_epoch"], capture_output=True,
                             text=True, timeout=60).stdout.split()
        if out:
            first[(node, ifname)] = float(out[0])
    rail_to_spine = min(v for k, v in first.items() if k[0].startswith("spine"))
    spine_to_rail2 = min(v for k, v in first.items() if k[0] == "rail2")
    rail2_to_hosts = min(v for k, v in first.items() if k[0].startswith("h"))
    print({f"{n}:{i}": round(t - rail_to_spine, 3) for (n, i), t in first.items()})
    assert rail_to_spine < spine_to_rail2 < rail2_to_hosts, first
    assert q3_drops(port(fnet, "rail1", "eth4")) == 0


def test_watchdog_trips_on_a_host_that_never_stops_pausing():
    qos = dataclasses.replace(QosConfig(), watchdog=Watchdog(detect_s="1ms", restore_s="1ms"))
    fab = topologies.load("rail1x2", spines=0, tdf=1000)  # 1 ms model = 1 s lab
    with FabricNet(fab, qos=qos) as f:
        assert f.wait_pfc() == {}
        storm = ("import socket,time\nfrom emucore.wire.pause import pause_frame\n"
                 "from traffic.tools.rawgen import iface_mac\n"
                 "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW); s.bind(('nic1',0))\n"
                 "f=pause_frame(iface_mac('nic1'),3,0xFFFF); t=time.monotonic()\n"
                 "while time.monotonic()-t<6:\n    s.send(f); time.sleep(0.05)\n")
        stormer = f.host("h2").popen([sys.executable, "-c", storm], cwd=str(ROOT))
        lossless = blast(f, "h1g1", "h2g1", 5, rate_factor=0.5, honor=False)
        other = blast(f, "h1g1", "h2g1", 5, dscp=0, ecn=0, rate_factor=0.3, honor=False)
        results([lossless, other])
        stormer.wait(20)
        c = port(f, "rail1", "eth2")
        wd = c["pfc"]["watchdog"]
        assert wd["storms_detected"][3] >= 1 and wd["dropped"][3] > 0
        assert any("PFC storm detected" in e for e in f.counters("rail1")["events"])
        # priority 0 kept flowing through the storm: never paused, offered at 0.3 of
        # the link, so it lost nothing and sent frames
        assert sum(c["queues"]["0"]["drops"].values()) == 0
        assert c["queues"]["0"]["dequeued"] > 100


def test_show_switch_command_answers_live(fnet):
    r = subprocess.run([sys.executable, "-m", "emu", "show-switch", fnet.tag, "rail1", "show",
                        "lldp", "neighbors"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "spine1" in r.stdout and "h4" in r.stdout
    r = subprocess.run([sys.executable, "-m", "emu", "show-switch", fnet.tag, "rail1",
                        "show queuing interface eth99"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "eth99" in r.stderr
