"""The agent's QoS pipeline with in-memory ports: classification, WRED-ECN, PFC pause and
resume, pause honouring per priority, watchdog, LLDP/DCBX (book ch.11)."""

import dataclasses
import random

from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig, PortConfig
from switch_agent.forward import FibRoute
from emucore.qos.dcbx import build_lldp_frame
from emucore.wire.pause import is_pfc, parse_pfc, pause_frame
from emucore.qos.qosconfig import QosConfig
from emucore.qos.interface import InterfaceQos, Watchdog
from traffic.tools.rawgen import build_frame

from .fakes import FakeSock, mac

ROUTER = "02:00:00:00:05:00"
H = ["02:00:00:00:01:01", "02:00:00:00:02:01", "02:00:00:00:03:01", "02:00:00:00:04:01"]


def qos(mode="on", **wd):
    q = QosConfig(default_interface=InterfaceQos(pfc_mode=mode))
    if wd:
        q = dataclasses.replace(q, watchdog=Watchdog(**wd))
    return q.to_dict()


def make_agent(q=None, rate=8e6, **fields):
    """4 host ports on one rail VLAN; 8 Mbit/s lab = 1 MB/s per port; TDF 1000; `fields`:
    further AgentConfig fields."""
    ports = tuple(PortConfig(f"eth{i + 1}", ROUTER, 200e9, rate, 0.0, 101, f"h{i + 1}:nic1")
                  for i in range(4))
    cfg = AgentConfig("rail1", 1000.0, "/nonexistent", ports,
                      svi={"vlan101": {m: f"eth{i + 1}" for i, m in enumerate(H)}},
                      qos=q if q is not None else qos(), **fields)
    a = Agent(cfg, open_sockets=False)
    for p in a.ports.values():
        p.sock = FakeSock()
    a.install_fib([FibRoute("10.0.1.0/24", ((None, "vlan101"),))], {}, {"10.0.1.1": "vlan101"})
    a.next_lldp = float("inf")
    return a


def frame(src, dst, size=9000, dscp=24, ecn=2):
    return bytes(build_frame(mac(H[src]), mac(H[dst]), f"10.0.1.{11 + src}", f"10.0.1.{11 + dst}",
                             size, dscp=dscp, ecn=ecn))


def sent(a, port):
    return a.ports[port].sock.sent


def test_classification_to_queues():
    a = make_agent()
    a.on_frame(a.ports["eth1"], frame(0, 3, dscp=24), 0.0)
    a.on_frame(a.ports["eth1"], frame(0, 3, dscp=48), 0.0)
    a.on_frame(a.ports["eth1"], frame(0, 3, dscp=0), 0.0)
    depth = [len(f) for f in a.ports["eth4"].queues.fifo]
    assert depth[3] == 1 and depth[7] == 1 and depth[0] == 1
    a.service(0.0)
    # strict queue 7 (CNP class) leaves first
    assert a.ports["eth4"].inflight[0][1][15] >> 2 == 48


def test_wred_marks_ce_past_min_and_not_below():
    a = make_agent()
    pq = a.ports["eth4"].queues
    pq.rng = random.Random(2015).random  # the WRED dice
    for _ in range(200):  # 1.8 MB into a 1 MB/s port, no time passes: depth grows
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    ecn = [f[15] & 3 for _q, f, _ingress, _t, _prio in pq.fifo[3]]
    marked = [k for k, e in enumerate(ecn) if e == 3]
    # the same dice by hand: frame k sees depth 9000 k; from WRED min 150 KB on it is
    # marked when the die falls below 7 % x (depth - 150 KB) / (3000 KB - 150 KB)
    dice = random.Random(2015)
    want = [k for k in range(200) if 9000 * k >= 150_000
            and dice.random() < 0.07 * (9000 * k - 150_000) / 2_850_000]
    assert marked == want == [105, 107, 165, 179, 186]
    assert all(e == 2 for k, e in enumerate(ecn) if k not in want)
    assert pq.marks[3] == 5


