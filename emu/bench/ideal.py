"""The ideal a bench compares its figures with, read from the fabric the bench builds
(never a hard-coded rate): a flow cannot beat the host link of its sender or receiver,
the link from a GPU's NIC to its rail switch (a topology's `host_link`, book ch.13).
"""

from __future__ import annotations

from collections.abc import Iterable

import topologies
from topologies.model import Fabric


def host_link_bps(fabric: Fabric, gpu: str) -> float:
    """Model bit/s of the link between a GPU's NIC and its rail switch."""
    g = fabric.gpus[gpu]
    return fabric.link_of(g.host, g.nic).model_bps


def bottleneck_bps(preset: str, gpus: Iterable[str]) -> float:
    """The slowest host link of `gpus` in the preset topology (model bit/s)."""
    fabric = topologies.load(preset)
    return min(host_link_bps(fabric, g) for g in gpus)
