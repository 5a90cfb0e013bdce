"""The C pipeline (switch_agent.fast) against the Python agent, its reference: one config,
the same timed frame traces, identical (port, send time, bytes) sequences, wake times,
per-port state (counters, queues, WRED bins, sojourns, ingress PFC, shaper, delay line)
and flow cache (issue 30, docs/DATAPATH.md "Keeping Python the reference").

The Python agent keeps the ports with work in a set, whose order (object ids) decides
which port `service` visits first - and so, within one call, whether a resume a frame
frees on another port leaves now or at the next wake-up. The reference here gets an
insertion-ordered set (one of the orders a set may have); the C pipeline keeps that order.
Traces: several flows (UDP and TCP, IHL 5 and with options), DSCP classes, ECT and
Not-ECT, bursts past the WRED and xOFF thresholds, TTL 1 and 2, switched, flooded,
unroutable and local frames, and the malformed frames of emu.bench.malformed. The same
run under ASan + UBSan: test_sanitized.
"""

from __future__ import annotations

import json
import math
import random
import socket
import subprocess
import sys
import tempfile
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

import pytest

from emu.bench.malformed import base_frames, malformed_frames
from emucore import cbuild
from emucore.qos.classify import BOOK_CLASSES, Classification, TrafficClass
from emucore.qos.interface import Watchdog
from emucore.qos.llr import Llr
from emucore.qos.pfc import Pfc
from emucore.qos.qosconfig import InterfaceQos, QosConfig
from emucore.qos.queuing import QueueConfig, Queuing
from emucore.qos.trim import Trim
from emucore.qos.wred import Wred
from emucore.wire.ether import mac_bytes
from emucore.wire.pause import build_pfc_frame
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig, PortConfig
from switch_agent.forward import FibRoute, ipv4_checksum
from switch_agent.fast.pipeline import FastPipeline, Unsupported, time_frames
from switch_agent.shaper import Shaper
from traffic.tools.rawgen import build_frame

ROUTER, SPINE_MAC, DLB_MAC = "02:00:00:00:05:00", "02:00:00:00:07:01", "02:00:00:00:0d:1b"
HOSTS = {"eth1": ("02:00:00:00:01:01", "10.0.1.11"), "eth2": ("02:00:00:00:02:01", "10.0.1.12"),
         "eth3": ("02:00:00:00:03:01", "10.0.1.13")}
UPLINKS = {"eth5": "02:00:00:00:05:05", "eth6": "02:00:00:00:05:06"}
TDF = 1000.0


class OrderedBacklog(dict):
    """A set of ports in insertion order (the reference's `Agent.backlog`)."""

    def add(self, p) -> None:
        self.setdefault(p, None)

    def discard(self, p) -> None:
        self.pop(p, None)


def config(qos: QosConfig | None, shaped: bool = True, queue_limit: int = 200_000) -> AgentConfig:
    """A rail switch: three hosts in VLAN 101 and two uplinks (ECMP) at half their rate."""
    ports = tuple(PortConfig(n, ROUTER, 200e9, 200e9 / TDF if shaped else math.inf,
                             0.001 if shaped else 0.0, 101, f"h{n[-1]}:nic1") for n in HOSTS)
    ports += tuple(PortConfig(n, mac, 400e9, 100e9 / TDF if shaped else math.inf,
                              0.001 if shaped else 0.0, None, f"spine{n[-1]}:eth1")
                   for n, mac in UPLINKS.items())
    return AgentConfig("rail1", TDF, "/nonexistent", ports, queue_limit_bytes=queue_limit,
                       svi={"vlan101": {mac: n for n, (mac, _) in HOSTS.items()}},
                       qos=qos.to_dict() if qos is not None else None, dlb_macs=(DLB_MAC,))


