"""How long the RDMA workloads wait (traffic.workloads.rdma.patience): scaled to the
bytes and the TDF, so a long incast at a high TDF is not cut off by a fixed timeout."""

import pytest

import topologies
from traffic.workloads.rdma import patience


def test_patience_is_five_line_rate_times_plus_a_minute():
    fab = topologies.load("rail2x4", tdf=10000)
    # 3 x 256 MB through h4g1's 200 Gbps link: 30.72 ms model = 307.2 s lab at TDF 10000
    assert patience(fab, 3 * 256_000_000, "h4g1") == pytest.approx(5 * 307.2 + 60)
    assert patience(topologies.load("rail2x4", tdf=5000), 0, "h1g1") == 60.0
