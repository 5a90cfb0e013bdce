"""Issue 14 faults without root: the schedule parser (table, bad tokens), its resolution
against rail2x4, the fabric's state and routes as links fail (reconvergence with the
agent's FIB as the fake), the reconvergence report, and the agent's link-down,
switch-down and degrade handling with in-memory ports."""

import pytest

import topologies
from emu.faults import reconverge as faultreport
from emu.faults.plan import FaultState, resolve
from emu.faults.schedule import Fault, parse_schedule
from switch_agent import kernel
from switch_agent.forward import FibRoute
from traffic.tools.rawgen import build_frame

from .fakes import mac
from .test_agent import H1, ROUTER, make_agent, run


@pytest.fixture(scope="module")
def fab():
    return topologies.load("rail2x4")


@pytest.mark.parametrize("text, kind, target, action, params, at", [
    ("1ms link rail1:eth5 down", "link", "rail1:eth5", "down", (), 1e-3),
    ("250us link rail1-spine1 up", "link", "rail1-spine1", "up", (), 250e-6),
    ("0 switch spine1 down", "switch", "spine1", "down", (), 0.0),
    ("2ms nic h1g1 up", "nic", "h1g1", "up", (), 2e-3),
    ("1ms link rail1-spine1 degrade rate=100G loss=1% delay=2us corrupt=0.001",
     "link", "rail1-spine1", "degrade",
     (("corrupt", 0.001), ("delay", 2e-6), ("loss", 0.01), ("rate", 100e9)), 1e-3),
    ("3ms link rail1-spine1 restore", "link", "rail1-spine1", "restore", (), 3e-3),
    ("1ms storm h1g1", "storm", "h1g1", "start", (), 1e-3),
    ("1ms storm h1g1 prio=4 for=5ms", "storm", "h1g1", "start",
     (("for", 5e-3), ("prio", 4)), 1e-3),
    ("9ms storm h1g1 stop", "storm", "h1g1", "stop", (), 9e-3),
    ("1ms pause h2g1 quanta=0x100", "pause", "h2g1", "once", (("quanta", 256),), 1e-3),
])
def test_parse_event(text, kind, target, action, params, at):
    (f,) = parse_schedule(text)
    assert (f.kind, f.target, f.action, f.params, f.text) == (kind, target, action, params, text)
    assert f.at_s == pytest.approx(at)


def test_defaults_and_order():
    fs = parse_schedule(["3ms link a:eth1 up; 1ms storm h1g1", "1ms pause h1g1"])
    assert [f.text for f in fs] == ["1ms storm h1g1", "1ms pause h1g1", "3ms link a:eth1 up"]
    assert fs[0].param("prio") == 3 and fs[0].param("for") is None
    assert fs[1].param("quanta") == 0xFFFF
    assert Fault(0.0, "link", "x", "degrade").param("loss") == 0.0