def small_qos(ecn: bool = True, weight: int = 0) -> QosConfig:
    """The book's policies with thresholds a short trace crosses: WRED on queue 3 (and a
    Not-ECN WRED on queue 0), xOFF 50 KB / xON 15 KB, short queues."""
    q = [QueueConfig() for _ in range(8)]
    q[0] = QueueConfig(bandwidth_percent=30, limit_bytes=60_000,
                       wred=Wred(15_000, 45_000, 30.0, weight, False))
    q[3] = QueueConfig(bandwidth_percent=70, wred=Wred(20_000, 80_000, 20.0, weight, ecn),
                       limit_bytes=200_000)
    q[7] = QueueConfig(strict=True, limit_bytes=50_000)
    q[6] = QueueConfig(strict=True, limit_bytes=50_000)
    q[5] = QueueConfig(limit_bytes=40_000)  # a 0 % (scavenger) queue
    return QosConfig(classification=Classification(
        classes=BOOK_CLASSES + (TrafficClass("scavenger", (20,), 5),
                                TrafficClass("strict6", (46,), 6))),
        queuing=Queuing(queues=tuple(q)),
        pfc=Pfc(xoff_bytes=50_000, xon_bytes=15_000, headroom_bytes=40_000),
        default_interface=InterfaceQos(pfc_mode="on"))


FIB = ([FibRoute("10.0.1.0/24", ((None, "vlan101"),)),
        FibRoute("10.0.2.0/24", (("172.16.1.1", "eth5"), ("172.16.2.1", "eth6")))],
       {**{("vlan101", ip): mac for mac, ip in HOSTS.values()},
        ("eth5", "172.16.1.1"): SPINE_MAC, ("eth6", "172.16.2.1"): SPINE_MAC},
       {"10.0.1.1": "vlan101"})


def tcp(frame: bytearray) -> bytearray:
    frame[23] = 6
    frame[24:26] = b"\0\0"
    frame[24:26] = ipv4_checksum(bytes(frame[14:34])).to_bytes(2, "big")
    return frame


def with_options(frame: bytearray) -> bytearray:
    """The same packet with a 4-byte IPv4 option (IHL 6): keyed by forward.flow_key."""
    out = bytearray(frame[:34]) + b"\x01\x01\x01\x00" + frame[34:]
    out[14] = 0x46
    out[16:18] = (len(out) - 14).to_bytes(2, "big")
    out[24:26] = b"\0\0"
    out[24:26] = ipv4_checksum(bytes(out[14:38])).to_bytes(2, "big")
    return out


def trace(seed: int, bursts: int = 30) -> list[tuple[float, str, bytes]]:
    """Timed frames (lab s, ingress port, frame): bursts of routed, switched and odd frames."""
    rng = random.Random(seed)
    odd = [f for mac, ip in ((ROUTER, "10.0.2.14"), (HOSTS["eth2"][0], HOSTS["eth2"][1]))
           for _, f in malformed_frames(seed, 180, base_frames(), dst_mac=mac, dst_ip=ip)]
    out, t = [], 0.0
    for _ in range(bursts):
        t += rng.choice((0.5e-3, 2e-3, 10e-3))
        gap = rng.choice((0.0, 1e-6, 10e-6, 100e-6))
        for k in range(rng.randint(20, 150)):
            port = rng.choice(("eth1", "eth2", "eth3", "eth5"))
            dscp = rng.choice((24, 24, 24, 0, 48, 10, 20, 46))
            ecn = rng.choice((0, 1, 2, 2, 3))
            size = rng.choice((4170, 4170, 1100, 90)) if dscp != 48 else 90
            ttl = rng.choice((64,) * 30 + (1, 2))
            sport = 49152 + rng.randrange(6)
            kind = rng.random()
            if port == "eth5":
                src, dst = mac_bytes(SPINE_MAC), mac_bytes(UPLINKS["eth5"])
                sip = f"10.0.2.{rng.randrange(10, 16)}"
                dip = rng.choice([h[1] for h in HOSTS.values()])
            else:
                src, sip = mac_bytes(HOSTS[port][0]), HOSTS[port][1]
                dst, dip = mac_bytes(rng.choice((ROUTER,) * 9 + (DLB_MAC,))), \
                    f"10.0.2.{rng.randrange(10, 16)}"
            if kind < 0.08 and port != "eth5":  # switched inside the rail
                other = rng.choice([n for n in HOSTS if n != port])
                dst, dip = mac_bytes(HOSTS[other][0]), HOSTS[other][1]
            f = build_frame(src, dst, sip, dip, size, sport=sport, dport=4791, dscp=dscp,
                            ecn=ecn, ttl=ttl)
            if 0.08 <= kind < 0.15:
                f = tcp(f)
            elif 0.15 <= kind < 0.19:
                f = with_options(f)
            elif 0.19 <= kind < 0.21:  # unroutable, for the switch itself, ARP broadcast
                f = rng.choice((build_frame(src, mac_bytes(ROUTER), sip, "192.168.9.9", 200),
                                build_frame(src, mac_bytes(ROUTER), sip, "10.0.1.1", 200),
                                bytearray(b"\xff" * 6) + src + b"\x08\x06" + bytes(46)))
            elif 0.21 <= kind < 0.27:
                f, port = rng.choice(odd), rng.choice(("eth1", "eth1", "eth5"))
            out.append((t, port, bytes(f)))
            t += gap
        if rng.random() < 0.4:  # a pause (or resume) from a neighbour, obeyed by our egress
            port = rng.choice(("eth5", "eth5", "eth6", "eth1"))
            quanta = [rng.choice((0, 500, 3000, 20000, 0xFFFF)) for _ in range(8)]
            out.append((t, port, build_pfc_frame(mac_bytes(SPINE_MAC), rng.choice(
                (0x08, 0x88, 0x01, 0xFF, 0x09)), quanta)))
    return out


