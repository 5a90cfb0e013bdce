"""The AllReduce workload's inputs and its bit-exact check
(collectives.workloads.allreduce): bounded memory, any summation order, every dtype."""

import pytest
import torch

from collectives.workloads import allreduce as ar

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_sum_of_the_inputs_is_the_expected_sum_in_any_order(dtype):
    n, count = 32, 600 * ar.SPAN + 1234  # many periods of base and a part of one
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


def _direct(rank, count, dtype, seed):
    """base(i) + rank computed for every i (what rank_input computed until it copied one
    period of SPAN values over the buffer)."""
    return ar._as(ar._base(0, count, seed) + rank, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [1, 1998, 1999, 2000, 3 * 1999, 4 * 1999 + 17, 1 << 16])
def test_one_period_copied_is_every_element_computed(dtype, count):
    for rank, seed in ((0, 1), (7, 1), (31, 5)):
        assert torch.equal(ar.rank_input(rank, count, dtype, seed), _direct(rank, count, dtype, seed))
    n = 8
    total = sum(_direct(r, count, dtype, 2) for r in range(n))
    assert ar.is_expected_sum(total, n, seed=2)
    for at in (0, count // 2, count - 1):  # one element off anywhere: the first period,
        wrong = total.clone()                # a middle one, the last (partial) one
        wrong[at] += 1
        assert not ar.is_expected_sum(wrong, n, seed=2)
    assert not ar.is_expected_sum(total, n - 1, seed=2)


def test_base_repeats_every_span_elements():
    assert torch.equal(ar._base(0, ar.SPAN, 3), ar._base(5 * ar.SPAN, 6 * ar.SPAN, 3))
    assert len(set(ar._base(0, ar.SPAN, 3).tolist())) == ar.SPAN  # a permutation of [-999, 999]
