"""Ring AllReduce schedule (book ch.14) and its arithmetic, without a fabric."""

import numpy as np
import pytest

import topologies
from collectives.ring import bus_bandwidth, chunk_bounds, ring_order, schedule


def test_ch14_walkthrough_four_ranks():
    # ch.14: 4 ranks x 1024 gradients, 256 per chunk; at step s rank r sends chunk (r - s)
    steps = schedule(4)
    assert [st["phase"] for st in steps] == ["reduce-scatter"] * 3 + ["all-gather"] * 3
    assert steps[0]["send"] == [0, 1, 2, 3] and steps[0]["recv"] == [3, 0, 1, 2]
    assert steps[1]["send"] == [3, 0, 1, 2] and steps[2]["send"] == [2, 3, 0, 1]
    # after reduce-scatter rank r owns chunk r + 1: it starts the all-gather with it
    assert steps[3]["send"] == [1, 2, 3, 0]
    assert chunk_bounds(1024, 4) == [(0, 256), (256, 512), (512, 768), (768, 1024)]


@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize("count", [1, 7, 1000, 1024])
def test_schedule_simulated_gives_the_sum(n, count):
    rng = np.random.default_rng(n * count)
    data = [rng.integers(-100, 100, count) for _ in range(n)]
    want = np.sum(data, axis=0)
    bounds = chunk_bounds(count, n)
    for st in schedule(n):
        msgs = [data[r][slice(*bounds[st["send"][r]])].copy() for r in range(n)]
        for r in range(n):
            got = msgs[(r - 1) % n]
            assert st["recv"][r] == st["send"][(r - 1) % n]
            sl = slice(*bounds[st["recv"][r]])
            if st["phase"] == "reduce-scatter":
                data[r][sl] += got
            else:
                data[r][sl] = got
    for r in range(n):
        assert np.array_equal(data[r], want)


def test_chunks_cover_sizes_not_divisible():
    b = chunk_bounds(10, 4)
    assert b == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_rail_aware_ring_keeps_inter_host_hops_on_one_rail():
    fab = topologies.load("rail2x4")
    order = ring_order(fab)
    assert order == ["h1g1", "h2g1", "h3g1", "h4g1", "h4g2", "h3g2", "h2g2", "h1g2"]
    for a, b in zip(order, order[1:] + order[:1]):
        ga, gb = fab.gpus[a], fab.gpus[b]
        assert ga.host == gb.host or ga.rail == gb.rail


def test_busbw_nccl_tests_formula():
    alg, bus = bus_bandwidth(64_000_000, 1e-3, 8)
    assert alg == pytest.approx(512e9) and bus == pytest.approx(512e9 * 14 / 8)
