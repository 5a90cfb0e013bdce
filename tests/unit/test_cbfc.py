"""Credit-based flow control, modelled (issue 16, emucore.qos.cbfc): the credit update's
bytes, the credit state, the LLDP negotiation that replaces PFC on switch links only,
and two agents' ports stopping on exhausted credits and resuming on returned ones."""

import pytest
from scapy.layers.l2 import Ether

from emucore.qos.cbfc import Cbfc, CreditState
from emucore.qos import dcbx
from emucore.qos.qosconfig import QosConfig
from emucore.wire.credit import CbfcUpdate, build_credit_frame, parse_credit
from switch_agent.dcbx import Dcbx
from traffic.tools.rawgen import build_frame

from .fakes import mac
from .test_agent import H1, ROUTER, run
from .test_trim import qos_agent

SRC = bytes.fromhex("020000000505")


def test_the_credit_update_is_scapys_and_parses_back():
    f = build_credit_frame(SRC, 3, 65536)
    ref = bytes(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:05:05")
                / CbfcUpdate(vc=3, credits=65536))
    assert f == ref + bytes(60 - len(ref)) and len(f) == 60
    assert f[12:23] == bytes.fromhex("88b5" "55454342" "03" "00010000")
    assert parse_credit(f) == (3, 65536)
    assert parse_credit(f[:20]) is None and parse_credit(f[:14] + b"XXXX" + f[18:]) is None
    with pytest.raises(ValueError, match="vc"):
        build_credit_frame(SRC, 8, 1)


def test_credit_state_stops_below_one_frame_and_returns_in_steps():
    c = CreditState(frozenset({3}), 20_000, 8_000, 4096)
    assert [c.consume(3, 4000) for _ in range(4)] == [False, False, False, True]
    assert c.credits[3] == 4000 and c.blocked == 1 << 3 and c.blocks == 1
    assert not c.consume(0, 9999) and c.credits[0] == 0  # not a lossless channel
    assert c.grant(3, 100) is True and c.blocked == 0  # 4100 >= one frame
    assert [c.freed(3, 3000) for _ in range(3)] == [0, 0, 9000] and c.updates_tx == 1


def test_lldp_puts_cbfc_in_place_of_pfc_between_switches_only():
    q = QosConfig(cbfc=Cbfc(credits_bytes=500_000, update_bytes=16_384))
    a = qos_agent(q)
    d = Dcbx("rail1", q, len(a.ports))
    spine = dcbx.build_lldp_frame("02:00:00:00:07:01", "02:00:00:00:07:01", "eth1", "spine1", q)
    host = dcbx.build_lldp_frame("02:00:00:00:01:01", "02:00:00:00:01:01", "nic1", "h1", q,
                                 cbfc_capable=False)
    up, down = a.ports["eth5"], a.ports["eth1"]
    assert "CBFC on priorities [3]" in d.receive(up, spine, 0.0)
    assert "PFC active on priorities [3]" in d.receive(down, host, 0.0)
    # nothing to send with until the spine's grant; the spine is granted our buffer
    assert up.cbfc.credits[3] == 0 and up.cbfc.blocked == 1 << 3 and not up.pfc_active
    assert [parse_credit(f) for _d, f, _ in up.ctrl if f[12:14] == b"\x88\xb5"] == [(3, 500_000)]
    assert down.cbfc is None and down.pfc_active == frozenset({3})
    assert up.counters(0.0)["cbfc"]["vcs"] == [3] and down.counters(0.0)["cbfc"] is None


def test_link_start_neither_side_spends_credits_the_other_does_not_count():
    q = QosConfig(cbfc=Cbfc(credits_bytes=500_000, update_bytes=16_384))
    a = qos_agent(q, uplink_rate=400e6)
    up = a.ports["eth5"]
    spine_mac = bytes.fromhex("020000000701")
    # the spine agreed first: its initial grant arrives before its LLDPDU is read here
    a.mac_control.on_frame(up, build_credit_frame(spine_mac, 3, 300_000), 0.0)
    assert up.cbfc is None and up.counters(0.0)["drops"] == {}
    up.ingress.held[3] = 120_000   # the spine's frames we still hold, admitted under PFC
    spine = dcbx.build_lldp_frame("02:00:00:00:07:01", "02:00:00:00:07:01", "eth1", "spine1", q)
    a.mac_control.on_frame(up, spine, 0.0)
    assert up.cbfc.credits[3] == 300_000 and not up.cbfc.blocked   # the early grant, applied
    grants = [parse_credit(f) for _d, f, _ in up.ctrl if f[12:14] == b"\x88\xb5"]
    assert grants == [(3, 380_000)] and up.ingress.held[3] == 0   # buffer less what we hold
    a.buffers.release(up, 3, 120_000, 0.0)   # those frames leave: their credits go back
    grants = [parse_credit(f) for _d, f, _ in up.ctrl if f[12:14] == b"\x88\xb5"]
    assert sum(n for _vc, n in grants) == 500_000


