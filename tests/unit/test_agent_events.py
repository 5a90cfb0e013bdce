"""The switch agent's event log (docs/EVENTS.md "Switch agents"): scripted sequences on
in-memory ports with a simulated clock give exactly these events, these fields, these
times. TDF 1000: lab time t s is model time 1000 t us (the log's `t`); a 9000-byte frame
takes 9 ms lab on a 1 MB/s port (test_agent_qos.make_agent); a pause of 65535 quanta at
200 Gbps model lasts 65535 x 512 / 200e9 s = 167.77 us model (0.16777 s lab)."""

import json
import random
from collections import Counter

import pytest

import topologies
from emu.realise.net import FabricNet, pfc_unsettled
from emucore.qos.qosconfig import QosConfig
from emucore.qos.queuing import QueueConfig, Queuing, book_queues
from emucore.qos.wred import Wred
from emucore.qos.dcbx import build_lldp_frame
from emucore.wire.pause import build_pfc_frame, pause_frame
from switch_agent.agentconfig import AgentConfig, PortConfig
from switch_agent.queues import WRED_BIN_BYTES, WRED_BINS, PortQueues

from .fakes import mac
from .test_agent_qos import H, ROUTER, frame, make_agent, qos

PAUSE_US = 167.77  # 65535 quanta at 200 Gbps, model us


def agent(tmp_path, q=None, **cfg):
    """make_agent writing its event log to tmp_path/rail1.jsonl."""
    return make_agent(q, events_path=str(tmp_path / "rail1.jsonl"), **cfg)


def logged(a, *names):
    """The events written so far (flushed), without the node, only `names` if given."""
    a.log.flush()
    out = []
    with open(a.cfg.events_path) as f:
        for line in f:
            e = json.loads(line)
            assert e.pop("node") == "rail1"
            if not names or e["ev"] in names:
                out.append(e)
    return out


def ev(t, name, **fields):
    return {"t": t, "ev": name, **fields}


def fill(a, n, src=0, dst=3, **kw):
    for _ in range(n):
        a.on_frame(a.ports[f"eth{src + 1}"], frame(src, dst, **kw), 0.0)


# -- WRED thresholds, CE, drops -----------------------------------------------------------

@pytest.mark.parametrize("frames, want", [
    # 16 frames: 144 000 bytes, below WRED min (150 KB): nothing
    (16, []),
    # the 17th reaches 153 000; the first frame to leave (at 0.5 s) takes it to 144 000
    (17, [ev(0.0, "wred_min", port="eth4", queue=3, dir="up", depth=153_000),
          ev(500.0, "wred_min", port="eth4", queue=3, dir="down", depth=144_000)]),
    # the 334th reaches WRED max (3000 KB): 3 006 000; draining 3 frames at 0.5 s only
    # takes it below max again (2 997 000), not below min
    (334, [ev(0.0, "wred_min", port="eth4", queue=3, dir="up", depth=153_000),
           ev(0.0, "wred_max", port="eth4", queue=3, dir="up", depth=3_006_000),
           ev(500.0, "wred_max", port="eth4", queue=3, dir="down", depth=2_997_000)]),
])
def test_wred_thresholds_crossed_filling_then_draining(tmp_path, frames, want):
    a = agent(tmp_path)
    a.ports["eth4"].queues.rng = lambda: 0.99  # no mark below WRED max
    fill(a, frames)
    a.service(0.5)  # the shaper books 3 frames at once (its burst: 2 MTU = 18.4 ms)
    assert logged(a) == want


def test_ce_first_once_per_queue(tmp_path):
    a = agent(tmp_path)
    a.ports["eth4"].queues.rng = random.Random(2015).random
    fill(a, 200)
    # the dice of test_wred_marks_ce_past_min_and_not_below: frames 105, 107, 165, 179
    # and 186 are marked; the first saw 105 x 9000 bytes
    assert a.ports["eth4"].queues.marks[3] == 5
    assert logged(a, "ce_first") == [ev(0.0, "ce_first", port="eth4", queue=3, depth=945_000)]


