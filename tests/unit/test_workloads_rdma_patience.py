"""How long the RDMA workloads wait (traffic.workloads.rdma.patience): scaled to the
bytes and the TDF, so a long incast at a high TDF is not cut off by a fixed timeout."""

import pytest

import topologies
from traffic.workloads.rdma import patience


def test_patience_is_five_line_rate_times_plus_the_retry_budget_plus_a_minute():
    fab = topologies.load("rail2x4", tdf=10000)
    # the NIC's retry budget: 8 local ACK timeouts of 4.096 us x 2^8 = 8.388608 ms model,
    # 83.88608 s lab at TDF 10000 (a dead peer ends in RETRY_EXC_ERR before we give up)
    # 3 x 256 MB through h4g1's 200 Gbps link: 30.72 ms model = 307.2 s lab at TDF 10000
    assert patience(fab, 3 * 256_000_000, "h4g1") == pytest.approx(5 * 307.2 + 83.88608 + 60)
    assert patience(topologies.load("rail2x4", tdf=5000), 0, "h1g1") == pytest.approx(
        41.94304 + 60.0)
