"""emu.lab.flowkeys: source ports that the switch agent's real ECMP hash puts on a chosen
spine (L10.4 variant (a)), the QPNs that give them, and a lab flow's `sport` field.

The agent's side is taken independently of flowkeys' own lookup: a RoCEv2 frame as the
NIC builds it (emucore.wire.templates, source port udp_sport(QPNs)) resolved by a
switch_agent.forward.Fib made as the agent makes it (routes, neighbours, port MACs)."""

import copy

import pytest

import topologies
from emu.lab import flowkeys as fk
from emu.lab import schema as S
from emucore.wire.ib import Op
from emucore.wire.roce import udp_sport
from emucore.wire.templates import FrameTemplate
from switch_agent.forward import Fib, FibRoute, flow_key


def agent_peer(fab, src, dst, qpns):
    """Where the source GPU's rail switch sends a WRITE of the QP pair `qpns`, as the agent
    decides it: the NIC's frame, the agent's flow key, Fib.resolve."""
    g, d = fab.gpus[src], fab.gpus[dst]
    sw = fk.first_switch(fab, src)
    frame = FrameTemplate(g.mac, g.gateway_mac, g.ip, d.ip, udp_sport(*qpns), qpns[1]).build(
        Op.WRITE_ONLY, 0, reth=(0, 1, 0))
    fib = Fib([FibRoute(r.prefix, r.nexthops) for r in fab.routes(sw)],
              {(dev, ip): mac for dev, ip, mac in fab.neighbours(sw)},
              {p.ifname: p.mac for p in fab.node_ports(sw)}, fab.nodes[sw].ecmp_seed)
    nh = fib.resolve(frame[30:34], flow_key(frame))
    return fab.peer(sw, nh.ifname).node


@pytest.fixture(scope="module")
def polar():
    return topologies.load("polar2x4")


def test_the_key_is_the_agents_key_of_the_nics_frame(polar):
    g, d = polar.gpus["h1g1"], polar.gpus["h3g2"]
    frame = FrameTemplate(g.mac, g.gateway_mac, g.ip, d.ip, 0xC123, 0x101).build(Op.ACK, 7)
    assert fk.key_of(g.ip, d.ip, 0xC123) == flow_key(frame)


@pytest.mark.parametrize("via", ["spine1", "spine2"])
def test_chosen_ports_hash_onto_the_chosen_spine(polar, via):
    for src, dst in (("h1g1", "h3g2"), ("h2g1", "h4g2"), ("h3g1", "h1g2")):
        ports = fk.sports_onto(polar, src, dst, via, count=8)
        assert len(set(ports)) == 8 and all(p in fk.SPORTS for p in ports)
        taken: set[int] = set()
        for p in ports:
            qpns = fk.qpns_for(p, taken)
            taken.update(qpns)
            assert udp_sport(*qpns) == p
            assert agent_peer(polar, src, dst, qpns) == via


def test_a_key_set_chosen_for_spread_spreads(polar):
    ones = fk.sports_onto(polar, "h1g1", "h3g2", "spine1", count=4)
    twos = fk.sports_onto(polar, "h1g1", "h3g2", "spine2", count=4)
    taken: set[int] = set()
    got = []
    for p in ones + twos:
        qpns = fk.qpns_for(p, taken)
        taken.update(qpns)
        got.append(agent_peer(polar, "h1g1", "h3g2", qpns))
    assert got == ["spine1"] * 4 + ["spine2"] * 4


def test_the_search_is_the_first_ports_in_order(polar):
    s, d = polar.gpus["h2g1"].ip, polar.gpus["h4g2"].ip
    ports = fk.sports_onto(polar, "h2g1", "h4g2", "spine1", count=3)
    upto = range(fk.SPORTS.start, ports[-1] + 1)
    assert ports == [p for p in upto if fk.peer_of(polar, "rail1", s, d, p) == "spine1"]
    with pytest.raises(ValueError, match=r"rail1 hashes only 0 source ports of h2g1 -> h4g2"):
        fk.sports_onto(polar, "h2g1", "h4g2", "spine3")
    assert fk.peer_of(polar, "rail1", s, polar.gpus["h1g1"].ip, 0xC000) is None  # its own rail


def test_qpns_for_gives_the_port_and_avoids_taken_ones():
    for sport in (0xC000, 0xC003, 0xE5A5, 0xFFFF):
        sq, rq = fk.qpns_for(sport)
        assert udp_sport(sq, rq) == sport and rq == fk.QPN_BASE + 1 and sq != rq
        sq2, rq2 = fk.qpns_for(sport, {sq, rq})
        assert udp_sport(sq2, rq2) == sport and not {sq2, rq2} & {sq, rq}
    for bad in (0xBFFF, 0x10000, "0xC000"):
        with pytest.raises(ValueError, match="sport: a RoCEv2 source port 49152..65535"):
            fk.qpns_for(bad)


def test_lab_l10_4_polarizes_by_its_keys_not_by_pins():
    lab = S.load("L10.4")
    want = {"polarized": ["spine1", "spine1"], "balanced": ["spine1", "spine2"]}
    for v in lab.variants:
        assert not any(lb.pins for lb in v.lb.values()), v.name  # no `via:` pin
        if v.name in want:
            assert [agent_peer(v.fabric, f.src, f.dst, f.qpns) for f in v.flows] == want[v.name]
            assert all(lb.mode == "ecmp" and lb.hash == "5-tuple" for lb in v.lb.values())


BASE = {"id": "T1", "title": "t", "topology": {"preset": "rail2x4"}, "dcqcn": "off",
        "flows": [{"name": "a", "src": "h1g1", "dst": "h3g2", "size": "1MB", "sport": 0xC003},
                  {"name": "b", "src": "h2g1", "dst": "h4g2", "size": "1MB", "sport": 0xC003}],
        "checks": [{"name": "c", "flows": {}, "expect": "all",
                    "source": "spec: IBTA RoCEv2, RC transport - every byte delivered"}]}


def test_a_flows_sport_pins_distinct_qpns_that_give_it():
    [v] = S.parse(copy.deepcopy(BASE)).variants
    a, b = v.flows
    assert udp_sport(*a.qpns) == udp_sport(*b.qpns) == 0xC003
    assert len(set(a.qpns + b.qpns)) == 4


@pytest.mark.parametrize("extra,match", [
    ({"sport": 4791}, r"flows\[1\]\.sport: a RoCEv2 UDP source port 49152..65535"),
    ({"sport": True}, r"flows\[1\]\.sport: a RoCEv2 UDP source port"),
    ({"sport": "0xC000"}, r"flows\[1\]\.sport: a RoCEv2 UDP source port"),
    ({"qps": 2}, r"flows\[1\]\.sport: one source port is one QP's flow: qps must be 1, got 2"),
    ({"via": "spine1"}, r"flows\[1\]\.via: given with sport"),
])
def test_a_bad_sport_is_named(extra, match):
    d = copy.deepcopy(BASE)
    d["flows"][1].update(extra)
    with pytest.raises(ValueError, match=match):
        S.parse(d)