def test_drop_events_name_port_queue_and_reason(tmp_path):
    a = agent(tmp_path)
    fill(a, 1200, dscp=0, ecn=0)  # 10.8 MB into queue 0 (10 MB): 89 tail drops
    a.ports["eth3"].queues.rng = lambda: 0.0  # every WRED die falls below p > 0
    fill(a, 30, dst=2, ecn=0)  # Not-ECT: from the 18th on (153 000 > min, p > 0) dropped
    fill(a, 380, src=1, dst=3)  # xOFF + headroom = 3.4 MB: 377 frames fit, 3 overflow
    a.drop_rate = 0.5  # the test hook: its dice (seed test_drop_seed 1) drop 26 of 40
    fill(a, 40, src=2, dst=1)
    dice = random.Random(a.cfg.test_drop_seed)
    hook = sum(dice.random() < 0.5 for _ in range(40))
    got = Counter((e["port"], e["queue"], e["reason"]) for e in logged(a, "drop"))
    assert a.ports["eth2"].drops["test_hook"] == hook
    assert got == {("eth4", 0, "queue_full"): 89, ("eth3", 3, "wred"): 13,
                   ("eth2", 3, "headroom_overflow"): 3, ("eth2", 3, "test_hook"): hook}


# -- PFC: xOFF / xON, frames sent and received, pauses ---------------------------------------

