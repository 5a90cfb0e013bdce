"""`python -m emu bench ...`: measurements that print figures and ratios against a peer
measured in the same run (never timed assertions in the test suite).

bench tdf, speed: the fabric under load per TDF; the lowest TDF kept up beside ns-3.

bench forward: the switch agent's forwarding throughput between two hosts of one rail
(h1 -- rail1 -- h2, intra-rail, unshaped) against a Linux bridge between the same kind
of namespaces, with iperf3 TCP at MTU 9000 and 1500. Packets/s are payload bytes / MSS.

forward, tdf and speed measure on the data paths `--datapath` names, by default the
Python and the compiled one alternately in one invocation (emu.bench.paths; `bench
fidelity`: emu.bench.fidelity).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import topologies
from collectives.launch import run_job
from emu.bench.cluster import cluster as cluster_bench  # noqa: F401 (`emu bench cluster`)
from emu.bench.lb import lb as lb_bench  # noqa: F401 (emu bench lb)
from emu.bench.fuzz import fuzz_bench  # noqa: F401 (`emu bench fuzz`)
from emu.bench.train import train as train_bench  # noqa: F401 (`emu bench train`)
from emu.bench.transport import transport as transport_bench  # noqa: F401 (`emu bench transport`)
from emu.bench import paths as paths_
from emu.bench.fidelity import fidelity  # noqa: F401 (`emu bench fidelity`)
from emu.observe import calibrate, guard
from emu.realise.net import FabricNet
from emu.peers import ns3_env, spec
from emu.realise.procs import run_module
from emucore import datapath
from emucore.qos.qosconfig import QosConfig
from emucore.wire.templates import bench_build
from traffic.workloads import rdma

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


def forward(duration: float = 5.0, paths: tuple[str, ...] = paths_.BOTH) -> int:
    """Agent vs Linux bridge forwarding throughput, the agent on each data path of `paths`
    (alternating, emu.bench.paths), the bridge once per MTU; prints a table."""
    rows = []
    for mtu in (9000, 1500):
        fab = topologies.from_dict({"gpus_per_host": 1, "hosts": 2, "spines": 0, "mtu": mtu,
                                    "name": f"bench-mtu{mtu}"})
        res: dict[str, tuple[float | None, str]] = {}
        for _, kind in paths_.alternate([*paths, "bridge"], [mtu]):
            print(f"  measuring {kind} at MTU {mtu} for {duration:g} s ...", flush=True)
            with paths_.use(datapath.DEFAULT if kind == "bridge" else kind):
                try:
                    with FabricNet(fab, shaping=False,
                                   switch_kind="bridge" if kind == "bridge" else "agent") as fnet:
                        ran = "kernel" if kind == "bridge" else \
                            paths_.agents_path({"rail1": fnet.counters("rail1")})
                        res[kind] = (iperf(fnet, duration), ran)
                    print(f"  {kind} at MTU {mtu}: {res[kind][0] / 1e9:.3f} Gbps ({ran})",
                          flush=True)
                except Exception as exc:  # a fabric that did not come up: the rest still print
                    print(f"  {kind} at MTU {mtu}: failed: {exc!r}", flush=True)
                    res[kind] = (None, "failed")
        rows.append((mtu, res))
    mss = {mtu: mtu - TCP_OVERHEAD for mtu, _ in rows}
    print("\nbench forward: h1 -> rail1 -> h2, one TCP stream (iperf3), offloads off, "
          "unshaped (no TDF, so no fidelity verdict); agents ran: c = compiled, python")
    print("\n".join(paths_.legend(paths)))
    table = []
    for mtu, res in rows:
        bridge = res["bridge"][0]
        for m in paths:
            bps, ran = res[m]
            table.append([str(mtu), m, ran, _num(bps, 1e9, ".3f"), _num(bps, 8 * mss[mtu], ".0f"),
                          _num(bridge, 1e9, ".3f"), _num(bridge, 8 * mss[mtu], ".0f"),
                          format(bps / bridge, ".2f") if bps and bridge else "-"])
        if len(paths) == 2:
            f, p = (paths_.Figure(m, res[m][0]) for m in ("fast", "python"))
            table.append([str(mtu), "fast/python", "", paths_.ratio_cell(f, p), "", "", "",
                          ""])
    print("\n".join(paths_.render(["MTU", "path", "agents", "agent Gbps", "agent pps",
                                   "bridge Gbps", "bridge pps", "agent/bridge"], table, 3)))
    return 0 if all(r[0] is not None for _, res in rows for r in res.values()) else 1


def _num(value: float | None, unit: float, fmt: str) -> str:
    """value / unit formatted, "-" for None."""
    return "-" if value is None else format(value / unit, fmt)


ROCE_FRAME = calibrate.ROCE_FRAME


def load_trial(topo: str, tdf: float, load: float, duration: float) -> dict:
    """One TDF of `bench tdf`: the cross-rail load (emu.peers.spec.flow_pairs) at `load` x line rate
    for `duration` s after a 1 s start, the book's QoS, senders honouring PFC. Returns
    offered and delivered lab bit/s, agent drops, the agents' CPU per forwarded frame,
    the fidelity guard's verdict on the agents over the window (emu.observe.guard) and
    the data path the agents reported (emu.bench.paths.agents_path)."""
    fab = topologies.load(topo, tdf=tdf)
    with FabricNet(fab, qos=QosConfig()) as fnet:  # the book's QoS, as `emu run`
        procs = []
        for g, d in spec.flow_pairs(fab):
            model = fab.link_of(g.host, g.nic).model_bps
            rate = load * fnet.td.lab_rate(model)
            procs.append(run_module(fnet.host(g.host), "traffic.tools.rawgen", [
                 "--iface", g.nic, "--src-ip", g.ip,
                 "--dst-ip", d.ip, "--dst-mac", g.gateway_mac, "--size", str(ROCE_FRAME),
                 "--rate", str(rate), "--duration", str(duration + 2), "--dscp", "24",
                 "--ecn", "2", "--dport", "4791", "--honor-pfc", "--tdf", str(tdf),
                 "--model-rate", str(model)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        time.sleep(1.0)
        for s in fab.switches():
            fnet.agent_request(s.name, {"cmd": "fidelity_reset"})
        a = {s.name: fnet.counters(s.name) for s in fab.switches()}
        time.sleep(duration)
        b = {s.name: fnet.counters(s.name) for s in fab.switches()}
        sent = [json.loads(p.communicate(timeout=duration + 30)[0] or "{}") for p in procs]
    offered = sum(x.get("rate_bps", 0) for x in sent)
    delivered = drops = frames = cpu = wakeups = received = 0.0
    for sw in b:
        cpu += b[sw]["fidelity"]["cpu_s"] - a[sw]["fidelity"]["cpu_s"]
        wakeups += b[sw]["fidelity"]["wakeups"] - a[sw]["fidelity"]["wakeups"]
        for port, c in b[sw]["ports"].items():
            drops += sum(c["drops"].values()) - sum(a[sw]["ports"][port]["drops"].values())
            frames += c["tx_packets"] - a[sw]["ports"][port]["tx_packets"]
            received += c["rx_packets"] - a[sw]["ports"][port]["rx_packets"]
            if c["peer"].startswith("h"):
                dt = b[sw]["t_lab"] - a[sw]["t_lab"]
                delivered += (c["tx_bytes"] - a[sw]["ports"][port]["tx_bytes"]) * 8 / dt
    fid = guard.judge(fab, b)["fidelity"]
    return {"tdf": tdf, "lab_link_bps": fnet.td.lab_rate(2e11), "offered_bps": offered,
            "delivered_bps": delivered, "drops": drops,
            "cpu_us_per_frame": cpu / frames * 1e6 if frames else 0.0,
            "frames_per_wakeup": received / wakeups if wakeups else 0.0,
            "kept_up": bool(fid["kept_up"]), "p99_lag_model_us": fid["p99_lag_model_us"],
            "agents": paths_.agents_path(b)}


def fabric_load(tdfs=(1000.0, 2000.0, 5000.0, 10000.0), duration: float = 5.0,
                topo: str = "rail2x4", load: float = 0.5,
                paths: tuple[str, ...] = paths_.BOTH) -> int:
    """Which TDF does this machine sustain, on each data path? Every GPU NIC sends
    RoCE-sized frames at `load` x its host link's rate to the next host's GPU on another
    rail (every flow crosses rail -> spine -> rail; at half rate no uplink is
    oversubscribed whatever ECMP picks, so any loss is the machine falling behind);
    senders honour PFC; per TDF and path (alternating): delivered / offered, the agents'
    CPU per frame-hop and the guard's p99 lag, and the CPU ratio fast / python."""
    print(f"bench tdf: {topo}, every GPU sends {ROCE_FRAME}-byte frames at {load:g} x its line "
          f"rate to the next host's GPU on another rail, {duration:g} s per TDF and path",
          flush=True)
    trials = {}
    for tdf, m in paths_.alternate(paths, tdfs):
        print(f"  TDF {tdf:g}, {m} ...", flush=True)
        trials[(tdf, m)] = _trial(topo, tdf, load, duration, m)
    print("\n".join(paths_.legend(paths)))
    rows = []
    for tdf in tdfs:
        for m in paths:
            r = trials[(tdf, m)]
            if r is None:
                rows.append([f"{tdf:g}", m, "failed"] + [""] * 9)
                continue
            off, dlv = r["offered_bps"], r["delivered_bps"]
            rows.append([f"{tdf:g}", m, r["agents"], f"{r['lab_link_bps'] / 1e6:g} M",
                         f"{off / 1e6:.1f}", f"{dlv / 1e6:.1f}", f"{dlv / off if off else 0:.3f}",
                         f"{r['drops']:.0f}", f"{r['cpu_us_per_frame']:.1f}",
                         f"{r['frames_per_wakeup']:.2f}",
                         f"{r['p99_lag_model_us']:.2f} us", paths_.verdict(r["kept_up"])])
        if len(paths) == 2:
            f, p = (_cpu_figure(trials[(tdf, m)], m) for m in ("fast", "python"))
            rows.append([f"{tdf:g}", "fast/python", "", "", "", "", "", "",
                         paths_.ratio_cell(f, p), "", "", ""])
    print("\n".join(paths_.render(["TDF", "path", "agents", "lab link", "offered Mbps",
                                   "delivered Mbps", "delivered/offered", "agent drops",
                                   "agent CPU us/frame", "frames/wake-up", "guard p99 lag",
                                   "fidelity"], rows, 3)))
    return 0 if all(r is not None for r in trials.values()) else 1