@pytest.mark.parametrize("text, token", [
    ("1ms link rail1:eth5", "needs an action"),
    ("soon link rail1:eth5 down", "'soon': not a time"),
    ("-1ms link rail1:eth5 down", "a time is >= 0"),
    ("1ms lnk rail1:eth5 down", "'lnk': a fault is one of"),
    ("1ms link rail1:eth5 sideways", "'sideways': link takes down, up, degrade, restore"),
    ("1ms link rail1:eth5 degrade", "degrade needs rate="),
    ("1ms link rail1:eth5 down rate=1G", "'rate=1G': link down takes none"),
    ("1ms link rail1:eth5 degrade jitter=1us", "'jitter=1us': link degrade takes rate,"),
    ("1ms link rail1:eth5 degrade loss=100%", "'loss=100%': loss: must be in"),
    ("1ms link rail1:eth5 degrade rate=fast", "'rate=fast'"),
    ("1ms storm h1g1 prio=8", "'prio=8': a priority is 0..7"),
    ("1ms storm h1g1 for=0", "'for=0': must be > 0"),
    ("1ms pause h1g1 quanta=70000", "'quanta=70000': quanta are 0..65535"),
    ("1ms switch", "expected TIME KIND TARGET"),
    ("1ms storm prio=3", "'prio=3': expected the storm's name"),
])
def test_bad_tokens_are_named(text, token):
    with pytest.raises(ValueError, match=None) as err:
        parse_schedule(text)
    assert token in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("1ms link rail1:eth9 down", "rail1 has no port 'eth9' (eth1, eth2, eth3, eth4, eth5, eth6)"),
    ("1ms link rail3:eth1 down", "no node 'rail3'"),
    ("1ms link rail1-rail2 down", "no link between rail1 and rail2"),
    ("1ms link rail1 down", "a link is node:port or nodeA-nodeB"),
    ("1ms link h1:fe0 down", "is a frontend link"),
    ("1ms switch h1 down", "no switch 'h1' (rail1, rail2, spine1, spine2)"),
    ("1ms nic h9g1 down", "no GPU 'h9g1'"),
    ("1ms storm rail1 start", "no GPU 'rail1'"),
])
def test_resolve_names_the_bad_target(fab, text, message):
    with pytest.raises(ValueError) as err:
        resolve(fab, parse_schedule(text))
    assert f"--fault {text!r}" in str(err.value) and message in str(err.value)


def test_resolve_links_switches_gpus(fab):
    steps = resolve(fab, parse_schedule(
        "1ms link rail1-spine1 down; 1ms link spine1:eth1 up; 1ms switch spine2 down;"
        " 1ms nic h2g1 down; 1ms storm h3g2"))
    assert steps[0].links == steps[1].links and steps[0].ends == (("rail1", "eth5"),
                                                                   ("spine1", "eth1"))
    assert sorted(steps[2].ends) == [("rail1", "eth6"), ("rail2", "eth6"),
                                     ("spine2", "eth1"), ("spine2", "eth2")]
    assert steps[3].ends == (("h2", "nic1"), ("rail1", "eth2")) and steps[3].gpu == "h2g1"
    assert steps[4].links == () and steps[4].gpu == "h3g2"


def hops(routes):
    return {r.dst: [h.dev for h in r.nexthops] for r in routes}


def test_routes_reconverge_and_recover(fab):
    """The FIBs the fault runner pushes: a rail switch keeps its other spine; the spine
    that lost rail1 reaches it through the other rail and spine (shortest path on what
    is left); all back after the link returns."""
    st = FaultState(fab)
    base = {sw: hops(r) for sw, r in st.routes().items()}
    assert base["rail1"] == {"10.0.2.0/24": ["eth5", "eth6"]}
    assert base["spine1"] == {"10.0.1.0/24": ["eth1"], "10.0.2.0/24": ["eth2"]}
    down, up = resolve(fab, parse_schedule("1ms link rail1-spine1 down; 2ms link rail1-spine1 up"))
    lost, back = st.apply(down)
    assert lost == set(down.links) and back == set()
    r = {sw: hops(x) for sw, x in st.routes().items()}
    assert r["rail1"] == {"10.0.2.0/24": ["eth6"]}
    assert r["rail2"] == {"10.0.1.0/24": ["eth6"]}
    assert r["spine1"] == {"10.0.1.0/24": ["eth2"], "10.0.2.0/24": ["eth2"]}
    assert sum(st.reach().values()) == 56
    assert st.apply(up) == (set(), set(down.links))
    assert {sw: hops(x) for sw, x in st.routes().items()} == base


def test_switch_down_and_link_faults_compose(fab):
    st = FaultState(fab)
    sw_down, link_down, sw_up, link_up = resolve(fab, parse_schedule(
        "1ms switch spine2 down; 2ms link rail1-spine1 down; 3ms switch spine2 up;"
        " 4ms link rail1-spine1 up"))
    assert len(st.apply(sw_down)[0]) == 2
    assert hops(st.routes()["rail1"]) == {"10.0.2.0/24": ["eth5"]}
    st.apply(link_down)
    assert hops(st.routes()["rail1"]) == {}  # rail1 is cut off from rail2
    m = st.reach()
    assert sum(m.values()) == 24 and m[("h1g1", "h2g1")] and not m[("h1g1", "h1g2")]
    lost, back = st.apply(sw_up)
    assert lost == set() and {(lk.a.node, lk.b.node) for lk in back} == {
        ("rail1", "spine2"), ("rail2", "spine2")}
    assert hops(st.routes()["rail1"]) == {"10.0.2.0/24": ["eth6"]}
    st.apply(link_up)
    assert st.failed() == frozenset()


