"""The AllReduce workload's inputs and its bit-exact check
(collectives.workloads.allreduce): bounded memory, any summation order, every dtype."""

import pytest
import torch

from collectives.workloads import allreduce as ar

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_sum_of_the_inputs_is_the_expected_sum_in_any_order(dtype):
    n, count = 32, ar.CHUNK + 12345  # more than one chunk
    inputs = [ar.rank_input(r, count, dtype, seed=1) for r in range(n)]
    forward, backward = torch.zeros(count, dtype=dtype), torch.zeros(count, dtype=dtype)
    for t in inputs:
        forward += t
    for t in reversed(inputs):
        backward += t
    assert torch.equal(forward, backward)  # exact: the order cannot change a bit
    assert ar.is_expected_sum(forward, n, seed=1)
    assert inputs[0].dtype == dtype and int(inputs[0][0] * (8 if dtype.is_floating_point else 1)) \
        == ar._base(0, 1, 1).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_a_lost_doubled_or_misplaced_contribution_is_caught(dtype):
    n, count = 8, 5000
    inputs = [ar.rank_input(r, count, dtype, seed=3) for r in range(n)]
    total = sum(inputs[1:], inputs[0].clone())
    assert ar.is_expected_sum(total, n, seed=3)
    assert not ar.is_expected_sum(total - inputs[5], n, seed=3)      # lost
    assert not ar.is_expected_sum(total + inputs[2], n, seed=3)      # doubled
    moved = total.clone()
    moved[100:200], moved[200:300] = total[200:300].clone(), total[100:200].clone()
    assert not ar.is_expected_sum(moved, n, seed=3)                  # misplaced chunk
    assert not ar.is_expected_sum(total, n, seed=4)                  # another seed
