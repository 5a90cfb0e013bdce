"""Packet trimming (issue 16, emucore.qos.trim): the decision table, the YAML form, and
the agent cutting UET frames on a congested egress - DSCP rewritten (the last hop's own
code point at a host-facing port), checksums valid, the header on its own queue (6)."""

import pytest

from emucore.qos.qosconfig import QosConfig
from emucore.qos.trim import Trim
from emucore.wire.uet_codec import SesReq, UetTemplate
from emucore.wire.uet_codec import parse as uet_parse
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig, PortConfig
from switch_agent.forward import FibRoute
from traffic.tools.rawgen import build_frame

from .fakes import FakeSock, mac
from .test_agent import H1, H2, ROUTER, SPINE1, SPINE2, run


@pytest.mark.parametrize("tos,depth,n,last,want", [
    (24 << 2 | 2, 0, 4000, False, None),           # an empty queue: never
    (24 << 2 | 2, 6000, 4000, False, None),        # 10,000 = the threshold: still fits
    (24 << 2 | 2, 6001, 4000, False, 11),          # one byte over: trimmed
    (24 << 2 | 3, 6001, 4000, True, 12),           # CE-marked too, at the last hop
    (26 << 2 | 2, 99999, 4000, False, None),       # not a trimmable DSCP
    (48 << 2, 99999, 100, False, None),            # CNPs / ACKs: never
])
def test_decision_table(tos, depth, n, last, want):
    assert Trim(threshold_bytes=10_000).dscp_for(tos, depth, n, last) == want


def test_yaml_form_round_trips_and_names_bad_fields():
    t = Trim.from_dict({"dscps": [24, 26], "threshold": "50KB", "keep": 128})
    assert (t.dscps, t.threshold_bytes, t.keep) == ((24, 26), 50_000, 128)
    assert Trim.from_dict(t.to_dict()) == t and Trim.from_dict(True) == Trim()
    q = QosConfig.from_dict({"trim": {"threshold": "20KB"}})
    assert q.trim.threshold_bytes == 20_000 and QosConfig.from_dict(q.to_dict()) == q
    assert QosConfig.from_dict({}).trim is None
    for bad, field in (({"depth": 1}, "trim.depth"), ({"threshold": "x"}, "trim.threshold"),
                       ({"dscps": [64]}, "trim.dscps"), ({"queue": 8}, "trim.queue"),
                       ({"trimmed_dscp": 24}, "trimmed_dscp"), ({"lasthop_dscp": 11}, "lasthop")):
        with pytest.raises(ValueError, match=field):
            QosConfig.from_dict({"trim": bad})


def make_agent(threshold=10_000):
    """rail1 with the book's QoS plus trimming; eth1/eth2 face hosts (the last hop)."""
    return qos_agent(QosConfig(trim=Trim(threshold_bytes=threshold)))


def qos_agent(qos, uplink_rate=200e6):
    """rail1 of rail2x4 at TDF 1000 with `qos`, in-memory ports: eth1/eth2 face h1/h2
    (edge ports, VLAN 101), eth5/eth6 the spines; 10.0.2.0/24 routed via eth5 only."""
    rate = 200e6
    ports = (PortConfig("eth1", ROUTER, 200e9, rate, 0.0, 101, "h1:nic1", True),
             PortConfig("eth2", ROUTER, 200e9, rate, 0.0, 101, "h2:nic1", True),
             PortConfig("eth5", "02:00:00:00:05:05", 400e9, uplink_rate, 0.0, None, "spine1:eth1"),
             PortConfig("eth6", "02:00:00:00:05:06", 400e9, uplink_rate, 0.0, None, "spine2:eth1"))
    cfg = AgentConfig("rail1", 1000.0, "/nonexistent", ports,
                      svi={"vlan101": {H1: "eth1", H2: "eth2"}}, ecmp_seed=3,
                      qos=qos.to_dict())
    a = Agent(AgentConfig.from_json(cfg.to_json()), open_sockets=False)
    for p in a.ports.values():
        p.sock = FakeSock()
    a.install_fib([FibRoute("10.0.1.0/24", ((None, "vlan101"),)),
                   FibRoute("10.0.2.0/24", (("172.16.1.1", "eth5"),))],
                  {("vlan101", "10.0.1.11"): H1, ("vlan101", "10.0.1.12"): H2,
                   ("eth5", "172.16.1.1"): SPINE1, ("eth6", "172.16.2.1"): SPINE2},
                  {"10.0.1.1", "172.16.1.0", "172.16.2.0"})
    return a


def uet_frames(dst_mac, dst_ip, n, size=4000):
    t = UetTemplate(mac(H1), dst_mac, "10.0.1.11", dst_ip)
    ses = SesReq(1, 0, 1, 0, 0, 2, 0, 0x10, size * n)
    return [t.request(50000 + i, 100 + i, 7, 9, 0, ses, bytes([i]) * size) for i in range(n)]


