"""The book's worked example, computed by torch autograd (seed 000, Figs 2-2..2-4)."""

import pytest

from traffic.workloads.bookexample import EXPECTED, check, describe, run


def test_book_numbers():
    r = run()
    assert (r["H3"], r["H4"], r["output"]) == pytest.approx((0.5, 1.5, 2.5))
    assert r["loss"] == pytest.approx(0.25)
    assert r["dL_dW53"] == pytest.approx(0.5)
    assert r["W53"] == pytest.approx(0.995)
    assert "L = 0.25, dL/dW53 = 0.5, W53 = 0.995" in describe(r)


def test_learning_rate_is_used():
    assert run(lr=0.1)["W53"] == pytest.approx(0.95)


def test_the_workload_checks_the_book_numbers():
    r = run()
    assert EXPECTED == {"loss": 0.25, "W53": 0.995} and check(r)
    assert not check(run(lr=0.1))  # W53 = 0.95 is not the book's step
    assert not check({**r, "loss": 0.26})
