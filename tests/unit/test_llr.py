"""Link-level retry, modelled in the agent (issue 16, emucore.qos.llr): the LLDP TLV that
advertises it, the negotiation, and a lossy link that delivers everything, in order,
later - or drops after max_replays in a row."""

import pytest

from emucore.qos import dcbx
from emucore.qos.qosconfig import QosConfig
from emucore.qos.llr import Llr
from emucore.wire import lldp
from traffic.tools.rawgen import build_frame

from .fakes import mac
from .test_agent import H1, ROUTER, run
from .test_trim import qos_agent


def test_the_tlv_advertises_llr_and_both_partners_must_have_it():
    q = QosConfig(llr=Llr())
    f = dcbx.build_lldp_frame("02:00:00:00:00:01", "02:00:00:00:00:01", "eth1", "rail1", q)
    assert f[-9:] == bytes.fromhex("fe05" "acde48" "01" "01" "0000")  # type 127, len 5, End
    nb = lldp.parse_lldp_frame(f)
    assert nb.org == ((0xACDE48, 1, 1),) and dcbx.llr_active(q, nb)
    assert not dcbx.llr_active(QosConfig(), nb)  # we do not run it
    plain = lldp.parse_lldp_frame(dcbx.build_lldp_frame(
        "02:00:00:00:00:01", "02:00:00:00:00:01", "eth1", "rail1", QosConfig()))
    assert plain.org == () and not dcbx.llr_active(q, plain)  # the partner does not
    other = QosConfig(llr=Llr(oui=0x123456, subtype=9))
    assert not dcbx.llr_active(other, nb)  # another OUI / subtype is not ours
    assert QosConfig.from_dict(q.to_dict()) == q


def make_agent(llr, loss, corrupt=0.0):
    a = qos_agent(QosConfig(llr=llr), uplink_rate=400e6)
    up = a.ports["eth5"]
    if llr is not None:  # as if the spine's LLDPDU carried the TLV (negotiated above)
        up.llr = True
    up.degrade(None, loss, corrupt, 0.0, seed=5)
    return a, up


def send(a, n):
    frames = [bytes(build_frame(mac(H1), mac(ROUTER), "10.0.1.11", "10.0.2.14", 1000,
                                sport=50000, ttl=64 - i % 3))
              for i in range(n)]
    for f in frames:
        a.on_frame(a.ports["eth1"], f, 0.0)
    run(a, 0.2, step=0.0002)
    return frames


def test_a_lossy_link_with_llr_delivers_every_frame_in_order():
    a, up = make_agent(Llr(timeout_s=1e-6), loss=0.2, corrupt=0.1)
    send(a, 200)
    got = up.sock.sent
    assert [g[22] for g in got] == [(64 - i % 3) - 1 for i in range(200)]  # all, in order
    c = up.counters(0.0)
    assert c["llr"]["replays"] > 30 and c["llr"]["exhausted"] == 0
    assert sum(c["drops"].values()) == 0 and c["tx_packets"] == 200


def test_without_llr_the_same_link_loses_frames():
    a, up = make_agent(None, loss=0.2, corrupt=0.1)
    send(a, 200)
    c = up.counters(0.0)
    assert c["llr"]["replays"] == 0 and 30 < sum(c["drops"].values()) < 90
    assert len(up.sock.sent) == 200 - sum(c["drops"].values())


def test_a_dead_link_gives_up_after_max_replays_in_a_row():
    a, up = make_agent(Llr(timeout_s=1e-6, max_replays=3), loss=1.0)
    send(a, 5)
    c = up.counters(0.0)
    assert up.sock.sent == [] and c["llr"]["exhausted"] == 5
    assert c["llr"]["replays"] == 5 * 3 and c["drops"] == {"degrade_loss": 5}


@pytest.mark.parametrize("bad,match", [({"timeout": "0us"}, "llr.timeout"),
                                       ({"max_replays": 0}, "llr.max_replays"),
                                       ({"oui": 1 << 24}, "llr.oui"), ({"x": 1}, "llr.x")])
def test_bad_llr_fields_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        QosConfig.from_dict({"llr": bad})


def test_emu_run_llr_option():
    from tests.unit.test_trim import plan_of

    p = plan_of("--llr", "timeout=2us,oui=0x123456")
    assert p.qos.llr == Llr(timeout_s=2e-6, oui=0x123456)
    assert plan_of("--llr").qos.llr == Llr() and plan_of().qos.llr is None
    with pytest.raises(ValueError, match="--llr: .*not with --qos off"):
        plan_of("--llr", "--qos", "off")
    with pytest.raises(ValueError, match="--llr.max_replays"):
        plan_of("--llr", "max_replays=0")