def _trial(topo: str, tdf: float, load: float, duration: float, mode: str) -> dict | None:
    """`load_trial` with the fabric on data path `mode`; None (said why) if it did not start."""
    with paths_.use(mode):
        try:
            return load_trial(topo, tdf, load, duration)
        except Exception as exc:  # e.g. an agent refused --datapath fast: the rest still print
            print(f"  {topo} TDF {tdf:g} on {mode}: {exc}", flush=True)
            return None


def _cpu_figure(r: dict | None, mode: str) -> paths_.Figure:
    """A trial's CPU per frame-hop as a figure with its verdict."""
    return paths_.Figure(mode, r and r["cpu_us_per_frame"], r and r["kept_up"])


#: `bench speed`'s ladder, from issue 30's aim (TDF 1000) up
SPEED_TDFS = (1000.0, 1500.0, 2000.0, 3000.0, 5000.0, 7000.0, 10000.0, 15000.0, 20000.0,
              30000.0, 50000.0, 70000.0, 100000.0, 150000.0, 200000.0)


def speed(topos: tuple[str, ...] = ("rail2x4",), load: float = 1.0, duration: float = 5.0,
          sim_ms: float = 2.0, paths: tuple[str, ...] = paths_.BOTH) -> int:
    """emu's lowest TDF that keeps up, per data path, beside ns-3's slowdown, same topology
    and load (every NIC sends cross-rail at `load` x line rate: emu.peers.spec), measured
    in the same run. emu: `load_trial` at rising TDFs, each path (alternating) until the
    guard says its agents kept up with no drops. ns-3 3.44 (its own venv, set up on first
    use; skipped if it cannot be): wall / simulated time of `sim_ms` of the same traffic,
    a thinner model (no PFC, ECN, RoCE; per-packet ECMP). Ratio emu TDF / ns-3 slowdown:
    < 1 = emu faster; fast / python: the paths' lowest TDFs."""
    print(f"bench speed: every GPU sends {ROCE_FRAME}-byte frames at {load:g} x line rate to "
          f"the next host's GPU on the next rail; emu: the lowest TDF its guard says kept up "
          f"({duration:g} s each) on each data path, ns-3: wall / simulated time of "
          f"{sim_ms:g} ms", flush=True)
    venv = ns3_env.ensure_venv()
    rows = []
    for topo in topos:
        found: dict[str, dict] = {}
        for tdf in SPEED_TDFS:
            for m in [m for m in paths if m not in found]:
                r = _trial(topo, tdf, load, duration, m)
                ok = r is not None and r["kept_up"] and r["drops"] == 0
                if r is not None:
                    print(f"  emu {topo} {m} TDF {tdf:g}: p99 lag {r['p99_lag_model_us']:.2f} us "
                          f"model, {r['drops']:.0f} drops, {r['cpu_us_per_frame']:.0f} us CPU "
                          f"per frame-hop -> {'kept up' if ok else 'fell behind'}", flush=True)
                if ok:
                    found[m] = r
            if len(found) == len(paths):
                break
        ns3 = None
        if venv is not None:
            print(f"  ns-3 {topo}: simulating {sim_ms:g} ms ...", flush=True)
            try:
                ns3 = ns3_env.run(spec.fabric_spec(topologies.load(topo), load), sim_ms, venv)
            except RuntimeError as exc:
                print(f"  ns-3 {topo}: failed: {exc}", flush=True)
        rows.append((topo, found, ns3))
    print("\n".join(paths_.legend(paths)))
    table = []
    for topo, found, ns3 in rows:
        n = ns3["slowdown"] if ns3 else None
        for m in paths:
            r = found.get(m)
            e = r["tdf"] if r else None
            table.append([topo, m, r["agents"] if r else "-",
                          format(e, ",.0f") if e else "> " + format(SPEED_TDFS[-1], ",.0f"),
                          f"{r['cpu_us_per_frame']:.1f}" if r else "-",
                          format(n, ",.0f") if n else "not run",
                          format(e / n, ".2f") if e and n else "-"])
        if len(paths) == 2:
            f, p = (paths_.Figure(m, found[m]["tdf"] if m in found else None) for m in
                    ("fast", "python"))
            table.append([topo, "fast/python", "", paths_.ratio_cell(f, p), "", "", ""])
    print("\n".join(paths_.render(["topology", "path", "agents", "emu lowest TDF kept up",
                                   "CPU us/frame-hop", "ns-3 slowdown", "emu / ns-3"],
                                  table, 3)))
    if venv is None:
        print("(ns-3 not available: see the message above; `python -m emu.peers.ns3_env` sets "
              "it up)")
    return 0


