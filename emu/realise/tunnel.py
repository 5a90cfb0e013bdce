"""Links that cross servers (issue 17): VXLAN tunnels whose ends live in the node
namespaces, and the rule that keeps a tunnelled link's delay what the model says.

Why VXLAN, terminated in the node namespace: any Linux bridge on a link's path drops
PFC frames (01:80:C2:00:00:01 is in the bridge's restricted group-forward range) and
needs care for LLDP; this kernel has VXLAN but neither GRE nor Open vSwitch. Mininet's
cluster mode (`mininet.examples.cluster.RemoteGRELink.makeTunnel`) creates a gretap in
the server's root namespace and moves it into the node; emu does the same with a VXLAN
device: its UDP socket stays in the namespace it was created in (the server's, on the
underlay), the device itself - a plain Ethernet interface, no bridge, no learning -
moves into the node. Every frame the node sends leaves encapsulated to the one remote
VTEP and arrives unchanged: RoCEv2, PFC, LLDP/DCBX (netns test: byte for byte, and
tshark decodes PFC and LLDP on the far end). The devices are made by emu.realise.netlink
(`vxlan_link`, `open_end`); this module holds the rules they follow.

Sizes: VXLAN adds 50 bytes (outer IPv4 20, UDP 8, VXLAN 8, the inner Ethernet header
14), so the underlay between servers needs an MTU of at least the fabric's 9216 + 50.

Delay (`compensated_delay`): a link's model one-way delay is d; at TDF t the agents hold
its frames d x t lab seconds. A tunnel already takes L lab seconds (measured at start),
so the agents add only d x t - L. Where d x t < L the link cannot be as short as the
model says: an error naming the link and the smallest TDF that fits (L / d).
"""

from __future__ import annotations

import math

from topologies.model import Link

__all__ = ["VXLAN_OVERHEAD", "VXLAN_PORT", "compensated_delay", "min_tdf", "check_mtu",
           "link_name"]

VXLAN_OVERHEAD = 50
VXLAN_PORT = 4789  #: IANA VXLAN


def link_name(link: Link) -> str:
    """`a:ethX-b:ethY`, as errors and `emu show` name a link."""
    return f"{link.a.node}:{link.a.ifname}-{link.b.node}:{link.b.ifname}"


def min_tdf(link: Link, latency_lab_s: float) -> float:
    """The smallest TDF at which `link`'s model delay covers a tunnel latency."""
    if link.delay_s <= 0:
        return math.inf
    return latency_lab_s / link.delay_s


def compensated_delay(link: Link, latency_lab_s: float, tdf: float) -> float:
    """Lab seconds the agents still add to a tunnelled link so that it takes its model
    delay at `tdf` in all; ValueError when the tunnel alone is longer."""
    if latency_lab_s < 0:
        raise ValueError(f"latency: must be >= 0, got {latency_lab_s!r}")
    want = link.delay_s * tdf
    if want >= latency_lab_s:
        return want - latency_lab_s
    name = link_name(link)
    if link.delay_s <= 0:
        raise ValueError(f"link {name}: a model delay of 0 cannot cross servers (the tunnel "
                         f"takes {latency_lab_s * 1e6:.0f} us lab); give it a delay of at "
                         f"least {latency_lab_s / tdf * 1e9:.0f} ns model at TDF {tdf:g}")
    need = math.ceil(min_tdf(link, latency_lab_s) * (1 - 1e-12))  # 40.000000000000007 is 40
    raise ValueError(f"link {name}: its model delay {link.delay_s * 1e9:.0f} ns is "
                     f"{want * 1e6:.0f} us lab at TDF {tdf:g}, shorter than the tunnel's "
                     f"{latency_lab_s * 1e6:.0f} us; TDF {need} or more would fit")


def check_mtu(underlay_mtu: int, fabric_mtu: int) -> None:
    """ValueError unless the underlay carries the fabric's largest frame encapsulated."""
    need = fabric_mtu + VXLAN_OVERHEAD
    if underlay_mtu < need:
        raise ValueError(f"underlay_mtu: {underlay_mtu} is too small for {fabric_mtu}-byte "
                         f"frames in VXLAN (needs {need})")