def reference(cfg: AgentConfig, now: list[float], sent: list) -> Agent:
    """The Python agent with a fake clock, sockets that record (port, time, bytes) and an
    insertion-ordered backlog."""
    a = Agent(cfg, open_sockets=False)
    a.backlog = a.buffers.backlog = a.mac_control.backlog = OrderedBacklog()
    a.install_fib(*FIB)
    a.next_lldp = math.inf
    a.clock = lambda: now[0]

    class Sock:
        def __init__(self, name: str) -> None:
            self.name = name

        def send(self, frame) -> int:
            sent.append((self.name, now[0], bytes(frame)))
            return len(frame)

    for p in a.ports.values():
        p.sock = Sock(p.name)
    return a


NO_WATCHDOG = {"cond_since": [-1.0] * 8, "stormed": 0, "drop_mask": 0, "ignore_mask": 0,
               "storms_detected": [0] * 8, "storms_restored": [0] * 8}


def py_state(p) -> dict:
    """A Python port's state in the shape of the C pipeline's `state`."""
    pq, ing, ep, wd = p.queues, p.ingress, p.pause, p.watchdog
    return {"rx_packets": p.rx_packets, "rx_bytes": p.rx_bytes, "tx_packets": p.tx_packets,
            "tx_bytes": p.tx_bytes,
            "drops": p.drops,
            "free_at": p.shaper.free_at,
            "eligible_at": p.eligible_at, "delay": p.delay, "lost_s": p.shaper.lost_s, "inflight": list(p.inflight),
            "ctrl": list(p.ctrl), "pause_tx": p.pause_tx, "resume_tx": p.resume_tx,
            "wd_dropped": p.watchdog.dropped if p.watchdog else [0] * 8,
            "queues": {"fifo": [len(f) for f in pq.fifo], "qbytes": pq.qbytes,
                       "packets": pq.packets, "bytes": pq.bytes, "avg": pq.avg,
                       **{k: getattr(pq, k) for k in (
                           "enq_packets", "enq_bytes", "deq_packets", "deq_bytes", "marks",
                           "max_qbytes", "drops", "sojourn_max", "sojourn_hist", "bin_seen",
                           "bin_marked", "bin_dropped")}},
            "ingress": {"enabled": [int(e) for e in ing.enabled], "held": ing.held,
                        "max_held": ing.max_held, "paused": [int(x) for x in ing.paused],
                        "xoff_sent": ing.xoff_sent, "xon_sent": ing.xon_sent,
                        "headroom_drops": ing.headroom_drops, "refresh_at": ing.refresh_at,
                        "next_refresh": ing.next_refresh, "refreshes": ing.refreshes},
            "pause": {"until": ep.until, "since": ep.since, "last_rx": ep.last_rx,
                      "resumed_at": ep.resumed_at, "paused_s": ep.paused_s,
                      "pauses_rx": ep.pauses_rx, "resumes_rx": ep.resumes_rx, "mask": ep.mask,
                      "next_expiry": ep.next_expiry},
            "pfc_rx_frames": p.pfc_rx_frames,
            "watchdog": {"cond_since": wd.cond_since, "stormed": wd.stormed,
                         "drop_mask": wd.drop_mask, "ignore_mask": wd.ignore_mask,
                         "storms_detected": wd.storms_detected,
                         "storms_restored": wd.storms_restored} if wd else NO_WATCHDOG}