def switch_pipeline(n: int = 200_000) -> int:
    """Per-packet cost of the agent's pipeline, QoS on (book) vs plain forwarding, for
    switched (intra-rail) and routed (cross-rail) RoCE-sized frames, in one process
    (emu.observe.calibrate, which `--tdf auto` runs too)."""
    res = {}
    for mode in ("plain", "qos"):
        a = calibrate.pipeline_agent(qos=mode == "qos")
        for kind, f in calibrate.frames().items():
            res[(mode, kind)] = calibrate.time_frames(a, f, n)
    frames = calibrate.frames()
    print(f"bench switch: agent pipeline per frame ({ROCE_FRAME}-byte DSCP 24 ECT frames, "
          f"{n} each, rx->classify->PFC->WRED->queue->schedule->shape->tx, no system calls)")
    print(f"{'path':<9} {'plain us/pkt':>13} {'plain pps':>10} {'qos us/pkt':>11} "
          f"{'qos pps':>9} {'qos/plain':>10}")
    for kind in frames:
        p, q = res[("plain", kind)], res[("qos", kind)]
        print(f"{kind:<9} {p * 1e6:>13.2f} {1 / p:>10.0f} {q * 1e6:>11.2f} {1 / q:>9.0f} "
              f"{q / p:>10.2f}")
    return 0


