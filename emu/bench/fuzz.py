"""`emu bench fuzz` (issue 14: fuzzed frames): malformed frames on a live fabric while
a legitimate RDMA WRITE runs; the agent and the NICs must survive, drop and count them.

Three hosts on one switch (h1, h2, h3 -- rail1, one GPU each, no spine) with the book's
QoS (PFC mode auto: LLDP/DCBX and PFC run), NICs on h1g1 and h2g1. h1g1 writes `size`
random bytes into h2g1's memory (traffic.workloads.rdma.write, which compares the
target memory byte for byte) while `frames` malformed frames (emu.bench.malformed, every
category in turn) go out of raw AF_PACKET sockets, paced at `rate` frames/s,
interleaved:

* "router" (an eighth): from h3's namespace on its NIC interface, the unicast ones aimed
  at the switch port's MAC: rail1's agent routes, drops or parses them (PFC, LLDP/DCBX).
* "switched" (an eighth): the same, aimed at h2g1's MAC: the agent switches them on to
  h2's NIC, sharing the flow's egress queue.
* "wire" (the rest; one in two of its first frames an eighth of malformed UET frames,
  emu.bench.malformed_uet, issue 32): into h2g1's NIC directly, sent on the far end of its link (rail1's
  port towards h2, from the switch's namespace): a frame sent on the NIC's own
  interface would be outgoing there, and the NIC's socket ignores outgoing frames (as
  the agent's socket on that port ignores these).

The garbage enters the switch from a third host, as from a broken neighbour: the raw
sockets obey no PFC pause, so a flood on the flow's own ingress port would overflow
its headroom and drop the flow's frames too (lossless needs senders that pause). At TDF
1000 (200 Mbit/s lab links) and 10,000 frames/s, the agent-bound eighth is ~15 % of
the egress towards h2.

RoCE frames carry QPN 0x123456, not the flow's QP: they exercise the parsers and the
unknown-QP path without killing the flow's QP by a valid invalid request (which a real
NIC answers with a fatal NAK too). Then: are the agent and both NIC processes alive and
answering a control ping, what did their malformed / bad-checksum / drop counters count,
was the write byte-exact. Prints a table per category and the counters; the last line
is "N crashes". Needs root (namespaces).
"""

from __future__ import annotations

import errno
import socket
import threading
import time

from rich.console import Console
from rich.table import Table

import topologies
from emu.realise import nsutil
from emu.realise.net import FabricNet
from emu.bench.malformed import CATEGORIES, base_frames, malformed_frames
from emu.bench.malformed_uet import UET_CATEGORIES, malformed_uet_frames, uet_base_frames
from emucore.qos.qosconfig import QosConfig
from traffic.nic.client import request
from traffic.workloads import rdma

SRC, DST, INJECTOR = "h1g1", "h2g1", "h3g1"
NIC_COUNTERS = ("rx_frames", "rx_malformed", "rx_bad_checksum", "rx_other", "rx_unknown_qp",
                "pfc_rx")
STREAMS = ("router", "switched", "wire")


def raw_socket(fnet: FabricNet, node: str, ifname: str) -> socket.socket:
    """A send-only AF_PACKET socket on `ifname` in `node`'s namespace (protocol 0: it
    receives nothing)."""
    with nsutil.in_netns(nsutil.ns_name(fnet.tag, node)):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        s.bind((ifname, 0))
    return s


def sendable(seed: int, n: int, base: dict, **aim) -> list[tuple[str, bytes]]:
    """The first n generated frames a wire can carry: a packet socket refuses frames
    shorter than the Ethernet header (EINVAL), so those are skipped, not counted."""
    out = []
    for cat, frame in malformed_frames(seed, 2 * n + 100, base, **aim):
        if len(frame) >= 14:
            out.append((cat, frame))
            if len(out) == n:
                break
    return out


def interleave(streams: dict[str, list]) -> list[tuple[str, str, bytes]]:
    """(stream, category, frame), one of each stream in turn."""
    out = []
    lists = [[(name, c, f) for c, f in fr] for name, fr in streams.items()]
    for i in range(max(map(len, lists))):
        out += [lst[i] for lst in lists if i < len(lst)]
    return out


