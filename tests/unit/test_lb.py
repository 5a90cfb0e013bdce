"""Load balancing (ch.12): the configuration, the pure flowlet / spray / DRE logic with a
fake clock, the agent's decisions on real frames, and the NX-OS DLB block (Example 12-1)."""

import math
import socket
from types import SimpleNamespace

import pytest

from emucore.lbconfig import DEFAULT_DLB_MAC, LoadBalance, Pin, parse_lb
from emucore.qos.qosconfig import QosConfig
from emucore.qos.nxos import parse_nxos
from emucore.qos.nxos_render import to_nxos
from switch_agent.forward import ecmp_index, flow_key
from switch_agent.balancer import Balancer, Dre, FlowLb, Group, Path, flow_label
from traffic.tools.rawgen import build_frame

from . import test_agent as agent_tests
from .fakes import mac

ROUTER = "02:00:00:00:05:00"
H1, H2 = "02:00:00:00:01:01", "02:00:00:00:02:01"
SPINE1, SPINE2 = "02:00:00:00:07:01", "02:00:00:00:08:01"


# -- configuration ---------------------------------------------------------------------
@pytest.mark.parametrize("data, field", [
    ({"mode": "adaptive"}, "lb.mode"),
    ({"hash": "7-tuple"}, "lb.hash"),
    ({"spray": "weighted"}, "lb.spray"),
    ({"estimator": "latency"}, "lb.estimator"),
    ({"order": "random"}, "lb.order"),
    ({"flowlet_gap": "0us"}, "lb.flowlet_gap"),
    ({"flowlet_gap": "soon"}, "lb.flowlet_gap"),
    ({"util_threshold": "high"}, "lb.util_threshold"),
    ({"queue_threshold": "lots"}, "lb.queue_threshold"),
    ({"dlb_mac": "00:cc"}, "lb.dlb_mac"),
    ({"pins": [{"src": "10.0.1.11", "dst": "10.0.2.14"}]}, "lb.pins"),
    ({"colour": "red"}, "lb.colour"),
])
def test_bad_fields_are_named(data, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        LoadBalance.from_dict(data, "lb")


def test_yaml_spellings_and_round_trip():
    lb = LoadBalance.from_dict({"mode": "flowlet", "flowlet_gap": "100us", "ewma_tau": "50us",
                                "queue_threshold": "300KB", "estimator": "queue",
                                "interfaces": "eth5, eth6",
                                "pins": [{"src": "10.0.1.11", "dst": "10.0.2.14", "port": "eth5"}]})
    assert (lb.flowlet_gap_s, lb.ewma_tau_s, lb.queue_threshold) == \
        (pytest.approx(100e-6), pytest.approx(50e-6), 300_000)
    assert lb.interfaces == ("eth5", "eth6")
    assert lb.pins == (Pin("10.0.1.11", "10.0.2.14", "eth5"),)
    assert LoadBalance.from_dict(lb.to_dict()) == lb
    assert lb.applies_to(["eth5", "eth6"]) and not lb.applies_to(["eth5", "eth7"])
    assert LoadBalance().applies_to(["anything"])


def test_command_line_form():
    assert parse_lb("spray") == LoadBalance(mode="spray")
    assert parse_lb("spray,spray=least-queue").spray == "least-queue"
    lb = parse_lb("flowlet,flowlet_gap=50us,util_threshold=0.5,interfaces=eth5+eth6")
    assert (lb.mode, lb.flowlet_gap_s, lb.util_threshold, lb.interfaces) == \
        ("flowlet", pytest.approx(50e-6), 0.5, ("eth5", "eth6"))
    assert parse_lb("hash=dst-ip", base=LoadBalance(mode="spray")) == \
        LoadBalance(mode="spray", hash="dst-ip")
    for bad, field in (("", "--lb"), ("sprinkle", "--lb.mode"), ("flowlet,gap", "--lb"),
                       ("ecmp,util_threshold=x", "--lb.util_threshold")):
        with pytest.raises(ValueError, match=f"^{field}"):
            parse_lb(bad)


def test_qos_config_carries_load_balance():
    q = QosConfig(load_balance=LoadBalance(mode="spray", dlb_mac=DEFAULT_DLB_MAC))
    assert QosConfig.from_dict(q.to_dict()) == q
    assert "load_balance" not in QosConfig().to_dict()


# -- hash fields -----------------------------------------------------------------------
def key(src="10.0.1.11", dst="10.0.2.14", sport=49152, dport=4791):
    return socket.inet_aton(src) + socket.inet_aton(dst) + bytes([17]) + \
        sport.to_bytes(2, "big") + dport.to_bytes(2, "big")


def test_hash_fields_decide_what_spreads():
    n = 4
    by = {f: {ecmp_index(key(src=f"10.0.1.{s}", sport=p), 7, n, f) for s in range(11, 30)
              for p in range(49152, 49200)} for f in ("5-tuple", "3-tuple", "dst-ip")}
    assert by["dst-ip"] == {ecmp_index(key(), 7, n, "dst-ip")}  # one member for one dst
    assert len(by["5-tuple"]) == n and len(by["3-tuple"]) == n
    # 3-tuple and no-sport ignore the source port; no-sport still sees the dst port
    assert {ecmp_index(key(sport=p), 7, n, "3-tuple") for p in range(49152, 49400)} == \
        {ecmp_index(key(), 7, n, "3-tuple")}
    assert {ecmp_index(key(sport=p), 7, n, "no-sport") for p in range(49152, 49400)} == \
        {ecmp_index(key(), 7, n, "no-sport")}
    assert len({ecmp_index(key(dport=p), 7, n, "no-sport") for p in range(1000, 1100)}) == n


def test_flow_label():
    assert flow_label(key()) == "10.0.1.11:49152>10.0.2.14:4791/udp"
    assert flow_label(key()[:9]) == "10.0.1.11>10.0.2.14/udp"


# -- DRE ---------------------------------------------------------------------------------
def test_dre_measures_rate_against_link_and_decays():
    d = Dre(1e6, 1e-3)  # 1 MB/s link, tau 1 ms
    t = 0.0
    for _ in range(20000):  # 1000 B every 1 ms = the link rate, for 20 tau
        t += 1e-3
        d.add(1000, t)
    assert d.util(t) == pytest.approx(1 / (1 - math.exp(-1)), rel=1e-6)  # sampled, just after
    assert d.util(t + 1e-3) == pytest.approx(d.util(t) * math.exp(-1), rel=1e-9)
    d2 = Dre(1e6, 1e-3)
    d2.add(500, 5.0)
    d2.add(500, 4.0)  # out of order: no negative decay
    assert d2.util(5.0) == pytest.approx(1000 / 1000)


# -- flowlet / spray with fake ports ------------------------------------------------------
def fake_port(name, queued=0):
    return SimpleNamespace(name=name, dre=None, queues=SimpleNamespace(bytes=queued))


def group(mode="flowlet", n=2, **kw):
    ports = [fake_port(f"eth{5 + i}") for i in range(n)]
    g = Group([(p, b"L2" + bytes([i])) for i, p in enumerate(ports)],
              LoadBalance(mode=mode, estimator="queue", queue_threshold=1000,
                          flowlet_gap_s=100e-6, **kw), tdf=10.0, seed=3)
    return g, ports


def test_flowlet_keeps_its_member_inside_a_flowlet_and_moves_when_over_threshold():
    g, ports = group()
    seen = []
    g.on_path = lambda flow, port, prev, load, now: seen.append((port, prev, round(load, 2), now))
    f = FlowLb(g, 0, "A")
    gap = 100e-6 * 10  # lab seconds at TDF 10
    assert f.pick(0.0).port is ports[0]
    ports[0].queues.bytes = 5000  # overloaded, but the flowlet goes on
    t = 0.0
    for _ in range(5):
        t += gap / 2
        assert f.pick(t).port is ports[0]
    t += gap * 1.01  # silence longer than the gap: a new flowlet, and eth5 is over
    assert f.pick(t).port is ports[1]
    assert (f.flowlets, f.moves) == (2, 1)
    ports[0].queues.bytes = 0  # eth6 under its threshold: later flowlets stay there
    t += gap * 2
    assert f.pick(t).port is ports[1]
    assert (f.flowlets, f.moves) == (3, 1)
    assert seen == [("eth5", "", 0.0, 0.0), ("eth6", "eth5", 0.0, pytest.approx(t - gap * 2)),
                    ("eth6", "eth6", 0.0, t)]


def test_flowlet_stays_when_every_member_is_as_loaded():
    g, ports = group()
    for p in ports:
        p.queues.bytes = 4000
    f = FlowLb(g, 1, "A")
    assert [f.pick(t).port.name for t in (0.0, 1.0, 2.0)] == ["eth6"] * 3
    assert f.moves == 0


def test_spray_policies():
    g, _ = group("spray", n=3)
    f = FlowLb(g, 0, "A")
    assert [f.pick(0).port.name for _ in range(7)] == ["eth5", "eth6", "eth7"] * 2 + ["eth5"]
    assert [p.packets for p in f.all_paths()] == [0, 0, 0]  # the agent counts

    g, ports = group("spray", n=3, spray="least-queue")
    ports[0].queues.bytes, ports[1].queues.bytes, ports[2].queues.bytes = 10, 5, 5
    f = FlowLb(g, 0, "A")
    assert [f.pick(0).port.name for _ in range(4)] == ["eth6", "eth7", "eth6", "eth7"]

    g, _ = group("spray", n=3, spray="random")
    f = FlowLb(g, 0, "A")
    names = [f.pick(0).port.name for _ in range(300)]
    g2, _ = group("spray", n=3, spray="random")
    f2 = FlowLb(g2, 0, "A")
    assert names == [f2.pick(0).port.name for _ in range(300)]  # seeded
    assert all(80 <= names.count(p) <= 120 for p in ("eth5", "eth6", "eth7"))


def nh(ifname, dst):
    return SimpleNamespace(ifname=ifname, dst_mac=mac(dst), src_mac=mac(ROUTER),
                           header=mac(dst) + mac(ROUTER))


def test_balancer_pins_groups_and_accounting():
    ports = {n: fake_port(n) for n in ("eth1", "eth5", "eth6")}
    members = [nh("eth5", SPINE1), nh("eth6", SPINE2)]
    b = Balancer(LoadBalance(pins=(Pin("10.0.1.11", "10.0.2.14", "eth6"),)), ports, 10.0)
    p = b.decide(members, key(), 0).path
    assert isinstance(p, Path) and p.port.name == "eth6" and p.l2 == mac(SPINE2) + mac(ROUTER) + b"\x08\x00"
    assert b.decide(members, key(src="10.0.1.12"), 0).path.port.name == "eth5"  # not pinned
    single = b.decide(members[:1], key(), 0).path
    assert single.port.name == "eth5" and single not in b.tracked  # no choice: not tracked
    p.packets, p.bytes = 3, 300
    again = b.decide(members, key(), 0).path  # the same flow after a FIB change
    again.packets, again.bytes = 1, 100
    assert b.paths() == [{"flow": "10.0.1.11:49152>10.0.2.14:4791/udp", "port": "eth6",
                          "packets": 4, "bytes": 400}]
    # spray outside the DLB interfaces is ECMP; inside, a FlowLb rewriting to the DLB MAC
    b = Balancer(LoadBalance(mode="spray", interfaces=("eth5", "eth6"), dlb_mac=DEFAULT_DLB_MAC),
                 ports, 10.0)
    assert isinstance(b.decide([nh("eth1", H1), nh("eth5", SPINE1)], key(), 1).path, Path)
    f = b.decide(members, key(), 0).balanced
    assert isinstance(f, FlowLb)
    assert {f.pick(0).l2 for _ in range(2)} == {mac(DEFAULT_DLB_MAC) + mac(ROUTER) + b"\x08\x00"}


# -- the agent -----------------------------------------------------------------------------
def make_agent(lb=None, dlb_macs=()):
    return agent_tests.make_agent(lb=lb, dlb_macs=dlb_macs)


def drain(a, until=0.05):
    t = 0.0
    while t <= until:
        a.service(t)
        t += 0.0005


def frame(sport=49152, dst="10.0.2.14", to=ROUTER, size=1000):
    return bytes(build_frame(mac(H1), mac(to), "10.0.1.11", dst, size, sport=sport, dport=4791))


def test_agent_sprays_one_flow_over_both_uplinks_and_accounts_per_port():
    a = make_agent(LoadBalance(mode="spray"))
    for _ in range(10):
        a.on_frame(a.ports["eth1"], frame(), 0.0)
    drain(a)
    assert (a.ports["eth5"].tx_packets, a.ports["eth6"].tx_packets) == (5, 5)
    flow = "10.0.1.11:49152>10.0.2.14:4791/udp"
    assert sorted(a.balancer.paths(), key=lambda r: r["port"]) == [
        {"flow": flow, "port": "eth5", "packets": 5, "bytes": 5000},
        {"flow": flow, "port": "eth6", "packets": 5, "bytes": 5000}]


def test_agent_ecmp_hash_fields_dst_ip_polarizes():
    a = make_agent(LoadBalance(hash="dst-ip"))
    for sport in range(49152, 49252):
        a.on_frame(a.ports["eth1"], frame(sport), 0.0)
    drain(a)
    n = (a.ports["eth5"].tx_packets, a.ports["eth6"].tx_packets)
    assert sorted(n) == [0, 100]
    assert len(a.balancer.paths()) == 100  # 100 flows, each one port


def test_agent_flowlet_moves_new_flowlets_off_a_full_uplink():
    a = make_agent(LoadBalance(mode="flowlet", estimator="queue", queue_threshold=5000,
                               flowlet_gap_s=100e-6, pins=(Pin("10.0.1.11", "10.0.2.14", "eth5"),)))
    for _ in range(8):  # one flowlet of 8 frames, no service: eth5 holds 8000 B queued
        a.on_frame(a.ports["eth1"], frame(), 0.0)
    gap = 100e-6 * 1000
    a.on_frame(a.ports["eth1"], frame(), gap * 1.5)  # a new flowlet: eth5 over 5000 B
    drain(a, gap * 2 + 0.05)
    assert (a.ports["eth5"].tx_packets, a.ports["eth6"].tx_packets) == (8, 1)
    f = a.balancer.flows[0]
    assert (f.flowlets, f.moves) == (2, 1)


def test_agent_dlb_mac_rewritten_and_accepted():
    a = make_agent(LoadBalance(mode="spray", dlb_mac=DEFAULT_DLB_MAC))
    a.on_frame(a.ports["eth1"], frame(), 0.0)
    drain(a)
    sent = a.ports["eth5"].sock.sent + a.ports["eth6"].sock.sent
    assert [f[:12] for f in sent] == [mac(DEFAULT_DLB_MAC) + mac("02:00:00:00:05:05")]
    # a switch told to accept the DLB MAC routes frames sent to it
    b = make_agent(dlb_macs=(DEFAULT_DLB_MAC,))
    b.on_frame(b.ports["eth1"], frame(to=DEFAULT_DLB_MAC), 0.0)
    drain(b)
    assert b.ports["eth5"].tx_packets + b.ports["eth6"].tx_packets == 1
    c = make_agent()  # one that is not: not routed
    c.on_frame(c.ports["eth1"], frame(to=DEFAULT_DLB_MAC), 0.0)
    drain(c)
    assert c.ports["eth5"].tx_packets + c.ports["eth6"].tx_packets == 0


def test_agent_ecmp_member_is_the_fib_hash_of_the_flow_key():
    a = make_agent()
    for sport in range(49152, 49200):
        f = frame(sport)
        want = ["eth5", "eth6"][ecmp_index(flow_key(f), 3, 2)]
        a.on_frame(a.ports["eth1"], f, 0.0)
        got = a.flowcache.fast[17][f[26:38]].path
        assert got.port.name == want


# -- NX-OS (Example 12-1) ----------------------------------------------------------------------
BOOK_12_1 = """switch(config)# hardware profile dlb switch(config-dlb)# dlb-  
interface Eth1/1 switch(config-dlb)# dlb-interface Eth1/2  
switch(config-dlb)# mac-address aa:bb:cc:dd:ee:ff switch(config-  
dlb)# mode per-packet
"""


def test_book_example_12_1_as_printed():
    cfg = parse_nxos(BOOK_12_1)
    assert cfg.load_balance == LoadBalance(mode="spray", interfaces=("eth1", "eth2"),
                                           dlb_mac="aa:bb:cc:dd:ee:ff")
    assert parse_nxos(to_nxos(cfg)).load_balance == cfg.load_balance


def test_dlb_defaults_and_errors():
    cfg = parse_nxos("hardware profile dlb\n dlb-interface ethernet1/5-6\n")
    assert cfg.load_balance == LoadBalance(mode="flowlet", interfaces=("eth5", "eth6"),
                                           dlb_mac=DEFAULT_DLB_MAC)
    for text, why in (("hardware profile dlb\n mode per-flow\n", "per-packet or flowlet"),
                      ("mode per-packet\n", "outside 'hardware profile dlb'"),
                      ("hardware profile dlb\n mac-address 00:cc\n", "not a MAC address")):
        with pytest.raises(ValueError, match=why):
            parse_nxos(text)
    notes: list[str] = []
    parse_nxos("hardware profile dlb\n mode per-packet\n", warnings=notes)
    assert any("no dlb-interface" in n for n in notes)


# -- where a run's settings come from (emu.realise.lbplan) -------------------------------------------
def test_topology_lb_then_command_line_then_pins():
    import topologies
    from emu.realise import lbplan

    fab = topologies.from_dict({"kind": "rail", "lb": ["rail=flowlet", "spine=ecmp,hash=dst-ip"]})
    assert fab.to_dict()["lb"] == ["rail=flowlet", "spine=ecmp,hash=dst-ip"]
    qos = QosConfig(load_balance=LoadBalance(mode="spray", spray="random"))
    lbs = lbplan.resolve(fab, qos, ["rail1=spray", "util_threshold=0.5"])
    assert {n: (lb.mode, lb.spray, lb.hash, lb.util_threshold) for n, lb in lbs.items()} == {
        "rail1": ("spray", "random", "5-tuple", 0.5),
        "rail2": ("flowlet", "random", "5-tuple", 0.5),
        "spine1": ("ecmp", "random", "dst-ip", 0.5),
        "spine2": ("ecmp", "random", "dst-ip", 0.5)}
    lbplan.pin_via(fab, lbs, "h1g1", "h3g2", "spine2")
    assert lbs["rail1"].pins == (Pin("10.0.1.11", "10.0.2.13", "eth6"),)
    assert lbplan.dlb_macs({"a": LoadBalance(dlb_mac="00:cc:cc:cc:cc:cc"), "b": LoadBalance()}) == \
        ("00:cc:cc:cc:cc:cc",)


@pytest.mark.parametrize("topo, specs, msg", [
    ({"lb": 3}, [], "lb: a spec or a list"),
    ({"lb": ["rail=zig"]}, [], r"lb\[0\]\.mode"),
    ({"lb": ["rail9=spray"]}, [], "topology lb\\[0\\]: 'rail9' is neither a switch"),
    ({}, ["superspine=spray"], "--lb: 'superspine' is neither"),
    ({}, ["rail1=spray,interfaces=eth9"], "--lb: interface 'eth9' is not a port of rail1"),
])
def test_lb_errors_name_the_entry(topo, specs, msg):
    import topologies
    from emu.realise import lbplan

    with pytest.raises(ValueError, match=msg):
        lbplan.resolve(topologies.from_dict({"kind": "rail", **topo}), None, specs)


def test_via_needs_a_neighbour_of_the_first_switch():
    import topologies
    from emu.realise import lbplan

    fab = topologies.load("rail2x4")
    lbs = lbplan.resolve(fab, None)
    with pytest.raises(ValueError, match="rail1 .* has no link to 'rail2'"):
        lbplan.pin_via(fab, lbs, "h1g1", "h3g2", "rail2", "flows[0].via")