def test_pfc_pause_above_xoff_and_resume_below_xon():
    a = make_agent()
    n_xoff = 3_200_000 // 9000 + 1
    for _ in range(n_xoff + 5):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    a.flush(a.ports["eth1"], 0.0)
    pauses = [f for f in sent(a, "eth1") if is_pfc(f)]
    assert len(pauses) == 1
    vec, quanta = parse_pfc(pauses[0])
    assert vec == 0x08 and quanta[3] == 0xFFFF and pauses[0][:6] == mac("01:80:c2:00:00:01")
    # drain eth4 at 1 MB/s: below xON (100 KB) a resume (quanta 0) goes upstream
    t = 0.0
    while a.ports["eth4"].queues.packets and t < 10:
        a.service(t)
        t += 0.001
    resumes = [f for f in sent(a, "eth1") if is_pfc(f) and parse_pfc(f)[1][3] == 0]
    assert len(resumes) == 1
    # no timers ran, so no refresh: one pause and one resume
    assert a.ports["eth1"].pause_tx[3] == 1 and a.ports["eth1"].resume_tx[3] == 1


def test_no_pause_for_default_class_it_drops_at_the_limit():
    a = make_agent()
    for _ in range(1200):  # 10.8 MB of DSCP 0 into queue 0 (limit 10 MB)
        a.on_frame(a.ports["eth1"], frame(0, 3, dscp=0, ecn=0), 0.0)
    a.flush(a.ports["eth1"], 0.0)
    assert not [f for f in sent(a, "eth1") if is_pfc(f)]
    # 1111 x 9000 = 9 999 000 bytes fit under 10 000 000; the other 89 are tail-dropped
    q0 = a.ports["eth4"].queues
    assert q0.drops[0] == {"queue_full": 89} and q0.qbytes[0] == 9_999_000