def py_flows(a: Agent) -> list[tuple]:
    fc = a.flowcache
    out = []
    for c, cache in ((0, fc.fast[6]), (1, fc.fast[17]), (2, fc.flows)):
        for key, r in cache.items():
            p = r.path
            out.append((c, key, p.port.name if p else None, p.packets if p else 0,
                        p.bytes if p else 0))
    return sorted(out)


LATE = (0.0,) * 6 + (2e-6, 30e-6, 300e-6)  #: lab s a wake-up may come late


def differential(cfg: AgentConfig, frames: list[tuple[float, str, bytes]],
                 actions: dict[float, Callable] | None = None,
                 late: tuple[float, ...] = LATE) -> dict:
    """Run both on `frames`, serving at every arrival and every wake time (and installing
    running `actions[t](ref, fast)` at the first step from t on), each writing its event
    log; assert them equal (the two event files byte for byte); return what happened (for
    the tests' own checks; "events": the records). A wake-up comes late by one of `late`
    (lab s) now and then."""
    with tempfile.TemporaryDirectory() as d:
        return run_both(cfg, frames, actions, Path(d), late)


def run_both(cfg: AgentConfig, frames: list[tuple[float, str, bytes]],
             actions: dict[float, Callable] | None, logs: Path,
             late_by: tuple[float, ...] = LATE) -> dict:
    now, py_sent, c_sent = [0.0], [], []
    ref = reference(replace(cfg, events_path=str(logs / "py.jsonl")), now, py_sent)
    fast = FastPipeline(replace(cfg, events_path=str(logs / "c.jsonl")), monotonic=False)
    fast.install_fib(*FIB)
    i, wake, wakes, deadline = 0, None, 0, math.inf
    late = random.Random(len(frames)).choice  # a loop that wakes up late now and then
    while i < len(frames) or wake is not None:  # timers alone do not keep it going
        t = min(frames[i][0] if i < len(frames) else math.inf,
                wake + late(late_by) if wake is not None else math.inf,
                deadline + late(late_by))
        now[0] = t
        for at in sorted(k for k in actions or () if k <= t):
            actions.pop(at)(ref, fast)
        while i < len(frames) and frames[i][0] == t:
            _, port, frame = frames[i]
            ref.on_frame(ref.ports[port], frame, t)
            fast.on_frame(port, frame, t)
            i += 1
        deadline = ref.timers(t)
        assert fast.timers(t) == deadline, f"timers at {t}"
        w = ref.service(t)
        out: list = []
        assert fast.service(t, out) == w, f"wake at {t}"
        c_sent.extend((p, t, bytes(f)) for p, f in out)
        assert fast.c.clocks() == [(p.eligible_at, p.shaper.free_at, p.queues.bytes)
                                   for p in ref.ports.values()], t  # after every step
        wake, wakes = w, wakes + 1
        if wake is not None and wake <= t:  # ready_at rounds onto now: the clock moves on
            wake = math.nextafter(t, math.inf)
    assert c_sent == py_sent
    for name, p in ref.ports.items():
        c, control = fast.state(name), fast.agent.ports[name]  # LLDP's drops are control's
        c["drops"] = {k: c["drops"].get(k, 0) + control.drops.get(k, 0)
                      for k in {*c["drops"], *control.drops}}
        assert c == py_state(p), name
        assert (control.lldp_rx, control.neighbor) == (p.lldp_rx, p.neighbor), name
    for i, p in enumerate(ref.ports.values()):  # as many WRED draws as Python's
        assert fast.c.rng_state(i) == p.queues.rng.__self__.getstate()[1]
    assert sorted(fast.flows()) == py_flows(ref)
    assert fast.c.flushes() == ref.flowcache.flushes
    assert fast.agent.events == ref.events  # QoS warnings, watchdog storms and restores
    assert fast.meter().snapshot() == ref.meter.snapshot()
    ref.log.close(now[0])
    fast.agent.log.close(now[0])
    py_events = records(logs / "py.jsonl")
    assert records(logs / "c.jsonl") == py_events
    return {"sent": py_sent, "ref": ref, "wakes": wakes, "events": [dict(e) for e in py_events]}