def inject(socks: dict[str, socket.socket], todo: list, rate: float) -> dict:
    """Send every frame on its stream's socket at `rate` frames/s; per (stream, category)
    how many were sent, and send errors by errno name (EINVAL: shorter than an Ethernet
    header, EMSGSIZE: longer than the MTU)."""
    sent: dict = {}
    t0 = time.monotonic()
    for i, (stream, cat, frame) in enumerate(todo):
        if i % 100 == 0:  # pacing: the injector does not outrun the agent's socket buffer
            ahead = t0 + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        row = sent.setdefault((stream, cat), {"sent": 0, "errors": {}})
        for attempt in range(4):
            try:
                socks[stream].send(frame)
                row["sent"] += 1
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS and attempt < 3:
                    time.sleep(0.001)
                    continue
                name = errno.errorcode.get(exc.errno, str(exc.errno))
                row["errors"][name] = row["errors"].get(name, 0) + 1
                break
    return sent


def snapshot(fnet: FabricNet, nic_socks: dict[str, str]) -> dict:
    """The agent's port counters and the NICs' receive counters (None: no answer)."""
    out: dict = {}
    try:
        out["rail1"] = fnet.counters("rail1")["ports"]
    except (OSError, ValueError):
        out["rail1"] = None
    for g, path in nic_socks.items():
        try:
            out[g] = request(path, {"cmd": "counters"})
        except Exception:  # NicError, OSError, ValueError: the NIC is gone or mute
            out[g] = None
    return out


def alive(fnet: FabricNet, procs: dict, nic_socks: dict[str, str]) -> dict[str, bool]:
    """Process running and answering a control ping, per process."""
    out = {}
    for name, proc in procs.items():
        ok = proc is not None and proc.poll() is None and nsutil.alive(proc.pid)
        try:
            if name == "rail1":
                ok = ok and fnet.agent_request("rail1", {"cmd": "ping"}).get("ok") is True
            else:
                ok = ok and request(nic_socks[name], {"cmd": "ping"}).get("ok") is True
        except Exception:  # no answer: dead or hung
            ok = False
        out[name] = ok
    return out


def flowing(path: str, deadline: float, done: threading.Event) -> bool:
    """Wait until the receiving NIC's QP has taken packets (the write runs)."""
    while time.monotonic() < deadline and not done.is_set():
        try:
            qps = request(path, {"cmd": "counters"})["qps"].values()
            if any(q["rx_packets"] > 0 for q in qps):
                return True
        except Exception:
            return False
        time.sleep(0.05)
    return False


def delta(after: dict | None, before: dict | None, key: str) -> int | str:
    """after - before of one counter, or '-' when a process did not answer."""
    if after is None or before is None:
        return "-"
    return after.get(key, 0) - before.get(key, 0)


def report(sent: dict, before: dict, after: dict, ports: dict[str, str], up: dict,
           flow: dict) -> int:
    """Print the tables; the number of crashes (processes dead or mute)."""
    con = Console()
    t = Table(title="bench fuzz: frames per category (sent / send errors)")
    t.add_column("category")
    for s in STREAMS:
        t.add_column(s, justify="right")
    for cat in CATEGORIES + UET_CATEGORIES:
        cells = []
        for s in STREAMS:
            r = sent.get((s, cat), {"sent": 0, "errors": {}})
            err = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items()))
            cells.append(f"{r['sent']}" + (f" / {err}" if err else ""))
        t.add_row(cat, *cells)
    con.print(t)
    c = Table(title="counters during the run (deltas)")
    for col in ("process", "alive", "rx frames", "malformed", "bad checksum", "other"):
        c.add_column(col, justify="left" if col in ("process", "other") else "right")
    for port, peer in ports.items():
        a, b = ((x["rail1"] or {}).get(port) for x in (after, before))
        drops = {k: delta(a["drops"], b["drops"], k) for k in a["drops"]} if a and b else {}
        other = ", ".join(f"{k} {v}" for k, v in sorted(drops.items()) if k != "malformed" and v)
        c.add_row(f"rail1 {port} (from {peer})", str(up["rail1"]),
                  str(delta(a, b, "rx_packets")), str(drops.get("malformed", 0)), "",
                  other)
    for g in (SRC, DST):
        a, b = after.get(g), before.get(g)
        c.add_row(f"NIC {g}", str(up[g]), str(delta(a, b, "rx_frames")),
                  str(delta(a, b, "rx_malformed")), str(delta(a, b, "rx_bad_checksum")),
                  ", ".join(f"{k.removeprefix('rx_')} {delta(a, b, k)}" for k in NIC_COUNTERS[3:]))
    con.print(c)
    print(f"flow {SRC} -> {DST}: " + (f"{flow['error']}" if "error" in flow else
          f"{flow['status']}, byte-exact {flow['byte_exact']}, {flow['size']} bytes in "
          f"{flow['seconds_lab']:.2f} s lab, retransmits {flow['retransmits']}, "
          f"timeouts {flow['timeouts']}"))
    return sum(not ok for ok in up.values())