def rnic(size: int = 32 << 20, tdf: float | None = None) -> int:
    """Single-QP RDMA WRITE goodput through the emulated NICs (h1g1 -> rail1 -> h2g1) as a
    fraction of the lab link rate, and frame build rate of the byte templates vs Scapy."""
    tpl, scp = bench_build()
    print(f"bench rnic: frame build (4096-byte WRITE ONLY with RETH and ICRC): template "
          f"{tpl:,.0f} frames/s, Scapy {scp:,.0f} frames/s, template/Scapy {tpl / scp:.0f}x",
          flush=True)
    fab = topologies.from_dict({"gpus_per_host": 1, "hosts": 2, "spines": 0,
                                "name": "bench-rnic", **({"tdf": tdf} if tdf else {})})
    with FabricNet(fab) as fnet:
        socks = fnet.start_nics(gpus=["h1g1", "h2g1"])
        r = rdma.write(fab, socks, "h1g1", "h2g1", size)
    lab = fnet.td.lab_rate(fab.link_of("h1", "nic1").model_bps)
    payload = 4096 / (4096 + ROCE_FRAME - 4096 - 16)  # payload / frame of a MIDDLE packet
    print(f"bench rnic: one QP, {size >> 20} MB RDMA WRITE h1g1 -> h2g1 at TDF {fab.tdf:g} "
          f"(lab link {lab / 1e6:g} Mbps): {r['status']}, byte-exact {r['byte_exact']}, "
          f"{r['seconds_lab']:.2f} s lab")
    print(f"  goodput {r['goodput_model_bps'] / 1e9:.1f} Gbps model = {r['link_fraction']:.3f} "
          f"of the lab link rate (payload/frame bound {payload:.3f}); retransmits "
          f"{r['retransmits']}")
    return 0 if r["status"] == "SUCCESS" else 1