def test_nic_down_reach_matrix(fab):
    st = FaultState(fab)
    (nic,) = resolve(fab, parse_schedule("1ms nic h1g1 down"))
    st.apply(nic)
    m = st.reach()
    assert sum(m.values()) == 56 - 14  # h1g1 neither sends nor receives
    assert not m[("h2g1", "h1g1")] and m[("h2g1", "h3g1")]


def test_reconvergence_rows():
    faults = [{"t": 1000.0, "ev": "fault", "text": "1ms link a down", "at": 100.0, "late": 0.5,
               "rel_us": 100.5},
              {"t": 1001.0, "ev": "fault", "text": "1ms link b down", "at": 100.0, "late": 1.5,
               "rel_us": 101.5},
              {"t": 2000.0, "ev": "fault", "text": "2ms link a up", "at": 1100.0, "late": 0.0,
               "rel_us": 1100.0}]
    agents = [{"t": 1003.0, "node": "rail1", "ev": "link", "port": "eth5", "state": "down"},
              {"t": 1004.0, "node": "rail1", "ev": "fib"},
              {"t": 1009.5, "node": "spine1", "ev": "fib"},
              {"t": 2002.0, "node": "rail1", "ev": "link", "port": "eth5", "state": "up"}]
    rows = faultreport.reconvergence(faults, agents)
    assert len(rows) == 2
    assert rows[0]["fault"] == "1ms link a down; 1ms link b down"
    assert (rows[0]["t_us"], rows[0]["late_us"], rows[0]["detect_us"], rows[0]["local_us"],
            rows[0]["converged_us"]) == (100.5, 1.5, 3.0, 4.0, 9.5)
    assert rows[0]["switches"] == ["rail1", "spine1"] and rows[0]["ports_down"] == ["rail1:eth5"]
    assert rows[1]["detect_us"] == 2.0 and rows[1]["local_us"] is None
    assert rows[1]["ports_up"] == ["rail1:eth5"]
    text = faultreport.table({"reconvergence": rows, "applied": [
        {"text": "5ms nic h1g1 down", "skipped": "the workload ended first"}]})
    assert "1ms link a down; 1ms link b down" in text and "skipped: the workload ended" in text


@pytest.mark.parametrize("flags, gateway, down", [
    (0, "172.16.1.1", False), (0x01, None, True), (0x01, "172.16.1.1", True),
    (0x10, "172.16.1.1", True), (0x10, None, False),  # connected route on a port-less SVI
])
def test_kernel_next_hop_down(flags, gateway, down):
    assert kernel._down(flags, gateway) is down


def cross_rail(sport=50000):
    return bytes(build_frame(mac(H1), mac(ROUTER), "10.0.1.11", "10.0.2.14", 1000, sport=sport))


def test_agent_link_down_drops_queue_and_fib_loses_next_hop(tmp_path):
    a = make_agent()
    for sport in range(50000, 50040):
        a.on_frame(a.ports["eth1"], cross_rail(sport), 0.0)
    queued = a.ports["eth5"].queues.packets + len(a.ports["eth5"].inflight)
    queued6 = a.ports["eth6"].queues.packets
    assert queued > 0 and queued + queued6 == 40
    a.link_states({"eth5": False, "eth6": True}, 0.0)
    assert a.ports["eth5"].queues.packets == 0 and not a.ports["eth5"].inflight
    assert a.ports["eth5"].counters(0.0)["drops"] == {"link_down": queued}
    a.install_fib([FibRoute("10.0.2.0/24", (("172.16.2.1", "eth6"),))],
                  {("eth6", "172.16.2.1"): "02:00:00:00:08:01"}, {"10.0.1.1"})
    sent6 = a.ports["eth6"].tx_packets
    for sport in range(51000, 51040):
        a.on_frame(a.ports["eth1"], cross_rail(sport), 1.0)
    run(a, 2.0, t0=1.0)
    assert a.ports["eth6"].tx_packets - sent6 == queued6 + 40  # the new flows all on eth6
    assert a.events[-1].startswith("eth5: link down")