def test_xoff_refresh_then_xon(tmp_path):
    a = agent(tmp_path)
    fill(a, 3_200_000 // 9000 + 1)  # 356 frames: 3 204 000 > xOFF 3.2 MB
    a.timers(0.1)  # the pause is re-sent after half its time (83.9 ms lab)
    for i in range(5000):  # drain eth4 at 1 MB/s, 1 ms steps
        a.service(i / 1000)
    # below xON (100 KB) after 345 frames left (99 000 bytes): the 345th is booked once
    # now >= 344 x 9 ms - 18.432 ms of shaper burst = 3.077568 s -> at 3.078 s
    assert logged(a, "xoff", "xon", "pfc_tx") == [
        ev(0.0, "xoff", port="eth1", prio=3, bytes=3_204_000),
        ev(0.0, "pfc_tx", port="eth1", prio=3, quanta=65535, refresh=False),
        ev(100.0, "pfc_tx", port="eth1", prio=3, quanta=65535, refresh=True),
        ev(3078.0, "xon", port="eth1", prio=3, bytes=99_000),
        ev(3078.0, "pfc_tx", port="eth1", prio=3, quanta=0, refresh=False)]
    p1 = a.ports["eth1"]
    assert p1.pause_tx[3] == 2 and p1.resume_tx[3] == 1  # one event per frame on the wire


def rx(t, prio, quanta):
    return ev(t, "pfc_rx", port="eth4", prio=prio, quanta=quanta)


def start(t, prio, until):
    return ev(t, "pause_start", port="eth4", prio=prio, until=until)


def end(t, prio, how):
    return ev(t, "pause_end", port="eth4", prio=prio, how=how)


@pytest.mark.parametrize("frames, want", [
    # (lab s, class-enable vector, {priority: quanta}) received on eth4
    ([(0.0, 0x08, {3: 0xFFFF})],  # runs out by itself: ended at its expiry
     [rx(0.0, 3, 65535), start(0.0, 3, PAUSE_US), end(PAUSE_US, 3, "expiry")]),
    ([(0.0, 0x08, {3: 0xFFFF}), (0.05, 0x08, {3: 0})],  # a resume ends it at once
     [rx(0.0, 3, 65535), start(0.0, 3, PAUSE_US), rx(50.0, 3, 0), end(50.0, 3, "resume")]),
    ([(0.0, 0x08, {3: 0xFFFF}), (0.1, 0x08, {3: 0xFFFF})],  # refreshed: one longer pause
     [rx(0.0, 3, 65535), start(0.0, 3, PAUSE_US), rx(100.0, 3, 65535),
      end(100.0 + PAUSE_US, 3, "expiry")]),
    ([(0.0, 0x08, {3: 0xFFFF}), (0.2, 0x08, {3: 0xFFFF})],  # expired, then paused again
     [rx(0.0, 3, 65535), start(0.0, 3, PAUSE_US), rx(200.0, 3, 65535),
      end(PAUSE_US, 3, "expiry"), start(200.0, 3, 200.0 + PAUSE_US),
      end(200.0 + PAUSE_US, 3, "expiry")]),
    # two priorities in one frame: 100 and 200 quanta = 0.256 and 0.512 us model
    ([(0.0, 0x09, {0: 100, 3: 200})],
     [rx(0.0, 0, 100), rx(0.0, 3, 200), start(0.0, 0, 0.26), start(0.0, 3, 0.51),
      end(0.26, 0, "expiry"), end(0.51, 3, "expiry")]),
    ([(0.0, 0x08, {3: 0})],  # a resume while not paused: received, nothing ends
     [rx(0.0, 3, 0)]),
])
def test_pause_received_started_and_ended(tmp_path, frames, want):
    a = agent(tmp_path)
    p4 = a.ports["eth4"]
    for t, vec, quanta in frames:
        a.on_frame(p4, build_pfc_frame(mac(H[3]), vec, [quanta.get(p, 0) for p in range(8)]), t)
    a.snapshot()  # the counters notice the expiries (at a much later clock) and flush
    assert logged(a) == want


def test_pause_expiry_noticed_by_the_scheduler_is_stamped_at_the_expiry(tmp_path):
    a = agent(tmp_path)
    p4 = a.ports["eth4"]
    a.on_frame(p4, pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
    fill(a, 1)
    a.service(0.1)
    assert p4.queues.packets == 1  # paused
    a.service(0.3)  # the scheduler finds the pause ran out at 0.16777 s: the frame leaves
    assert p4.queues.packets == 0
    assert logged(a, "pause_start", "pause_end") == [start(0.0, 3, PAUSE_US),
                                                    end(PAUSE_US, 3, "expiry")]


@pytest.mark.parametrize("action, want", [
    # drop: the pause is still obeyed; the queued frames (5) and an arrival are dropped
    ("drop", [start(0.0, 3, PAUSE_US), ev(1.0, "wd_storm", port="eth4", prio=3, action="drop")]
     + [ev(1.0, "drop", port="eth4", queue=3, reason="pfc_watchdog")] * 5
     + [ev(50.0, "drop", port="eth4", queue=3, reason="pfc_watchdog"),
        ev(65.0, "wd_restore", port="eth4", prio=3, action="drop"),
        end(45.0 + PAUSE_US, 3, "expiry")]),
    # forward: the pause is ignored from the storm on and obeyed again at the restore
    # (the host's last pause, at 45 ms lab, still runs until 45 + 167.77 us model)
    ("forward", [start(0.0, 3, PAUSE_US),
                 ev(1.0, "wd_storm", port="eth4", prio=3, action="forward"),
                 end(1.0, 3, "watchdog"),
                 ev(65.0, "wd_restore", port="eth4", prio=3, action="forward"),
                 start(65.0, 3, 45.0 + PAUSE_US), end(45.0 + PAUSE_US, 3, "expiry")]),
])
def test_watchdog_storm_and_restore(tmp_path, action, want):
    # detection 1 us model = 1 ms lab, checked every 0.25 ms; restoration 20 ms lab
    a = agent(tmp_path, qos(detect_s="1us", restore_s="20us", action=action))
    p4 = a.ports["eth4"]
    fill(a, 5)
    for i in range(600):  # 0.5 ms steps to 0.3 s; a host pausing every 5 ms up to 45 ms
        t = i / 2000
        if i % 10 == 0 and i < 100:
            a.on_frame(p4, pause_frame(mac(H[3]), 3, 0xFFFF), t)
        if i == 100:  # one arrival at 50 ms, stormed: dropped by action drop
            a.on_frame(a.ports["eth1"], frame(0, 3), t)
        a.timers(t)
        a.service(t)
    # the storm: paused with frames waiting since the first check (0 s) for 1 ms; the
    # restore: 20 ms after the last pause received (45 ms)
    assert logged(a, "pause_start", "pause_end", "wd_storm", "wd_restore", "drop") == want


# -- DCBX, LLDP ----------------------------------------------------------------------------

def test_pfc_oper_when_dcbx_turns_pfc_on_and_off(tmp_path):
    a = agent(tmp_path, qos(mode="auto"))
    p1 = a.ports["eth1"]
    with_pfc = build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", QosConfig())
    without = build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", None)
    for t, f in [(0.0, with_pfc), (1.0, with_pfc), (2.0, without), (3.0, without)]:
        a.on_frame(p1, f, t)
    assert logged(a) == [ev(0.0, "pfc_oper", port="eth1", on=True),
                         ev(2000.0, "pfc_oper", port="eth1", on=False)]


def test_lldp_off_ports_send_no_lldp_but_still_listen(tmp_path):
    a = agent(tmp_path, qos(mode="auto"), lldp_off=("eth2",))
    for t in (0.0, 1.0, 2.0):
        a.next_lldp = t
        a.timers(t)
        a.service(t)
    sent = {n: sum(f[12:14] == b"\x88\xcc" for f in p.sock.sent) for n, p in a.ports.items()}
    assert sent == {"eth1": 3, "eth2": 0, "eth3": 3, "eth4": 3}
    assert a.ports["eth2"].lldp_tx == 0
    p2 = a.ports["eth2"]
    a.on_frame(p2, build_lldp_frame(mac(H[1]), mac(H[1]), "nic1", "h2", QosConfig()), 3.0)
    assert p2.lldp_rx == 1 and p2.pfc_active == frozenset({3})


def test_pfc_is_settled_once_each_auto_port_has_heard_its_neighbour(tmp_path):
    """emu.realise.net.pfc_unsettled (what FabricNet.wait_pfc waits for) from the agent's
    own counters: an auto port is unsettled until its neighbour's first LLDPDU; then PFC is
    on where both advertise priority 3, and off for good where the neighbour advertises no
    PFC (no DCBX TLVs), so a run need not wait out the timeout for it."""
    a = agent(tmp_path, qos(mode="auto"))
    ports = lambda: a.snapshot()["ports"]  # noqa: E731
    everyone = ["eth1", "eth2", "eth3", "eth4"]
    assert pfc_unsettled(ports()) == (everyone, everyone)
    assert all(ports()[p]["pfc"]["lldp_rx"] == 0 for p in everyone)
    a.on_frame(a.ports["eth1"], build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1",
                                                 QosConfig()), 1.0)
    a.on_frame(a.ports["eth2"], build_lldp_frame(mac(H[1]), mac(H[1]), "nic1", "h2"), 1.0)
    assert pfc_unsettled(ports()) == (["eth2", "eth3", "eth4"], ["eth3", "eth4"])
    for i in (2, 3):
        a.on_frame(a.ports[f"eth{i + 1}"], build_lldp_frame(mac(H[i]), mac(H[i]), "nic1",
                                                            f"h{i + 1}", QosConfig()), 2.0)
    assert pfc_unsettled(ports()) == (["eth2"], [])
    assert ports()["eth2"]["pfc"]["lldp_rx"] == 1


@pytest.mark.parametrize("pfc, want", [
    ({"mode": "on", "active": [3]}, ([], [])),
    ({"mode": "off", "active": []}, ([], [])),
    ({"mode": "auto", "active": [3], "lldp_rx": 1}, ([], [])),
    ({"mode": "auto", "active": [], "lldp_rx": 0}, (["eth1"], ["eth1"])),
    ({"mode": "auto", "active": []}, (["eth1"], ["eth1"])),  # an agent without the count
    ({"mode": "auto", "active": [], "lldp_rx": 2}, (["eth1"], [])),
])
def test_pfc_unsettled_table(pfc, want):
    assert pfc_unsettled({"eth1": {"pfc": pfc}}) == want


def test_a_new_neighbour_is_answered_at_once_where_we_advertise(tmp_path):
    """802.1AB-2016 9.2.10's fast start: a new neighbour's LLDPDU is answered with ours
    at once, on a port that advertises; the same neighbour again is not; a port under
    `no lldp transmit` stays silent; before our first announcement nothing is sent."""
    a = agent(tmp_path, qos(mode="auto"), lldp_off=("eth2",))
    h1 = build_lldp_frame(mac(H[0]), mac(H[0]), "nic1", "h1", QosConfig())
    h9 = build_lldp_frame(mac(H[2]), mac(H[2]), "nic1", "h9", QosConfig())

    def lldpdus():
        return {n: sum(f[12:14] == b"\x88\xcc" for f in p.sock.sent) for n, p in a.ports.items()}

    a.on_frame(a.ports["eth3"], h1, 0.0)  # before our first announcement: nothing yet
    a.service(0.0)
    assert lldpdus() == {"eth1": 0, "eth2": 0, "eth3": 0, "eth4": 0}
    a.next_lldp = 0.0
    a.timers(0.0)  # the first announcement, on every port that advertises
    a.service(0.0)
    assert lldpdus() == {"eth1": 1, "eth2": 0, "eth3": 1, "eth4": 1}
    for t, port, f in [(0.1, "eth1", h1), (0.2, "eth1", h1), (0.3, "eth2", h1),
                       (0.4, "eth1", h9)]:
        a.on_frame(a.ports[port], f, t)
        a.service(t)
    # eth1: h1 new (answered), h1 again (not), h9 new (answered); eth2: lldp_off
    assert lldpdus() == {"eth1": 3, "eth2": 0, "eth3": 1, "eth4": 1}
    assert a.ports["eth1"].lldp_tx == 3 and a.ports["eth2"].pfc_active == frozenset({3})


def test_lldp_off_names_ports_and_survives_json(tmp_path):
    ports = (PortConfig("eth1", ROUTER, 200e9, 8e6),)
    with pytest.raises(ValueError, match="lldp_off: 'eth9' is not a port of rail1"):
        AgentConfig("rail1", 1000.0, "/x", ports, lldp_off=("eth9",)).validate()
    cfg = AgentConfig("rail1", 1000.0, "/x", ports, lldp_off=("eth1",),
                      events_path=str(tmp_path / "e.jsonl"))
    assert AgentConfig.from_json(cfg.to_json()) == cfg


def test_fabric_net_passes_event_path_and_lldp_off(tmp_path):
    fab = topologies.load("rail2x4")
    net = FabricNet(fab, run_dir=tmp_path, lldp_off={"rail1": ["eth5"]})
    rail1, spine1 = net.agent_config("rail1"), net.agent_config("spine1")
    assert rail1.events_path == str(tmp_path.resolve() / "events" / "rail1.jsonl")
    assert rail1.lldp_off == ("eth5",) and spine1.lldp_off == ()
    assert FabricNet(fab).agent_config("rail1").events_path is None
    with pytest.raises(ValueError, match=r"lldp_off\[rail1\]: no port 'eth99'"):
        FabricNet(fab, lldp_off={"rail1": ["eth99"]})


# -- the log itself --------------------------------------------------------------------------

def test_without_a_path_nothing_is_noted(tmp_path):
    a = make_agent()
    fill(a, 400)
    a.on_frame(a.ports["eth4"], pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
    assert not a.log.enabled
    assert all(p.queues.events is None and p.pause.expired is None for p in a.ports.values())
    a.close()


def test_snapshot_flushes_and_close_writes_what_is_left(tmp_path):
    a = agent(tmp_path)
    a.on_frame(a.ports["eth4"], pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
    path = tmp_path / "rail1.jsonl"
    assert path.read_text() == ""  # buffered
    a.snapshot()
    assert [json.loads(x)["ev"] for x in path.read_text().splitlines()] == [
        "pfc_rx", "pause_start", "pause_end"]
    a.close()
    assert a.log.f is None


def test_exit_by_signal_closes_the_log(tmp_path, monkeypatch):
    from switch_agent import __main__ as entry

    a = agent(tmp_path)

    def serve(agent):  # a pause, then SIGTERM: its handler raises SystemExit in the loop
        agent.on_frame(agent.ports["eth4"], pause_frame(mac(H[3]), 3, 0xFFFF), 0.0)
        raise SystemExit(0)
    monkeypatch.setattr(entry.fastagent, "build", lambda cfg: a)  # EMU_DATAPATH chooses
    monkeypatch.setattr(entry, "serve", serve)
    monkeypatch.setattr(entry.signal, "signal", lambda *args: None)
    cfg = tmp_path / "agent.json"
    cfg.write_text(a.cfg.to_json())
    with pytest.raises(SystemExit):
        entry.main([str(cfg)])
    assert a.log.f is None  # closed, with the expiry the loop had not noticed yet
    assert logged(a, "pause_end") == [end(PAUSE_US, 3, "expiry")]


# -- the WRED curve as measured ----------------------------------------------------------------

def bins_of(pairs):
    out = [0] * WRED_BINS
    for b, n in pairs.items():
        out[b] = n
    return out


def test_wred_bins_count_arrivals_marks_and_drops_by_depth():
    # never a random mark (die 0.99 > p): ECT frames are marked from WRED max on and
    # Not-ECT ones dropped there; arrival k of 9000 bytes finds 9000 k bytes
    pq = PortQueues(Queuing(), 9216, lambda: 0.99)
    ect, not_ect = bytes(9000), bytes(9000)
    for _ in range(700):
        pq.enqueue(3, ect, None, 2)
    for _ in range(3):  # at 6.3 MB: past the last bin (39 x 150 KB = 5.85 MB)
        pq.enqueue(3, not_ect, None, 0)
    seen = Counter(min(9000 * k // WRED_BIN_BYTES, WRED_BINS - 1) for k in range(700))
    seen[WRED_BINS - 1] += 3
    # marked: k >= 334 (3 006 000 >= 3 000 000); 16 arrivals in bin 20, 17 in 21, ...
    marked = Counter(min(9000 * k // WRED_BIN_BYTES, WRED_BINS - 1) for k in range(334, 700))
    assert seen[0] == 17 and marked[20] == 16 and marked[21] == 17
    assert pq.wred_bins() == {"3": {"bin_bytes": 150_000, "seen": bins_of(seen),
                                    "marked": bins_of(marked), "dropped": bins_of({39: 3})}}


def test_wred_bins_count_tail_drops_in_the_bin_they_found():
    q = list(book_queues())
    q[3] = QueueConfig(bandwidth_percent=50, wred=Wred.book(), limit_bytes=3_100_000)
    pq = PortQueues(Queuing(queues=tuple(q)), 9216, lambda: 0.99)
    for _ in range(400):
        pq.enqueue(3, bytes(9000), None, 2)
    # 344 frames fit (3 096 000); the other 56 find 3 096 000 (bin 20) and are dropped;
    # marked: arrivals 334..343 at 3 006 000 .. 3 087 000 (bin 20)
    seen = Counter(9000 * k // WRED_BIN_BYTES for k in range(344))
    seen[20] += 56
    assert pq.wred_bins()["3"] == {"bin_bytes": 150_000, "seen": bins_of(seen),
                                   "marked": bins_of({20: 10}), "dropped": bins_of({20: 56})}
    assert pq.drops[3] == {"queue_full": 56}


def test_port_counters_show_wred_bins_of_queues_that_saw_traffic():
    a = make_agent()
    fill(a, 3)
    ports = a.snapshot()["ports"]
    assert ports["eth4"]["wred_bins"] == {"3": {"bin_bytes": 150_000, "seen": bins_of({0: 3}),
                                                "marked": bins_of({}), "dropped": bins_of({})}}
    assert ports["eth1"]["wred_bins"] == {}


# -- CNP sojourn (ch.11 L2468-2476) -------------------------------------------------------

def cnp_to(dst):
    """A real CNP (scapy_cnp) from h1 to host dst, bytes as a NIC sends it."""
    from emucore.wire.roce import scapy_cnp
    return bytes(scapy_cnp(H[0], H[dst], "10.0.1.11", f"10.0.1.{11 + dst}", 0xC0DE, 0x42))


@pytest.mark.parametrize("cnp_dscp, queue, want_us", [
    # strict q7: booked after the three data frames already on the wire (27 ms lab) but
    # ahead of the fourth: 27 - 1 = 26 ms lab = 26 us model
    (48, 7, 26.0),
    # behind all four data frames in q3 (with DSCP 24, as `nic: {cnp_dscp: 24}`): 36 - 1
    (24, 3, 35.0),
])
def test_cnp_sojourn_event_and_histogram(tmp_path, cnp_dscp, queue, want_us):
    a = agent(tmp_path)
    for _ in range(4):  # 4 x 9 ms of data to eth4; 3 are booked at once (burst 18.4 ms)
        a.on_frame(a.ports["eth1"], frame(0, 3), 0.0)
    a.service(0.0)
    cnp = bytearray(cnp_to(3))
    cnp[15] = cnp_dscp << 2 | cnp[15] & 3
    a.on_frame(a.ports["eth2"], bytes(cnp), 0.001)
    t = 0.001
    while a.ports["eth4"].queues.packets:
        t = round(t + 0.001, 6)
        a.service(t)
    got = logged(a, "cnp_fwd")
    assert got == [ev(got[0]["t"], "cnp_fwd", port="eth4", queue=queue, sojourn=want_us)]
    pq = a.ports["eth4"].queues
    assert pq.sojourn_max[queue] == pytest.approx(want_us)
    # data frames start at 0, 9, 18 ms and 27 ms (or 27.074, after the CNP): 0, 9, 18,
    # 27 us model -> bins [0, 1), [5, 10), [10, 20), [20, 50); the CNP 26 / 35 us in [20, 50)
    data = [1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0]
    if queue == 3:
        data[5] += 1
    else:
        assert pq.counters()[7]["sojourn_hist"] == [0] * 5 + [1] + [0] * 5
    assert pq.counters()[3]["sojourn_hist"] == data