def records(path: Path) -> list[list[tuple]]:
    """An event file's records, their fields in order; a `fib` event without its time
    (the control plane stamps a route change with the clock it arrives at, each agent
    its own, `AgentAdmin.install_fib`)."""
    out = []
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["ev"] == "fib":
            del e["t"]
        out.append(list(e.items()))
    return out


#: detection in 2 us and restoration after 4 us model: 2 and 4 ms lab, within a trace
FAST_WATCHDOG = Watchdog(detect_s=2e-6, restore_s=4e-6)
#: pauses of 1000 quanta (2.56 us model at 200G): refreshed every 1.28 ms lab while above xON
SHORT_PAUSES = Pfc(xoff_bytes=50_000, xon_bytes=15_000, headroom_bytes=40_000, pause_quanta=1000)

CASES = {"book-small": lambda: config(small_qos()),
         "weighted-not-ecn": lambda: config(small_qos(ecn=False, weight=2)),
         "plain": lambda: config(None, queue_limit=40_000),
         "pfc-off": lambda: config(replace(small_qos(),
                                           default_interface=InterfaceQos(pfc_mode="off"))),
         "watchdog-drop": lambda: config(replace(small_qos(), watchdog=FAST_WATCHDOG,
                                                 pfc=SHORT_PAUSES)),
         "watchdog-forward": lambda: config(replace(small_qos(), watchdog=replace(
             FAST_WATCHDOG, action="forward"))),
         "book-unshaped": lambda: config(QosConfig(default_interface=InterfaceQos(pfc_mode="on")),
                                         shaped=False),
         "test-hook": lambda: replace(config(small_qos()), test_drop_rate=0.2, test_drop_seed=5)}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_differential(case: str, seed: int) -> None:
    r = differential(CASES[case](), trace(seed))
    assert r["sent"]


def test_late_wakeups_inside_and_outside_the_window() -> None:
    """Wake-ups also 1.2 and 5 ms late: past the host ports' catch-up window (Shaper.burst_s
    1 ms; the uplinks' 1.47 ms) and past both. The shaper both catches up (booked from
    max(free_at, eligible_at) before now) and books from now; the C does the same."""
    seen = {"caught_up": 0, "from_now": 0}
    book = Shaper.book

    def counting(self, nbytes, now, eligible_at=math.inf):
        start, model = book(self, nbytes, now, eligible_at)
        if model < now:  # booked late (the model start is before now only then)
            seen["caught_up" if start == model else "from_now"] += 1
        return start, model

    Shaper.book = counting
    try:
        r = differential(CASES["book-small"](), trace(5), late=LATE + (1.2e-3, 5e-3))
    finally:
        Shaper.book = book
    assert r["sent"] and seen["caught_up"] and seen["from_now"], seen
    lost = {name: p.shaper.lost_s for name, p in r["ref"].ports.items() if p.shaper.lost_s}
    assert lost, lost  # bookings from now lost wire time; `differential` held C's equal


def test_fib_change_mid_trace() -> None:
    """A new FIB (one uplink left, one host route) empties both flow caches mid-trace."""
    frames = trace(4)
    routes, neigh, local = FIB
    fib2 = ([routes[0], FibRoute("10.0.2.0/24", (("172.16.2.1", "eth6"),)),
             FibRoute("10.0.2.12/32", (("172.16.1.1", "eth5"),))], neigh, local)
    change = {frames[len(frames) // 2][0]: lambda ref, fast: (ref.install_fib(*fib2),
                                                              fast.install_fib(*fib2))}
    r = differential(config(small_qos()), frames, change)
    assert r["ref"].fib_table is not None and "10.0.2.12/32" in r["ref"].fib_table