def test_agent_switch_down_forwards_nothing_until_up():
    a = make_agent()
    for sport in range(50000, 50010):
        a.on_frame(a.ports["eth1"], cross_rail(sport), 0.0)
    assert a.set_admin(False, 0.0) == 10
    assert not a.backlog and a.admin_up is False
    assert a.set_admin(True, 1.0) == 0 and a.admin_up


def test_port_degrade_loss_rate_delay_and_restore():
    a = make_agent(rate=8e6, delay=0.001)
    p = a.ports["eth5"]
    p.degrade(4e6, 0.25, 0.25, 0.002, seed=7)
    assert p.shaper.rate_Bps == 0.5e6 and p.delay == pytest.approx(0.003)
    for sport in range(50000, 50400):
        a.on_frame(a.ports["eth1"], cross_rail(sport), 0.0)
    run(a, 5.0, step=0.001)
    d = p.counters(5.0)["drops"]
    n = p.tx_packets + d.get("degrade_loss", 0) + d.get("degrade_corrupt", 0)
    assert n == a.ports["eth5"].queues.counters()[0]["dequeued"] + sum(
        q["dequeued"] for q in a.ports["eth5"].queues.counters()[1:])
    assert 0.15 < d["degrade_loss"] / n < 0.35 and 0.15 < d["degrade_corrupt"] / n < 0.35
    p.restore()
    assert p.impair is None and p.delay == 0.001 and p.shaper.rate_Bps == 2 * 8e6 / 8


def test_compare_reach_names_every_pair_that_differs():
    from emu.faults.plan import compare_reach
    expected = {("a", "b"): True, ("b", "a"): True, ("a", "c"): False}
    got = {("a", "b"): True, ("b", "a"): False, ("a", "c"): True}
    r = compare_reach(expected, got)
    assert (r["pairs"], r["reachable"], r["predicted"], r["unexpected"]) == (3, 2, 2, 2)
    assert r["differ"] == ["a->c: replied, predicted unreachable",
                           "b->a: no reply, predicted reachable"]


def test_lab_faults_are_checked_and_resolved():
    from emu.lab.schema import variant_of
    base = {"topology": {"preset": "rail2x4"}, "tdf": 10000,
            "flows": [{"name": "f", "src": "h1g1", "dst": "h2g1", "size": "1MB"}]}
    v = variant_of("main", {**base, "faults": "100us link rail1-spine1 down"}, "t")
    assert [s.fault.text for s in v.faults] == ["100us link rail1-spine1 down"]
    assert variant_of("main", base, "t").faults == ()
    with pytest.raises(ValueError) as err:
        variant_of("x", {**base, "faults": ["1ms switch spine9 down"]}, "t")
    assert str(err.value).startswith("variants.x.faults '1ms switch spine9 down': no switch")
    with pytest.raises(ValueError) as err:
        variant_of("main", {**base, "faults": "1ms link"}, "t")
    assert str(err.value).startswith("faults: '1ms link'")


def test_flows_check_selects_by_name():
    from emu.lab.checks import Evidence, measure
    ev = Evidence([], flows={"a": {"status": "SUCCESS", "byte_exact": True},
                             "b": {"status": "RETRY_EXC_ERR", "byte_exact": False}})
    assert measure(ev, {"kind": "flows", "flows": {}}) == ("1/2", None)
    assert measure(ev, {"kind": "flows", "flows": {"names": ["a"]}}) == ("1/1", None)
    with pytest.raises(ValueError, match="no flow 'c'"):
        measure(ev, {"kind": "flows", "flows": {"names": ["c"]}})