def allreduce(sizes: str = "1MB,16MB,64MB", iters: int = 2) -> int:
    """Ring AllReduce busbw on rail2x4 (8 PyTorch workers, backend "emu", book QoS) as a
    fraction of the model link rate, and the same job through torch's gloo over the
    frontend's kernel TCP, in the same run (book ch.14; nccl-tests' busbw)."""
    fab = topologies.load("rail2x4")
    link = fab.link_of("h1", fab.gpus["h1g1"].nic).model_bps
    rows = {}
    with tempfile.TemporaryDirectory(prefix="emu-bench-") as tmp, \
            FabricNet(fab, run_dir=Path(tmp), qos=QosConfig()) as fnet:  # logs in tmp
        fnet.wait_pfc()
        socks = fnet.start_nics()
        for backend in ("emu", "gloo"):
            print(f"  {backend}: AllReduce of {sizes} on 8 ranks, {iters} timed iterations "
                  "each ...", flush=True)
            job = run_job(fnet, ["--module", "collectives.workloads.allreduce", "--backend",
                                 backend, "--size", sizes, "--iters", str(iters)], socks,
                          Path(tmp) / backend, echo=None, backend=backend)
            if not job["ok"] or 0 not in job["results"]:
                for r in job["failed"]:
                    print(f"rank {r} failed:\n{job['failed_tails'][r]}")
                return 1
            rows[backend] = job["results"][0]["rows"]
    print(f"\nbench allreduce: rail2x4, 8 ranks, ring (emu: RoCEv2 over the NICs at TDF "
          f"{fab.tdf:g}, link {link / 1e9:g} Gbps model = {fnet.td.lab_rate(link) / 1e6:g} "
          f"Mbps lab) vs gloo (kernel TCP on the frontend, not dilated)")
    print(f"{'size':>10} {'emu model':>11} {'busbw':>11} {'/link':>6} {'busbw lab':>11} "
          f"{'gloo lab':>10} {'busbw lab':>11} {'emu/gloo':>9} {'correct':>8}")
    ok = True
    for e, g in zip(rows["emu"], rows["gloo"]):
        ok &= e["correct"] and g["correct"]
        print(f"{e['size']:>10} {e['seconds_model'] * 1e3:>8.3f} ms "
              f"{e['busbw_model_bps'] / 1e9:>6.1f} Gbps {e['busbw_model_bps'] / link:>6.3f} "
              f"{e['busbw_lab_bps'] / 1e6:>6.2f} Mbps {g['seconds_lab']:>8.3f} s "
              f"{g['busbw_lab_bps'] / 1e6:>6.1f} Mbps "
              f"{e['busbw_lab_bps'] / g['busbw_lab_bps']:>9.4f} "
              f"{str(e['correct'] and g['correct']):>8}")
    return 0 if ok else 1
