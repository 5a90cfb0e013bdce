"""The fast agent's own loop on PACKET_MMAP rings (switch_agent/fast/loop.h, ring.h): in a
network namespace of its own (`unshare -n`) with a veth pair per switch port, frames
sent at the ports' peers go through TPACKET_V2 RX rings, C's pipeline (flows the Python
control plane decides, expired TTLs it answers) and the TX rings; the peers receive
what the Python reference agent sends for the same frames, port by port, and the
counters are the reference's. Python's own sends (LLDP) leave through the TX ring, and
many frames share one wake-up. Also a port going down (counted once, as serve does) and
the switch down: frames counted and dropped.

Nothing lost without a count: frames sent at a port while the loop does not poll fill
its RX ring and the kernel drops the rest - the agent's `rx_ring_drops` is what the
kernel's PACKET_STATISTICS reported, and sent = received + dropped exactly; frames a
kick's send() leaves in a TX ring (the peer down: no carrier) are dropped as `tx_nobufs`,
one by one, and the ring still sends what comes after, nothing stale.

Arrivals (switch_agent.arrivals): after a wake-up that read a frame the loop polls, and
the frames that came meanwhile at two ports run in the order they arrived over both
ports, each at its ring stamp - so a frame read late is late on the lag meter, by its
wait."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
PEER = {"eth1": "p1", "eth2": "p2", "eth3": "p3", "eth5": "p5", "eth6": "p6"}


def child() -> None:
    """Run in the new namespace: prints what the test asserts on, as JSON."""
    import math
    import select
    import time

    from emucore import rawsock
    from switch_agent import fastagent
    from tests.unit.test_fast_pipeline import FIB, config, reference, trace

    veths()
    cfg = config(None, shaped=False, queue_limit=10_000_000)  # no tail drops, any batching
    fa = fastagent.build(cfg, "fast")
    fa.install_fib(*FIB)
    peers = {port: rawsock.open_port(peer) for port, peer in PEER.items()}
    rings = fa.open_rings(time.monotonic())
    ep = select.epoll()
    for fd in fa.by_fd:
        ep.register(fd, select.EPOLLIN)
    frames, watchdog, sent = [], [], []

    def serve(seconds: float) -> int:
        why, now = fa.fast.c.serve(ep.fileno(), time.monotonic() + seconds, True, fa.punted,
                                   watchdog, sent)
        fa.served(now, watchdog, sent)
        return why

    for k, (_, port, frame) in enumerate(trace(1)):
        if frame[12:14] == b"\x88\x08":  # no pauses: their timing is the real clock's
            continue
        try:
            peers[port].send(frame)
        except OSError:  # shorter than a header: the kernel refuses it
            continue
        frames.append((port, frame))
        if k % 200 == 199:  # bursts of 200 (the RX rings hold 1024 frames)
            serve(0.002)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        serve(0.1)
    fa.ports["eth5"].sock.send(frames[0][1])  # Python's send (LLDP's way): the TX ring
    got = {port: sorted(drain(s)) for port, s in peers.items()}
    now, py_sent = [0.0], []
    ref = reference(cfg, now, py_sent)
    for port, frame in frames:
        ref.on_frame(ref.ports[port], frame, 0.0)
    ref.service(0.0)
    want = {port: sorted(f.hex() for p, _, f in py_sent if p == port) for port in PEER}
    want["eth5"] = sorted(want["eth5"] + [frames[0][1].hex()])
    fa.sync()
    counters = {n: (p.rx_packets, p.tx_packets, dict(p.drops)) for n, p in fa.ports.items()}
    ref_counters = {n: (p.rx_packets, p.tx_packets, p.drops) for n, p in ref.ports.items()}
    wakes, received = fa.fast.c.loop_stats()
    subprocess.run("ip link set eth6 down", shell=True, check=True)  # reported once,
    before = fa.fast.c.loop_stats()[0]  # and the loop does not spin on it
    serve(0.1)
    spins = fa.fast.c.loop_stats()[0] - before
    fa.set_admin(False, time.monotonic())  # down: what still arrives is dropped
    for port, frame in frames[:10]:
        peers[port].send(frame)
    time.sleep(0.05)
    fa.fast.c.serve(ep.fileno(), time.monotonic() + 0.05, False, fa.punted, watchdog, sent)
    fa.sync()
    down = sum(p.drops.get("switch_down", 0) for p in fa.ports.values())
    netdown = fa.ports["eth6"].drops.get("rx_netdown", 0)
    print(json.dumps({"rings": rings, "frames": len(frames), "got": got, "want": want,
                      "counters": counters, "ref_counters": ref_counters, "wakes": wakes, "received": received,
                      "down": down, "netdown": netdown, "spins": spins, "inf": math.inf > 0}))


def veths() -> None:
    """A veth pair per switch port (PEER), IPv6 off: nothing arrives but what we send."""
    subprocess.run("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                   "net.ipv6.conf.default.disable_ipv6=1", shell=True, check=True)
    for port, peer in PEER.items():
        subprocess.run(f"ip link add {port} mtu 9300 type veth peer name {peer} mtu 9300 && "
                       f"ip link set {port} up && ip link set {peer} up", shell=True, check=True)


def overflow_child() -> None:
    """Run in the new namespace: frames blasted at eth5 while C's loop does not poll,
    then served; K frames to eth2 while its peer is down, K more once it is up."""
    import errno
    import select
    import tempfile
    import time
    from dataclasses import replace

    from emucore import rawsock
    from emucore.wire.ether import mac_bytes
    from switch_agent import fastagent, port as portmod
    from switch_agent.fast import _pipeline
    from tests.unit.test_fast_pipeline import FIB, HOSTS, config
    from traffic.tools.rawgen import build_frame

    veths()
    events = Path(tempfile.mkdtemp()) / "e.jsonl"
    cfg = replace(config(None, shaped=False), events_path=str(events))
    fa = fastagent.build(cfg, "fast")
    fa.install_fib(*FIB)
    peers = {port: rawsock.open_port(peer) for port, peer in PEER.items()}
    rings = fa.open_rings(time.monotonic())
    read, kernel = portmod.packet_stats, []  # what the kernel reported at each reading

    def recorded(sock) -> tuple[int, int]:
        kernel.append((sock.fileno(), *read(sock)))
        return kernel[-1][1:]

    portmod.packet_stats = recorded
    fa.snapshot()
    kernel.clear()
    ep = select.epoll()
    for fd in fa.by_fd:
        ep.register(fd, select.EPOLLIN)
    watchdog, sent = [], []

    def serve(seconds: float) -> None:
        _, now = fa.fast.c.serve(ep.fileno(), time.monotonic() + seconds, True, fa.punted,
                                 watchdog, sent)
        fa.served(now, watchdog, sent)

    # to a MAC not the switch's: counted received and dropped, nothing forwarded
    frame = bytes(build_frame(mac_bytes("02:00:00:00:07:01"), mac_bytes("02:00:00:00:00:99"),
                              "10.0.2.14", "10.0.1.11", 1000))
    n_sent = 0
    for _ in range(N_BLAST):
        try:
            peers["eth5"].send(frame)
            n_sent += 1
        except OSError:
            pass
    received = fa.fast.c.loop_stats()[1]
    for _ in range(5):
        serve(0.02)
    received = fa.fast.c.loop_stats()[1] - received
    snaps = [fa.snapshot()["ports"] for _ in range(2)]
    eth5 = [s["eth5"] for s in snaps]
    fd5 = fa.ports["eth5"].sock.fileno()
    reported = [(p, d) for fd, p, d in kernel if fd == fd5]

    i2 = fa.fast.index["eth2"]
    data = bytes(build_frame(mac_bytes(HOSTS["eth1"][0]), mac_bytes(HOSTS["eth2"][0]),
                             "10.0.1.11", "10.0.1.12", 200))
    subprocess.run("ip link set p2 down", shell=True, check=True)  # eth2: no carrier
    for k in range(K):
        fa.fast.c.enqueue(i2, 0, data[:-1] + bytes([k]), 0.0, 0)
    serve(0.01)
    down = fa.snapshot()["ports"]["eth2"]
    subprocess.run("ip link set p2 up", shell=True, check=True)
    time.sleep(0.05)
    for k in range(K):
        fa.fast.c.enqueue(i2, 0, data[:-1] + bytes([100 + k]), 0.0, 0)
    serve(0.01)
    up = fa.snapshot()["ports"]["eth2"]
    got = []
    while True:
        try:
            got.append(peers["eth2"].recv(65535)[-1])
        except BlockingIOError:
            break
        except OSError as exc:  # the ENETDOWN of p2's down, reported once
            assert exc.errno == errno.ENETDOWN
    fa.close()
    log = [json.loads(line) for line in events.read_text().splitlines()]
    drops = [e for e in log if e["ev"] == "drop"]
    print(json.dumps({
        "rings": rings, "sent": n_sent, "received": received, "ring_rx": _pipeline.RING_RX,
        "eth5": eth5, "reported": reported, "down": down, "up": up, "got": got,
        "ring_events": [e["count"] for e in drops if e["reason"] == "rx_ring_full"],
        "tx_events": [(e["port"], e["queue"]) for e in drops if e["reason"] == "tx_nobufs"],
        "tx": sum(p["tx_packets"] for p in snaps[0].values())}))


def order_child() -> None:
    """Run in the new namespace: frames to h2 (eth2) sent at eth1 and eth3 in turn,
    ORDER_GAP_S apart, while C's loop serves with a poll step of ORDER_POLL_S (unshaped
    ports, no cable: nothing else to wake it)."""
    import select
    import threading
    import time

    from emucore import rawsock
    from emucore.wire.ether import mac_bytes
    from switch_agent import fastagent
    from tests.unit.test_fast_pipeline import FIB, HOSTS, config
    from traffic.tools.rawgen import build_frame

    veths()
    cfg = config(None, shaped=False)
    fa = fastagent.build(cfg, "fast")
    fa.install_fib(*FIB)
    peers = {port: rawsock.open_port(peer) for port, peer in PEER.items()}
    rings = fa.open_rings(time.monotonic())
    fa.fast.c.set_poll(ORDER_POLL_S)
    ep = select.epoll()
    for fd in fa.by_fd:
        ep.register(fd, select.EPOLLIN)

    def send() -> None:
        time.sleep(ORDER_POLL_S / 3)
        for k in range(ORDER_N):
            port = ("eth1", "eth3")[k % 2]
            f = bytes(build_frame(mac_bytes(HOSTS[port][0]), mac_bytes(HOSTS["eth2"][0]),
                                  HOSTS[port][1], HOSTS["eth2"][1], 200))
            peers[port].send(f[:-1] + bytes([k]))
            time.sleep(ORDER_GAP_S)

    sender = threading.Thread(target=send)
    watchdog, sent = [], []
    wakes = fa.fast.c.loop_stats()[0]
    sender.start()
    end = time.monotonic() + 3 * ORDER_POLL_S
    while time.monotonic() < end:
        _, now = fa.fast.c.serve(ep.fileno(), end, True, fa.punted, watchdog, sent)
        fa.served(now, watchdog, sent)
    sender.join()
    wakes = fa.fast.c.loop_stats()[0] - wakes
    got = [f[-1] for f in (bytes.fromhex(h) for h in drain(peers["eth2"]))]
    count, max_s = fa.fast.c.meter()[:2]
    print(json.dumps({"rings": rings, "got": got, "wakes": wakes, "meter_count": count,
                      "meter_max_s": max_s, "tdf": cfg.tdf}))


#: the arrival-order child: frames, their spacing and the poll step (lab s)
ORDER_N, ORDER_GAP_S, ORDER_POLL_S = 8, 0.001, 0.03
N_BLAST, K = 3000, 5  # frames sent at eth5's ring of RING_RX slots; to eth2 down, then up


def drain(s) -> list[str]:
    out = []
    while True:
        try:
            out.append(s.recv(65535).hex())
        except BlockingIOError:
            return out


CHILD = "from tests.netns.test_fast_ring import child; child()"
ORDER_CHILD = "from tests.netns.test_fast_ring import order_child; order_child()"
OVERFLOW_CHILD = "from tests.netns.test_fast_ring import overflow_child; overflow_child()"


def run_child(code: str, sanitized: bool, tmp_path: Path) -> dict:
    """`code` in a network namespace of its own (under ASan + UBSan: the sanitized build,
    tests/unit/test_fast_pipeline's loading); the JSON it printed last."""
    cmd, env = [sys.executable, "-c", code], {**os.environ, "PYTHONPATH": str(ROOT)}
    if sanitized:
        from emucore import cbuild
        from tests.unit import test_fast_pipeline as t
        bound = t.SANITIZED_FLOW_CACHE_MAX  # the loader checks the build has it (argv[2])
        so = cbuild.build("switch_agent.fast._pipeline", sanitize=True, out_dir=tmp_path,
                          defines={"FLOW_CACHE_MAX": bound})
        load = t.SANITIZED_CHILD[:t.SANITIZED_CHILD.index("from tests.unit")]
        cmd = [sys.executable, "-c", load + code, str(so), str(bound)]
        env = cbuild.sanitized_env(tmp_path)
    r = subprocess.run(["unshare", "-n", *cmd], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "runtime error" not in r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("sanitized", [False, True])
def test_the_ring_loop_forwards_what_python_does(sanitized, tmp_path):
    """Also against an ASan + UBSan build (tests/unit/test_fast_pipeline's loading)."""
    out = run_child(CHILD, sanitized, tmp_path)
    assert out["rings"] and out["frames"] > 1000
    assert out["got"] == out["want"]
    assert out["counters"] == out["ref_counters"]
    assert sum(map(len, out["got"].values())) > 1000
    assert out["received"] == out["frames"]
    assert out["wakes"] < out["frames"] / 4  # frames share wake-ups
    assert out["down"] == 10
    assert out["netdown"] == 1 and out["spins"] <= 2


@pytest.mark.parametrize("sanitized", [False, True])
def test_no_frame_is_lost_without_a_count(sanitized, tmp_path):
    """RX: the ring took RING_RX frames while the loop did not poll, the kernel dropped
    the rest and said so (PACKET_STATISTICS: tp_packets counts every frame that reached
    the socket, tp_drops those dropped); the agent shows exactly its count, once, and
    logs it. TX: the K frames a kick could not send (no carrier) are K `tx_nobufs`,
    not sent, each logged; after the carrier is back the next K leave, and only they."""
    out = run_child(OVERFLOW_CHILD, sanitized, tmp_path)
    assert out["rings"] and out["sent"] == N_BLAST
    first, again = out["eth5"]
    assert out["received"] == out["ring_rx"]  # the ring's slots, filled before any poll
    assert sum(p for p, _ in out["reported"]) == out["sent"]
    dropped = sum(d for _, d in out["reported"])
    assert first["rx_ring_drops"] == dropped == first["drops"]["rx_ring_full"]
    assert out["sent"] == out["received"] + first["rx_ring_drops"]
    assert first["rx_packets"] == out["received"] and out["tx"] == 0
    assert again["rx_ring_drops"] == first["rx_ring_drops"]  # read once, not again
    assert out["ring_events"] == [dropped]
    down, up = out["down"], out["up"]
    assert down["drops"].get("tx_nobufs") == K and down["tx_packets"] == 0
    assert out["tx_events"] == [["eth2", 0]] * K
    assert up["tx_packets"] == K and up["drops"].get("tx_nobufs") == K
    assert sorted(out["got"]) == [100 + k for k in range(K)]


@pytest.mark.parametrize("sanitized", [False, True])
def test_frames_run_in_arrival_order_at_their_stamps(sanitized, tmp_path):
    """The first frame wakes the loop, which then polls: it sleeps ORDER_POLL_S without
    watching the ports while the other seven arrive at two ports in turn, then runs them
    in the order they arrived over both ports (not port by port, as the ports' readiness
    would have them) and each at its ring stamp: an unshaped port without a cable has a
    frame due on the wire at its arrival, so the second frame left about the poll step
    less one gap late (at least half of it, on a busy machine), which the lag meter shows (model seconds: lab / TDF) - a frame run
    at its wake-up would have left on time."""
    out = run_child(ORDER_CHILD, sanitized, tmp_path)
    assert out["rings"]
    assert out["got"] == list(range(ORDER_N))
    assert out["wakes"] < ORDER_N  # without polling: one or more per frame
    assert out["meter_count"] >= ORDER_N
    assert out["meter_max_s"] >= ORDER_POLL_S / 2 / out["tdf"]  # the second: ~0.97 of it