def test_qp_failure_names_the_gpu_the_peer_and_the_cause(fab):
    from collectives.jobresult import qp_failure
    ok = {"qps": {"17": {"state": "RTS", "peer": {"remote_ip": "10.0.1.11"}, "error": None}}}
    bad = {"qps": {"4660": {"state": "ERR", "peer": {"remote_ip": "10.0.1.11"},
                            "error": "RETRY_EXC_ERR"}}}
    assert qp_failure(fab, {"h1g1": ok, "h4g2": None}) is None
    assert qp_failure(fab, {"h1g1": ok, "h4g2": bad}) == (
        "h4g2 QP 0x1234: RDMA WRITE to h1g1 (10.0.1.11) failed with RETRY_EXC_ERR - no ACK "
        "within the retry budget (transport retry counter exceeded): the peer or the path "
        "to it is gone")


def test_show_mac_address_table_per_vlan():
    from switch_agent import show
    a = make_agent()
    assert a.mac_table() == [{"vlan": 101, "mac": H1, "port": "eth1"},
                             {"vlan": 101, "mac": "02:00:00:00:02:01", "port": "eth2"}]
    text = show.dispatch("show mac address-table vlan 101", a.show_state())
    lines = text.splitlines()
    assert lines[3].split() == ["VLAN", "MAC", "Address", "Type", "age", "Secure", "NTFY", "Ports"]
    assert lines[5].split() == ["*", "101", "0200.0000.0101", "static", "-", "F", "F", "eth1"]
    assert lines[6].split()[2] == "0200.0000.0201" and lines[-1] == "Total MAC Addresses: 2"
    assert show.dispatch("show mac address-table vlan 102", a.show_state()).endswith(
        "Total MAC Addresses: 0\n")
    with pytest.raises(ValueError, match="expected 'vlan N'"):
        show.dispatch("show mac address-table eth1", a.show_state())


@pytest.mark.parametrize("src, dst, received, ttl, over", [
    ("h1g1", "h2g1", 2, 64, True),   # one rail: switched, TTL 64
    ("h1g1", "h2g2", 2, 61, True),   # rail -> spine -> rail
    ("h1g1", "h1g2", 2, 64, False),  # two NICs of one host, answered inside it
    ("h1g1", "h2g2", 0, None, False),
])
def test_a_reply_counts_only_when_it_crossed_the_fabric(fab, src, dst, received, ttl, over):
    from emu.observe.reach import PairResult, via_fabric
    assert via_fabric(fab, PairResult(src, dst, 2, received, ttl, 0.1)) is over


def test_share_is_the_fraction_of_variants_meeting_a_bound():
    from emu.lab.checks import share
    values = {"s1.done": 1000.0, "s2.done": 700.0, "s3.done": 950.0, "spray.done": 680.0,
              "s1.other": 5.0}
    assert share(values, {"check": "done", "variants": ["s1", "s2", "s3"], "where": ">= 928"}) \
        == pytest.approx(2 / 3)
    assert share(values, {"check": "done", "where": "< 928"}) == 0.5
    with pytest.raises(ValueError, match="no measured s4.done"):
        share(values, {"check": "done", "variants": ["s4"], "where": "> 0"})


def test_spraying_samples_one_packet_in_256_per_flow():
    from emucore.lbconfig import LoadBalance
    a = make_agent(lb=LoadBalance(mode="spray"))
    seen = []
    a.balancer.on_spray = lambda flow, port, n, now: seen.append((flow, port, n))
    for _ in range(600):
        a.on_frame(a.ports["eth1"], cross_rail(50000), 0.0)
    assert [n for _, _, n in seen] == [1, 257, 513]
    assert {f for f, _, _ in seen} == {"10.0.1.11:50000>10.0.2.14:9/udp"}
    assert [p for _, p, _ in seen] == ["eth5", "eth5", "eth5"]  # round-robin, even strides