def test_degraded_link() -> None:
    """`link ... degrade` mid-trace (half rate, 20 % loss, 10 % corruption, +0.5 ms) on
    an uplink, restored later: the same frames lost, with the same draws."""
    frames = trace(5)
    t1, t2 = frames[len(frames) // 4][0], frames[3 * len(frames) // 4][0]
    args = (50e9 / TDF, 0.2, 0.1, 0.5e-3, 7)
    r = differential(config(small_qos()), frames, {
        t1: lambda ref, fast: (ref.ports["eth5"].degrade(*args), fast.degrade("eth5", *args)),
        t2: lambda ref, fast: (ref.ports["eth5"].restore(), fast.restore("eth5"))})
    drops = r["ref"].ports["eth5"].drops
    assert drops.get("degrade_loss", 0) > 0 and drops.get("degrade_corrupt", 0) > 0
    lost = {e["reason"] for e in r["events"] if e["ev"] == "drop" and e["port"] == "eth5"}
    assert {"degrade_loss", "degrade_corrupt"} <= lost  # in the event log too


def test_drop_hook_switched_mid_trace() -> None:
    """The test hook (`switch_agent.testhook`) off, then on, then at another rate mid-trace:
    its die (random.Random(test_drop_seed), set once) draws in C what it draws in Python,
    only while the rate is above 0; dropped frames are counted, logged and released."""
    frames = trace(6)
    at = [frames[len(frames) * k // 4][0] for k in (1, 2, 3)]

    def rate(r: float) -> Callable:
        return lambda ref, fast: (setattr(ref, "drop_rate", r), fast.set_drop_rate(r))

    r = differential(config(small_qos()), frames,
                     {at[0]: rate(0.3), at[1]: rate(0.0), at[2]: rate(0.05)})
    hooked = sum(p.drops.get("test_hook", 0) for p in r["ref"].ports.values())
    logged = [e for e in r["events"] if e["ev"] == "drop" and e["reason"] == "test_hook"]
    assert hooked > 0 and len(logged) == hooked


def test_cnps_and_headroom_in_the_log() -> None:
    """CNPs forwarded (`cnp_fwd`, their sojourn) and a burst past xOFF + headroom at one
    ingress (`drop` headroom_overflow): the same records on both paths."""
    src, dst = mac_bytes(HOSTS["eth1"][0]), mac_bytes(ROUTER)
    frames = []
    for k in range(60):
        f = build_frame(src, dst, "10.0.1.11", "10.0.2.14", 4170, sport=49152, dport=4791,
                        dscp=24, ecn=2)
        frames.append((1e-3, "eth1", bytes(f)))
        cnp = build_frame(src, dst, "10.0.1.11", "10.0.2.14", 90, sport=49153, dport=4791,
                          dscp=48)
        cnp[42] = 0x81  # BTH opcode CNP (roce.is_cnp)
        frames.append((1e-3 + k * 1e-5, "eth1", bytes(cnp)))
    r = differential(config(small_qos()), sorted(frames, key=lambda f: f[0]))
    evs = {(e["ev"], e.get("reason")) for e in r["events"]}
    assert {("cnp_fwd", None), ("drop", "headroom_overflow"), ("xoff", None)} <= evs


def test_trace_reaches_every_stage() -> None:
    """The book-small traces (seeds 1-3) cross what they are meant to: WRED marks and drops,
    tail drops, xOFF and xON, TTL-expired ICMP, strict and scavenger queues, received
    pauses that expire or are resumed, LLDP; with the fast watchdog, storms detected,
    restored and their queues dropped, and pause refreshes."""
    run = {(case, seed): differential(CASES[case](), trace(seed)) for seed in (1, 2, 3)
           for case in ("book-small", "watchdog-drop", "watchdog-forward")}  # each once
    runs = [run["book-small", seed] for seed in (1, 2, 3)]
    ports = [p for r in runs for p in r["ref"].ports.values()]
    total = lambda f: sum(f(p) for p in ports)  # noqa: E731
    assert total(lambda p: sum(p.queues.marks)) > 0
    assert total(lambda p: sum(d.get("wred", 0) for d in p.queues.drops)) > 0
    assert total(lambda p: sum(d.get("queue_full", 0) for d in p.queues.drops)) > 0
    assert total(lambda p: sum(p.pause_tx)) > 0 and total(lambda p: sum(p.resume_tx)) > 0
    for reason in ("ttl_expired", "malformed", "no_route", "not_for_us"):
        assert total(lambda p: p.drops.get(reason, 0)) > 0, reason
    assert total(lambda p: p.queues.deq_packets[7]) > 0
    assert total(lambda p: p.queues.deq_packets[6]) > 0
    assert total(lambda p: p.queues.deq_packets[5]) > 0
    assert total(lambda p: sum(p.pause.pauses_rx)) > 0
    assert total(lambda p: sum(p.pause.resumes_rx)) > 0
    assert total(lambda p: sum(p.pause.paused_s)) > 0  # pauses that ran out or were resumed
    sent = [f for r in runs for _, _, f in r["sent"]]
    assert any(len(f) > 34 and f[23] == 1 and f[34] == 11 for f in sent)  # ICMP Time Exceeded
    assert sum(p.lldp_rx for p in ports) > 0  # LLDP went to the control plane's MAC control
    assert all(r["ref"].meter.max_s > 0 for r in runs)  # late wake-ups, recorded
    wd = [p for seed in (1, 2, 3) for p in run["watchdog-drop", seed]["ref"].ports.values()]
    assert sum(sum(p.watchdog.storms_detected) for p in wd) > 0
    assert sum(sum(p.watchdog.storms_restored) for p in wd) > 0
    assert sum(sum(p.watchdog.dropped) for p in wd) > 0
    assert sum(sum(p.ingress.refreshes) for p in wd) > 0
    logged = {(e["ev"], e.get("reason") or e.get("how") or e.get("dir") or e.get("refresh"))
              for seed in (1, 2, 3) for case in ("book-small", "watchdog-drop", "watchdog-forward")
              for e in run[case, seed]["events"]}
    assert {("xoff", None), ("xon", None), ("pfc_tx", False), ("pfc_tx", True),
            ("pfc_rx", None), ("pause_start", None), ("pause_end", "expiry"),
            ("pause_end", "resume"), ("pause_end", "watchdog"), ("wred_min", "up"),
            ("wred_min", "down"), ("wred_max", "up"), ("wred_max", "down"), ("ce_first", None),
            ("drop", "wred"), ("drop", "queue_full"), ("drop", "pfc_watchdog"),
            ("wd_storm", None), ("wd_restore", None), ("path", None)} <= logged


@pytest.mark.parametrize("seed", [1, 7])  # the default and an `emu run --seed 7`
def test_wred_draws_are_pythons(seed: int) -> None:
    """The C generator, handed each port's `random.Random` state, draws what it draws."""
    cfg = replace(config(small_qos()), test_drop_seed=seed)
    fast, ref = FastPipeline(cfg), Agent(cfg, open_sockets=False)
    for i, p in enumerate(ref.ports.values()):
        assert fast.c.rng_state(i) == random.Random(f"{seed}:{p.name}").getstate()[1]
        draws = [p.queues.rng() for _ in range(2000)]
        assert [fast.c.draw(i) for _ in range(2000)] == draws
    assert len(set(draws)) == len(draws)


def test_flow_cache_overflow() -> None:
    """A cache of FLOW_CACHE_MAX flows is emptied when one more arrives, as in Python: the
    production build's 65536 (setup's), and a sanitized build's smaller bound (test_sanitized)
    against the reference given the same."""
    from switch_agent import flowcache
    from switch_agent.fast import _pipeline
    assert _pipeline.FLOW_CACHE_MAX == flowcache.FLOW_CACHE_MAX
    src = mac_bytes(HOSTS["eth1"][0])
    n = _pipeline.FLOW_CACHE_MAX + 3
    dst = [socket.inet_ntoa((0x0A000200 + i).to_bytes(4, "big")) for i in range(200)]
    frames = [(i * 1e-7, "eth1", bytes(build_frame(src, mac_bytes(ROUTER), "10.0.1.11",
                                                   dst[i % 200], 60, sport=1024 + i // 200)))
              for i in range(n)]
    r = differential(config(None, shaped=False), frames)
    assert r["ref"].flowcache.flushes == 1


def test_refuses_what_it_does_not_implement() -> None:
    cfg = config(small_qos())
    with pytest.raises(Unsupported, match="pfc_mode"):
        FastPipeline(config(QosConfig()))
    with pytest.raises(Unsupported, match="lb.mode"):
        FastPipeline(replace(cfg, lb={"mode": "spray"}))
    for field, part in (("trim", Trim()), ("llr", Llr())):
        with pytest.raises(Unsupported, match=f"qos.{field}"):
            FastPipeline(config(replace(small_qos(), **{field: part})))


def test_run_frames_is_the_pipeline() -> None:
    """The bench loop in C sends what the same frames sent one call at a time do."""
    cfg = config(QosConfig(default_interface=InterfaceQos(pfc_mode="on")), shaped=False)
    frame = bytes(build_frame(mac_bytes(HOSTS["eth1"][0]), mac_bytes(ROUTER), "10.0.1.11",
                              "10.0.2.14", 4170, dport=4791, dscp=24, ecn=2))
    a, b = FastPipeline(cfg), FastPipeline(cfg)
    for f in (a, b):
        f.install_fib(*FIB)
    assert time_frames(a, frame, 100, in_c=True) > 0
    time_frames(b, frame, 100)
    assert [a.state(n) for n in a.names] == [b.state(n) for n in b.names]
    assert a.flows() == b.flows()
    assert a.state("eth1")["rx_packets"] == 100  # the first one missed, decided, not re-run
    assert sum(a.state(n)["tx_packets"] for n in a.names) == 100


SANITIZED_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("switch_agent.fast._pipeline", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
import switch_agent.fast
switch_agent.fast._pipeline = mod
import switch_agent.flowcache
assert mod.FLOW_CACHE_MAX == int(sys.argv[2]), "not the bound it was built with"
switch_agent.flowcache.FLOW_CACHE_MAX = mod.FLOW_CACHE_MAX  # the reference's bound, the same
from tests.unit import test_fast_pipeline as t
import switch_agent.fast.pipeline as wrapper
assert wrapper._pipeline is mod, "the sanitized build is not the one in use"
for case in sorted(t.CASES):
    t.test_differential(case, 1)
t.test_trace_reaches_every_stage()
t.test_wred_draws_are_pythons(1)
t.test_wred_draws_are_pythons(7)
t.test_run_frames_is_the_pipeline()
t.test_flow_cache_overflow()
t.test_fib_change_mid_trace()
t.test_degraded_link()
t.test_cnps_and_headroom_in_the_log()
t.test_drop_hook_switched_mid_trace()
t.test_late_wakeups_inside_and_outside_the_window()
print("sanitized ok")
"""


#: the sanitized build's flow cache bound (the Python reference's is set to it in the
#: child): test_flow_cache_overflow fills it, 1027 frames instead of 65539 under ASan
SANITIZED_FLOW_CACHE_MAX = 1024


def test_sanitized(asan_dir: Path) -> None:
    """The differential traces against an ASan + UBSan build, in a child Python (one build
    for the run, shared with test_fast_ring's and test_fastagent's children)."""
    so = cbuild.build("switch_agent.fast._pipeline", sanitize=True, out_dir=asan_dir,
                      defines={"FLOW_CACHE_MAX": SANITIZED_FLOW_CACHE_MAX})
    r = subprocess.run([sys.executable, "-c", SANITIZED_CHILD, str(so),
                        str(SANITIZED_FLOW_CACHE_MAX)], cwd=cbuild.ROOT,
                       env=cbuild.sanitized_env(asan_dir), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "sanitized ok" in r.stdout
    assert "runtime error" not in r.stderr
