"""`python -m emu bench ...`: measurements that print figures and ratios against a peer
measured in the same run (never timed assertions in the test suite).

bench forward: the switch agent's forwarding throughput between two hosts of one rail
(h1 -- rail1 -- h2, intra-rail, unshaped) against a Linux bridge between the same kind
of namespaces, with iperf3 TCP at MTU 9000 and 1500. Packets/s are payload bytes / MSS.
"""

from __future__ import annotations

import json
import subprocess
import time

import topologies
from emu.net import FabricNet

TCP_OVERHEAD = 20 + 20 + 12  # IPv4 + TCP + timestamps option


def iperf(fnet: FabricNet, seconds: float) -> float:
    """TCP goodput h1 -> h2 in bit/s (iperf3, one stream)."""
    a, b = fnet.fabric.gpus["h1g1"], fnet.fabric.gpus["h2g1"]
    server = fnet.host("h2").popen(["iperf3", "-s", "-1", "-B", b.ip],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        out = fnet.host("h1").popen(["iperf3", "-c", b.ip, "-B", a.ip, "-t", str(seconds), "-J"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        text, err = out.communicate(timeout=seconds + 30)
        data = json.loads(text)
        if "error" in data:
            raise RuntimeError(f"iperf3: {data['error']}")
        return float(data["end"]["sum_received"]["bits_per_second"])
    finally:
        server.kill()
        server.wait()


def forward(duration: float = 5.0) -> int:
    """Agent vs Linux bridge forwarding throughput; prints a table."""
    rows = []
    for mtu in (9000, 1500):
        fab = topologies.from_dict({"gpus_per_host": 1, "hosts": 2, "spines": 0, "mtu": mtu,
                                    "name": f"bench-mtu{mtu}"})
        res = {}
        for kind in ("agent", "bridge"):
            print(f"  measuring {kind} at MTU {mtu} for {duration:g} s ...", flush=True)
            with FabricNet(fab, shaping=False, switch_kind=kind) as fnet:
                res[kind] = iperf(fnet, duration)
        mss = mtu - TCP_OVERHEAD
        rows.append((mtu, res["agent"], res["agent"] / 8 / mss, res["bridge"],
                     res["bridge"] / 8 / mss))
    print("\nbench forward: h1 -> rail1 -> h2, one TCP stream (iperf3), offloads off, "
          "unshaped")
    print(f"{'MTU':>5} {'agent Gbps':>11} {'agent pps':>10} {'bridge Gbps':>12} "
          f"{'bridge pps':>11} {'agent/bridge':>13}")
    for mtu, ab, ap, bb, bp in rows:
        print(f"{mtu:>5} {ab / 1e9:>11.3f} {ap:>10.0f} {bb / 1e9:>12.3f} {bp:>11.0f} "
              f"{ab / bb:>13.2f}")
    return 0


ROCE_FRAME = 14 + 20 + 8 + 12 + 16 + 4096 + 4  # Eth/IPv4/UDP/BTH/RETH/4096 B/ICRC


def fabric_load(tdfs=(1000.0, 2000.0, 5000.0), duration: float = 5.0,
                topo: str = "rail2x4") -> int:
    """Which TDF does this machine sustain? Every GPU NIC sends RoCE-sized frames at half
    its host link's rate to the next host's GPU on another rail (every flow crosses
    rail -> spine -> rail; at half rate no uplink is oversubscribed whatever ECMP picks,
    so any loss is the machine falling behind); prints delivered / offered per TDF."""
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    print(f"bench tdf: {topo}, every GPU sends {ROCE_FRAME}-byte frames at half its line rate "
          f"to the next host's GPU on another rail, {duration:g} s per TDF")
    print(f"{'TDF':>6} {'lab link':>9} {'offered Mbps':>13} {'delivered Mbps':>15} "
          f"{'delivered/offered':>18} {'agent drops':>12}")
    for tdf in tdfs:
        fab = topologies.load(topo, tdf=tdf)
        gpus = fab.gpu_list()
        hosts = sorted({g.host for g in gpus}, key=lambda h: int(h[1:]))
        with FabricNet(fab) as fnet:
            procs = []
            for g in gpus:
                nxt = hosts[(hosts.index(g.host) + 1) % len(hosts)]
                rails = sorted({x.rail for x in gpus})
                other = rails[(rails.index(g.rail) + 1) % len(rails)]
                d = fab.gpus[f"{nxt}g{other}"]
                rate = 0.5 * fnet.td.lab_rate(fab.link_of(g.host, g.nic).model_bps)
                procs.append(fnet.host(g.host).popen(
                    [sys.executable, "-m", "traffic.rawgen", "--iface", g.nic, "--src-ip", g.ip,
                     "--dst-ip", d.ip, "--dst-mac", g.gateway_mac, "--size", str(ROCE_FRAME),
                     "--rate", str(rate), "--duration", str(duration + 2), "--dscp", "24",
                     "--ecn", "2", "--dport", "4791"],
                    cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            time.sleep(1.0)
            a = {s.name: fnet.counters(s.name) for s in fab.switches()}
            time.sleep(duration)
            b = {s.name: fnet.counters(s.name) for s in fab.switches()}
            sent = [json.loads(p.communicate(timeout=duration + 30)[0] or "{}") for p in procs]
        offered = sum(x.get("rate_bps", 0) for x in sent)
        delivered = drops = 0.0
        for sw in b:
            for port, c in b[sw]["ports"].items():
                drops += sum(c["drops"].values()) - sum(a[sw]["ports"][port]["drops"].values())
                if c["peer"].startswith("h"):
                    dt = b[sw]["t_lab"] - a[sw]["t_lab"]
                    delivered += (c["tx_bytes"] - a[sw]["ports"][port]["tx_bytes"]) * 8 / dt
        print(f"{tdf:>6g} {fnet.td.lab_rate(2e11) / 1e6:>7g} M {offered / 1e6:>13.1f} "
              f"{delivered / 1e6:>15.1f} {delivered / offered if offered else 0:>18.3f} "
              f"{drops:>12.0f}", flush=True)
    return 0
