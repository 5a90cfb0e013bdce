"""The ns-3 peer of `emu bench speed` (issue 11): one fabric spec simulated by ns-3.

A standalone script, run by the ns-3 venv's Python (emu/peers/ns3_env.py), never imported
by emu: it imports nothing of the project, only the standard library and ns-3's cppyy
bindings (PyPI `ns3`, `from ns import ns`).

    python ns3_fabric.py --spec spec.json --sim-ms 2

prints one JSON line: sim_s, wall_s (Simulator::Run only, not the build), slowdown =
wall_s / sim_s (what compares with emu's TDF), cpu_s (the run's CPU time), packets sent /
delivered / dropped (at a full egress), events, ns3_version. The spec (emu/peers/spec.py)
holds nodes, links "node:if" <-> "node:if" with rate_bps and delay_s, mtu, queue_bytes and
flows {src_host_nic, dst, rate_bps, frame_bytes}.

The model is thinner than emu's: every node an ns-3 node with the IPv4 stack, every link
point-to-point full duplex at its model rate with its propagation delay (one /30 each),
switches forward at layer 3 (Ipv4GlobalRouting; ECMP picks a next hop per packet at
random - ns-3.44 has no per-flow hash), every egress one drop-tail FIFO of queue_bytes
(no queue disc). A flow is a constant-rate UDP source whose frames (PPP 2 + IPv4 20 +
UDP 8 + payload) are frame_bytes long at rate_bps. Omitted: PFC, ECN/WRED, RoCE (RC
transport, DCQCN), the 8 traffic classes and their scheduler, L2 switching in a rail.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import metadata

from ns import ns

WIRE_OVERHEAD = 2 + 20 + 8  # PPP + IPv4 + UDP: a frame of frame_bytes carries this less
BASE_PORT = 10000

ns.cppyy.cppdef(r"""
#include "ns3/callback.h"
#include "ns3/packet.h"
namespace emu_peer {
uint64_t sent = 0, dropped = 0;
void CountTx(ns3::Ptr<const ns3::Packet>) { ++sent; }
void CountDrop(ns3::Ptr<const ns3::Packet>) { ++dropped; }
using Counter = ns3::Callback<void, ns3::Ptr<const ns3::Packet>>;
Counter TxCounter() { return ns3::MakeCallback(&CountTx); }
Counter DropCounter() { return ns3::MakeCallback(&CountDrop); }
}
""")


def connect(obj, source: str, callback) -> None:
    """Connect a C++ counter to a trace source (ns-3 only returns false on a bad name)."""
    if not obj.TraceConnectWithoutContext(source, callback):
        raise RuntimeError(f"ns-3: no trace source {source!r} on "
                           f"{obj.GetInstanceTypeId().GetName()}")


def build(spec: dict) -> tuple[list, list]:
    """Nodes, links, routes and applications of the spec; returns (sinks, devices)."""
    ns.Config.SetDefault("ns3::DropTailQueue<Packet>::MaxSize",
                         ns.QueueSizeValue(ns.QueueSize(f"{int(spec['queue_bytes'])}B")))
    ns.Config.SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting", ns.BooleanValue(True))
    nodes = {}
    for n in spec["nodes"]:
        nodes[n["name"]] = ns.CreateObject[ns.Node]()
    stack = ns.InternetStackHelper()
    for node in nodes.values():
        stack.Install(node)  # a full egress FIFO stops the device: traffic control drops
        connect(node.GetObject[ns.TrafficControlLayer](), "TcDrop",
                ns.cppyy.gbl.emu_peer.DropCounter())
    addr = ns.Ipv4AddressHelper()
    addr.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.252"))
    tch = ns.TrafficControlHelper()
    ip_of, devices = {}, []
    for lk in spec["links"]:
        p2p = ns.PointToPointHelper()
        p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(lk["rate_bps"]))))
        p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(int(spec["mtu"])))
        p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.PicoSeconds(round(lk["delay_s"] * 1e12))))
        devs = p2p.Install(nodes[lk["a"].split(":")[0]], nodes[lk["b"].split(":")[0]])
        ifc = addr.Assign(devs)
        tch.Uninstall(devs)  # no queue disc: the device's FIFO is the egress queue
        addr.NewNetwork()
        ip_of[lk["a"]], ip_of[lk["b"]] = ifc.GetAddress(0), ifc.GetAddress(1)
        devices += [devs.Get(0), devs.Get(1)]
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
    sinks = []
    for i, f in enumerate(spec["flows"]):
        port = BASE_PORT + i
        payload = int(f["frame_bytes"]) - WIRE_OVERHEAD
        sink = ns.PacketSinkHelper("ns3::UdpSocketFactory",
                                   ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo())
        sinks.append(sink.Install(nodes[f["dst"].split(":")[0]]).Get(0))
        src = ns.OnOffHelper("ns3::UdpSocketFactory",
                             ns.InetSocketAddress(ip_of[f["dst"]], port).ConvertTo())
        # OnOff paces payload bits; frames of frame_bytes then leave at rate_bps
        src.SetConstantRate(ns.DataRate(int(f["rate_bps"] * payload / f["frame_bytes"])), payload)
        app = src.Install(nodes[f["src_host_nic"].split(":")[0]]).Get(0)
        connect(app, "Tx", ns.cppyy.gbl.emu_peer.TxCounter())
    return sinks, devices


def dropped(devices: list) -> int:
    """Packets dropped at a full egress: by traffic control or by the device's FIFO."""
    cast = ns.cppyy.gbl.ns3.DynamicCast[ns.PointToPointNetDevice]
    return int(ns.cppyy.gbl.emu_peer.dropped) + sum(
        int(cast(d).GetQueue().GetTotalDroppedPackets()) for d in devices)


def simulate(spec: dict, sim_ms: float) -> dict:
    """Build the spec, run sim_ms of model time, measure the run's wall time."""
    ns.Time.SetResolution(ns.Time.PS)
    sinks, devices = build(spec)
    sim_s = sim_ms / 1e3
    ns.Simulator.Stop(ns.Seconds(sim_s))
    t0, c0 = time.perf_counter(), time.process_time()
    ns.Simulator.Run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    payloads = [int(f["frame_bytes"]) - WIRE_OVERHEAD for f in spec["flows"]]
    out = {"sim_s": sim_s, "wall_s": wall, "slowdown": wall / sim_s, "cpu_s": cpu,
           "packets_sent": int(ns.cppyy.gbl.emu_peer.sent),
           "packets_delivered": sum(int(s.GetTotalRx()) // p for s, p in zip(sinks, payloads)),
           "packets_dropped": dropped(devices),
           "events": int(ns.Simulator.GetEventCount()),
           "ns3_version": metadata.version("ns3")}
    ns.Simulator.Destroy()
    return out


def main(argv: list[str] | None = None) -> int:
    """`--spec FILE --sim-ms MS`: simulate and print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="fabric spec JSON (emu/peers/spec.py)")
    ap.add_argument("--sim-ms", type=float, default=2.0, help="model time to simulate, ms")
    args = ap.parse_args(argv)
    with open(args.spec) as fh:
        spec = json.load(fh)
    print(json.dumps(simulate(spec, args.sim_ms)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
