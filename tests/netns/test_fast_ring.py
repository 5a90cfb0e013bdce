"""The fast agent's own loop on PACKET_MMAP rings (switch_agent/fast/loop.h, ring.h): in a
network namespace of its own (`unshare -n`) with a veth pair per switch port, frames
sent at the ports' peers go through TPACKET_V2 RX rings, C's pipeline (flows the Python
control plane decides, expired TTLs it answers) and the TX rings; the peers receive
what the Python reference agent sends for the same frames, port by port, and the
counters are the reference's. Python's own sends (LLDP) leave through the TX ring, and
many frames share one wake-up. Also a port going down (counted once, as serve does) and
the switch down: frames counted and dropped."""

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

    subprocess.run("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                   "net.ipv6.conf.default.disable_ipv6=1", shell=True, check=True)
    for port, peer in PEER.items():
        subprocess.run(f"ip link add {port} mtu 9300 type veth peer name {peer} mtu 9300 && "
                       f"ip link set {port} up && ip link set {peer} up", shell=True, check=True)
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


def drain(s) -> list[str]:
    out = []
    while True:
        try:
            out.append(s.recv(65535).hex())
        except BlockingIOError:
            return out


CHILD = "from tests.netns.test_fast_ring import child; child()"


@pytest.mark.parametrize("sanitized", [False, True])
def test_the_ring_loop_forwards_what_python_does(sanitized, tmp_path):
    """Also against an ASan + UBSan build (tests/unit/test_fast_pipeline's loading)."""
    cmd, env = [sys.executable, "-c", CHILD], {**os.environ, "PYTHONPATH": str(ROOT)}
    if sanitized:
        from emucore import cbuild
        from tests.unit import test_fast_pipeline as t
        so = cbuild.build("switch_agent.fast._pipeline", sanitize=True, out_dir=tmp_path)
        load = t.SANITIZED_CHILD[:t.SANITIZED_CHILD.index("from tests.unit")]
        cmd, env = [sys.executable, "-c", load + CHILD, str(so)], cbuild.sanitized_env(tmp_path)
    r = subprocess.run(["unshare", "-n", *cmd], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "runtime error" not in r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rings"] and out["frames"] > 1000
    assert out["got"] == out["want"]
    assert out["counters"] == out["ref_counters"]
    assert sum(map(len, out["got"].values())) > 1000
    assert out["received"] == out["frames"]
    assert out["wakes"] < out["frames"] / 4  # frames share wake-ups
    assert out["down"] == 10
    assert out["netdown"] == 1 and out["spins"] <= 2