def test_a_port_out_of_credits_stops_and_returned_credits_restart_it():
    q = QosConfig(cbfc=Cbfc(credits_bytes=20_000, update_bytes=8_000))
    a = qos_agent(q, uplink_rate=400e6)
    up = a.ports["eth5"]
    up.cbfc = CreditState(frozenset({3}), 20_000, 8_000, q.mtu)
    up.set_pfc_active(frozenset())
    f = bytes(build_frame(mac(H1), mac(ROUTER), "10.0.1.11", "10.0.2.14", 4000, dscp=24))
    for _ in range(10):
        a.on_frame(a.ports["eth1"], f, 0.0)
    run(a, 0.05)
    # 20,000 credits, a channel stops below one 9216-byte frame: 3 frames leave
    assert len(up.sock.sent) == 3 and up.cbfc.blocked == 1 << 3
    a.mac_control.on_frame(up, build_credit_frame(bytes.fromhex("020000000701"), 3, 8_000), 0.05)
    run(a, 0.1, t0=0.05)
    assert len(up.sock.sent) == 5 and up.counters(0.1)["cbfc"]["updates_rx"] == 1
    a.mac_control.on_frame(up, build_credit_frame(bytes.fromhex("020000000701"), 3, 100_000), 0.1)
    run(a, 0.2, t0=0.1)
    assert len(up.sock.sent) == 10 and not up.cbfc.blocked
    assert up.counters(0.2)["drops"] == {} and up.counters(0.2)["pfc"]["pause_rx"] == [0] * 8


def test_the_receiving_port_returns_credits_as_frames_leave():
    q = QosConfig(cbfc=Cbfc(credits_bytes=1_000_000, update_bytes=8_000))
    a = qos_agent(q, uplink_rate=400e6)
    inp = a.ports["eth5"]  # frames from the spine, to h1 on eth1
    inp.cbfc = CreditState(frozenset({3}), 1_000_000, 8_000, q.mtu)
    inp.set_pfc_active(frozenset())
    f = bytes(build_frame(mac("02:00:00:00:07:01"), mac("02:00:00:00:05:05"), "10.0.2.14",
                          "10.0.1.11", 4000, dscp=24))
    for _ in range(5):
        a.on_frame(inp, f, 0.0)
    run(a, 0.05)
    updates = [parse_credit(x) for x in inp.sock.sent if x[12:14] == b"\x88\xb5"]
    assert updates == [(3, 8000), (3, 8000)]  # 5 x 4000 freed: two updates, 4000 owed
    assert inp.cbfc.owed[3] == 4000 and len(a.ports["eth1"].sock.sent) == 5


def test_emu_run_cbfc_option_and_yaml():
    from tests.unit.test_trim import plan_of

    assert plan_of("--cbfc", "credits=1MB,update=32KB").qos.cbfc == Cbfc(1_000_000, 32_000)
    assert plan_of("--cbfc").qos.cbfc == Cbfc() and plan_of().qos.cbfc is None
    with pytest.raises(ValueError, match="--cbfc: .*not with --qos off"):
        plan_of("--cbfc", "--qos", "off")
    q = QosConfig.from_dict({"cbfc": {"credits": "2MB"}})
    assert q.cbfc.credits_bytes == 2_000_000 and QosConfig.from_dict(q.to_dict()) == q
    for bad, match in (({"credits": "1KB"}, "cbfc.credits"), ({"x": 1}, "cbfc.x"),
                       ({"update": "zero"}, "cbfc.update")):
        with pytest.raises(ValueError, match=match):
            QosConfig.from_dict({"cbfc": bad})
