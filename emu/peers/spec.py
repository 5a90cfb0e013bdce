"""The fabric spec the ns-3 peer simulates (issue 11): a `topologies` Fabric and the load
of `emu bench tdf`, as plain JSON-able data (emu/peers/ns3_fabric.py reads it).

Hosts and switches become nodes, the fabric links (not the frontend) keep their MODEL rate
and delay - ns-3 simulates model time, so its wall / sim slowdown compares with emu's TDF.
The traffic is `bench tdf`'s: every GPU NIC sends ROCE_FRAME-byte frames at `load` x its
host link's model rate to the next host's GPU on the next rail (rail -> spine -> rail).
What the spec cannot say, the peer omits: PFC, ECN, RoCE, the book's QoS.
"""

from __future__ import annotations

from emu.observe.calibrate import ROCE_FRAME
from emucore.qos.fields import QUEUE_LIMIT_BYTES
from topologies.model import FRONTEND, Fabric, Gpu


def flow_pairs(fab: Fabric) -> list[tuple[Gpu, Gpu]]:
    """(source, destination) GPU of every flow of `bench tdf`: each GPU to the next host's
    GPU on the next rail (cyclic), so every flow is routed across rails."""
    gpus = fab.gpu_list()
    hosts = sorted({g.host for g in gpus}, key=lambda h: int(h[1:]))
    idx = sorted({g.index for g in gpus})
    out = []
    for g in gpus:  # by local GPU number: a rail number is global across pods
        nxt = hosts[(hosts.index(g.host) + 1) % len(hosts)]
        other = idx[(idx.index(g.index) + 1) % len(idx)]
        out.append((g, fab.gpus[f"{nxt}g{other}"]))
    return out


def fabric_spec(fab: Fabric, load: float = 1.0, frame_bytes: int = ROCE_FRAME) -> dict:
    """The JSON-able spec of `fab` under `bench tdf`'s traffic at `load` x line rate."""
    nodes = [n for n in fab.nodes.values() if n.kind != FRONTEND]
    links = [lk for lk in fab.links if lk.kind != FRONTEND]
    return {
        "name": fab.name,
        "mtu": fab.mtu,
        "queue_bytes": QUEUE_LIMIT_BYTES,
        "nodes": [{"name": n.name, "kind": n.kind, "role": n.role} for n in nodes],
        "links": [{"a": f"{lk.a.node}:{lk.a.ifname}", "b": f"{lk.b.node}:{lk.b.ifname}",
                   "rate_bps": lk.model_bps, "delay_s": lk.delay_s, "kind": lk.kind}
                  for lk in links],
        "flows": [{"src_host_nic": f"{s.host}:{s.nic}", "dst": f"{d.host}:{d.nic}",
                   "rate_bps": load * fab.link_of(s.host, s.nic).model_bps,
                   "frame_bytes": frame_bytes}
                  for s, d in flow_pairs(fab)],
    }