def test_received_pause_stops_only_that_priority():
    a = make_agent()
    p4 = a.ports["eth4"]
    a.on_frame(p4, pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
    for _ in range(3):
        a.on_frame(a.ports["eth1"], frame(0, 3, dscp=24), 0.0)
        a.on_frame(a.ports["eth1"], frame(0, 3, dscp=0, ecn=0), 0.0)
    t = 0.0
    while t < 0.05:  # 0xFFFF at 200G = 167.8 us model = 0.168 s lab at TDF 1000
        a.service(t)
        t += 0.001
    out = [f[15] >> 2 for f in sent(a, "eth4")]
    assert out == [0, 0, 0] and p4.queues.qbytes[3] == 27000
    while t < 0.3:  # the pause expires by itself
        a.service(t)
        t += 0.001
    assert [f[15] >> 2 for f in sent(a, "eth4")] == [0, 0, 0, 24, 24, 24]


def test_resume_frame_restarts_at_once():
    a = make_agent()
    p4 = a.ports["eth4"]
    a.on_frame(p4, pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
    a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    a.service(0.001)
    assert sent(a, "eth4") == []
    a.on_frame(p4, pause_frame(mac(H[3]), 3, 0), 0.002)
    for t in (0.002, 0.02):
        a.service(t)
    assert len(sent(a, "eth4")) == 1
    c = p4.counters(0.02)["pfc"]
    assert c["pause_rx"][3] == 1 and c["resume_rx"][3] == 1


def test_watchdog_declares_storm_and_drops():
    a = make_agent(qos(detect_s="1us", restore_s="20us", action="drop"))  # 1 ms / 20 ms lab
    p4 = a.ports["eth4"]
    for _ in range(5):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    t = 0.0
    while t < 0.05:
        if int(t * 1000) % 5 == 0:  # a host that never stops pausing
            a.on_frame(p4, pause_frame(mac(H[3]), 3, 0xFFFF), t)
        a.timers(t)
        a.service(t)
        t += 0.0005
    wd = p4.watchdog.counters()
    assert wd["storms_detected"][3] == 1 and wd["dropped"][3] == 5  # the 5 queued, flushed
    assert any("storm" in e for e in a.events)
    # queue 0 keeps flowing meanwhile
    a.on_frame(a.ports["eth1"], frame(0, 3, dscp=0, ecn=0), t)
    a.on_frame(a.ports["eth1"], frame(0, 3, dscp=24), t)  # dropped while stormed
    for dt in (0.0, 0.01, 0.02):
        a.service(t + dt)
    assert [f[15] >> 2 for f in sent(a, "eth4")] == [0]
    assert p4.watchdog.counters()["dropped"][3] == 6  # + the one that arrived stormed


def test_start_up_warns_when_a_port_lacks_headroom():
    ok = make_agent()  # no cable delay: 2 x MTU = 18 432 bytes needed, 200 000 configured
    assert ok.events == []
    # TDF 1000: 1.9 ms lab = 1.9 us model of cable at 400G needs 2 x 1.9 us x 400G / 8
    # + 2 x 9216 = 208 432 bytes; 1.8 us needs 198 432 and fits
    ports = (PortConfig("eth1", ROUTER, 400e9, 8e6, 0.0019, 101, "h1:nic1"),
             PortConfig("eth2", ROUTER, 400e9, 8e6, 0.0018, 101, "h2:nic1"))
    a = Agent(AgentConfig("rail1", 1000.0, "/nonexistent", ports, qos=qos()), open_sockets=False)
    assert a.events == [
        "QoS book: eth1: pfc.headroom_bytes 200000 < 208432 needed at 400 Gbps over 1.9 us of "
        "cable (2 x delay x rate + 2 x MTU 9216): expect headroom drops on no-drop "
        "priorities [3]"]


def test_pfc_auto_waits_for_dcbx_neighbour():
    a = make_agent(qos(mode="auto"))
    p1 = a.ports["eth1"]
    assert p1.pfc_active == frozenset()
    lldp = build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", QosConfig())
    a.on_frame(p1, lldp, 0.0)
    assert p1.pfc_active == frozenset({3}) and p1.neighbor.system_name == "h1"
    a.on_frame(p1, build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", None), 0.1)
    assert p1.pfc_active == frozenset()  # neighbour stopped advertising PFC


def test_show_commands_answer_from_live_state():
    from switch_agent import show

    a = make_agent()
    for _ in range(30):
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    text = show.dispatch("show queuing interface eth4", a.show_state())
    assert "eth4" in text and "270000" in text
    assert "eth1" in show.dispatch("show interface priority-flow-control", a.show_state())


def test_lldp_sent_on_every_port_by_the_timer():
    a = make_agent()
    a.next_lldp = 0.0
    a.timers(0.0)
    a.service(0.0)
    for p in a.ports.values():
        assert [f[12:14] for f in p.sock.sent] == [b"\x88\xcc"]


def test_lldp_frames_are_built_and_parsed_once(monkeypatch):
    from emucore.qos import dcbx
    from emucore.wire import lldp

    calls = {"build": 0, "parse": 0}
    real_build, real_parse = dcbx.build_lldp_frame, lldp.parse_lldp_frame

    def build(*a, **k):
        calls["build"] += 1
        return real_build(*a, **k)

    def parse(f):
        calls["parse"] += 1
        return real_parse(f)
    monkeypatch.setattr(dcbx, "build_lldp_frame", build)
    monkeypatch.setattr(lldp, "parse_lldp_frame", parse)
    a = make_agent(qos(mode="auto"))
    for t in (0.0, 1.0, 2.0):  # three advertisement periods: same bytes, built once per port
        a.next_lldp = t
        a.timers(t)
        a.service(t)
    sent = {n: [f for f in p.sock.sent if f[12:14] == b"\x88\xcc"] for n, p in a.ports.items()}
    assert calls["build"] == len(a.ports)
    assert all(len(fs) == 3 and len(set(fs)) == 1 for fs in sent.values())
    p1 = a.ports["eth1"]
    with_pfc = build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", QosConfig())
    without = build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", None)
    for t, f in enumerate([with_pfc, with_pfc, with_pfc, without, with_pfc]):
        a.on_frame(p1, f, float(t))
    assert calls["parse"] == 2                   # one per distinct LLDPDU
    assert p1.lldp_rx == 5 and p1.pfc_active == frozenset({3}) and p1.neighbor_seen == 4.0