@pytest.mark.parametrize("dst_mac,dst_ip,port,dscp", [
    (ROUTER, "10.0.2.14", "eth5", 11),   # routed to the spine: trimmed mid-path
    (H2, "10.0.1.12", "eth2", 12),       # switched to h2: trimmed at the last hop
])
def test_a_congested_egress_trims_uet_frames_and_sends_the_headers_first(dst_mac, dst_ip,
                                                                          port, dscp):
    a = make_agent()
    frames = uet_frames(mac(dst_mac), dst_ip, 4)
    for f in frames:  # all at once: two fit under 10 KB, the next two are cut
        a.on_frame(a.ports["eth1"], f, 0.0)
    out = a.ports[port]
    full, hdr = 14 + 20 + 8 + 12 + 44 + 4000, 14 + 20 + 8 + 64  # 4098, 106
    assert (out.trimmed, out.trimmed_bytes) == (2, 2 * (full - hdr))
    assert (out.queues.qbytes[3], out.queues.qbytes[6]) == (2 * full, 2 * hdr)
    assert out.counters(0.0)["trimmed"] == 2
    run(a, 0.01)
    sent = out.sock.sent
    assert [len(f) for f in sent] == [hdr, hdr, full, full]  # the trimmed class first
    cut = [uet_parse(f, verify_csum=True) for f in sent[:2]]
    assert all(c.csum_ok and c.dscp == dscp and c.ecn == 2 for c in cut)
    assert [c.psn for c in cut] == [102, 103] and all(len(c.payload) == 8 for c in cut)
    assert [uet_parse(f).payload.tobytes() for f in sent[2:]] == [bytes([0]) * 4000,
                                                                  bytes([1]) * 4000]


def test_other_traffic_of_the_dscp_and_trimmed_headers_are_never_cut():
    a = make_agent(threshold=100)
    roce = bytes(build_frame(mac(H1), mac(H2), "10.0.1.11", "10.0.1.12", 3000, dscp=24))
    for _ in range(3):
        a.on_frame(a.ports["eth1"], roce, 0.0)  # UDP, DSCP 24, not UET: queued whole
    assert a.ports["eth2"].trimmed == 0 and a.ports["eth2"].queues.qbytes[3] == 3 * 3000
    [f] = uet_frames(mac(H2), "10.0.1.12", 1)
    a.on_frame(a.ports["eth1"], f, 0.0)
    assert a.ports["eth2"].trimmed == 1
    cut = a.ports["eth2"].queues.fifo[6][0][1]
    b = make_agent(threshold=100)
    for _ in range(3):  # already trimmed (DSCP 12): on queue 6 at every switch, never cut
        b.on_frame(b.ports["eth1"], cut, 0.0)
    assert b.ports["eth2"].trimmed == 0 and b.ports["eth2"].queues.qbytes[6] == 3 * len(cut)


# -- how a run and a lab ask for UET and trimming ------------------------------------------
def plan_of(*argv):
    import topologies
    from emu.cli import build_parser
    from emu.commands.run import run_options
    from emu.run.plan import make_plan

    args = build_parser().parse_args(["run", "rail2x4", "--workload", "write", *argv])
    return make_plan(run_options(args), topologies.load("rail2x4"))


def test_emu_run_transport_uet_and_trim_reach_the_nics_and_switches():
    p = plan_of("--transport", "uet", "--uet", "ev=reps,ack_every=2", "--trim", "threshold=50KB")
    assert p.qos.trim == Trim(threshold_bytes=50_000)
    assert p.workload["nic"] == {"transport": "uet", "trimmed_dscps": (11, 12),
                                 "uet": {"ev": "reps", "ack_every": 2, "trimming": True}}
    assert plan_of().workload["nic"] == {} and plan_of().qos.trim is None
    for argv, match in ((["--trim", "--qos", "off"], "--trim: .*not with --qos off"),
                        (["--uet", "ev=reps"], "--uet: UET knobs need --transport uet"),
                        (["--transport", "uet", "--uet", "ev=sideways"], "--uet: ev"),
                        (["--transport", "uet", "--uet", "speed"], "--uet: expected KEY=VALUE"),
                        (["--trim", "keep=x"], "--trim.keep")):
        with pytest.raises(ValueError, match=match):
            plan_of(*argv)


def test_a_lab_variant_runs_over_uet_with_the_switches_trim():
    from emu.lab import schema as S
    from tests.unit.test_lab_schema import BASE

    d = {**BASE, "qos_overrides": {"trim": {"threshold": "30KB"}},
         "nic": {"transport": "uet", "uet": {"mode": "rod"}}}
    [v] = S.parse(d).variants
    assert v.qos.trim.threshold_bytes == 30_000
    assert v.nic == {"transport": "uet", "uet": {"mode": "rod", "trimming": True},
                     "trimmed_dscps": (11, 12)}
    for nic, match in (({"transport": "tcp"}, "nic.transport"), ({"uet": {}}, "nic.transport"),
                       ({"transport": "uet", "uet": {"mode": "x"}}, "nic.uet: mode")):
        with pytest.raises(ValueError, match=match):
            S.parse({**BASE, "nic": nic})