def fuzz_bench(frames: int = 100_000, seed: int = 1, tdf: float = 1000, rate: float = 10_000.0,
               size: int | None = None) -> int:
    """Inject `frames` malformed frames (seed `seed`) at `rate` frames/s during a `size`-byte
    RDMA WRITE h1g1 -> h2g1 at TDF `tdf` (None: long enough to outlast the injection at
    80 % of line rate, at most 256 MB); 0 when nothing crashed and the write was
    byte-exact."""
    fab = topologies.from_dict({"gpus_per_host": 1, "hosts": 3, "spines": 0,
                                "name": "bench-fuzz", "tdf": tdf})
    src, dst, inj = fab.gpus[SRC], fab.gpus[DST], fab.gpus[INJECTOR]
    if size is None:
        lab_bps = fab.td.lab_rate(fab.link_of(src.host, src.nic).model_bps)
        size = min(256 << 20, max(1 << 20, -(-int(
            1.5 * frames / rate * 0.8 * lab_bps / 8) >> 20) << 20))
    qos = QosConfig()
    base = base_frames(src.mac, dst.mac, src.ip, dst.ip, qos=qos)
    eighth = frames // 8  # through the agent: an eighth each; the rest into the NIC
    streams = {"router": sendable(seed, eighth, base, dst_mac=inj.gateway_mac),
               "switched": sendable(seed + 1, eighth, base),
               "wire": sendable(seed + 2, frames - 3 * eighth, base)}
    # an eighth of UET frames (issue 32) interleaved into the wire stream, aimed at DST
    uet = list(malformed_uet_frames(seed + 3, eighth, uet_base_frames(
        src.mac, dst.mac, src.ip, dst.ip)))
    streams["wire"] = [f for pair in zip(streams["wire"], uet) for f in pair] + \
        streams["wire"][len(uet):]
    ports = {local.ifname: remote.node for local, remote, _ in fab.node_links("rail1")
             if remote.node in (src.host, dst.host, inj.host)}
    wire_port = next(p for p, peer in ports.items() if peer == dst.host)
    print(f"bench fuzz: {frames} malformed frames (seed {seed}, {rate:g}/s) into rail1 (from "
          f"{inj.host}) and {DST}'s NIC during a {size >> 20} MB RDMA WRITE {SRC} -> {DST}, "
          f"TDF {tdf:g}", flush=True)
    flow: dict = {}
    done = threading.Event()
    with FabricNet(fab, qos=qos) as fnet:
        missing = fnet.wait_pfc()
        if missing:
            print(f"  PFC not negotiated on {missing} (LLDP/DCBX): going on", flush=True)
        nic_socks = fnet.start_nics(gpus=[SRC, DST])
        procs = {"rail1": fnet.net["rail1"].agent, **dict(zip((SRC, DST), fnet.nics.procs))}
        socks = {"router": raw_socket(fnet, inj.host, inj.nic),
                 "switched": raw_socket(fnet, inj.host, inj.nic),
                 "wire": raw_socket(fnet, "rail1", wire_port)}
        before = snapshot(fnet, nic_socks)

        def write() -> None:
            try:
                flow.update(rdma.write(fab, nic_socks, SRC, DST, size))
            except Exception as exc:  # a NIC died or refused: the flow failed
                flow["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                done.set()

        th = threading.Thread(target=write, name="bench-fuzz-write", daemon=True)
        th.start()
        try:
            if not flowing(nic_socks[DST], time.monotonic() + 60.0, done):
                print("  the write did not start within 60 s: injecting anyway", flush=True)
            sent = inject(socks, interleave(streams), rate)
            print(f"  injected {sum(r['sent'] for r in sent.values())} frames; waiting for "
                  "the write", flush=True)
            deadline = time.monotonic() + rdma.patience(fab, size, SRC) + 60.0
            while not done.wait(1.0) and time.monotonic() < deadline:
                if any(p.poll() is not None for p in procs.values()):
                    break  # a process died: the write cannot finish
        finally:
            for s in socks.values():
                s.close()
        result = dict(flow) if done.is_set() else {"error": "the write did not finish"}
        up = alive(fnet, procs, nic_socks)
        after = snapshot(fnet, nic_socks)
    crashes = report(sent, before, after, ports, up, result)
    exact = result.get("status") == "SUCCESS" and result.get("byte_exact") is True
    print(f"{crashes} crashes")
    return 0 if crashes == 0 and exact else 1
