"""DCQCN's convergence on one bottleneck (traffic.tools.bottleneck runs the product's reaction
point, notification point and WRED code): docs/DCQCN_PARAMS.md "N long flows into one port
converge to C/N each"."""

import pytest

from traffic.tools.bottleneck import main, simulate


@pytest.mark.parametrize("senders,seed", [(2, 2), (3, 1), (3, 3), (4, 2)])
def test_long_flows_converge_to_a_fair_share_each(senders, seed):
    res = simulate(senders, profile="paper", ecn="paper", duration=0.1, seed=seed)
    shares = res.fair_shares(0.5, 1.0)
    assert all(s == pytest.approx(1.0, abs=0.15) for s in shares), shares
    assert sum(shares) / senders > 0.95          # and the port stays busy
    assert res.marks > 0 and all(c > 0 for c in res.cnps)


def test_one_flow_alone_runs_at_line_rate_unmarked():
    res = simulate(1, duration=0.01)
    assert res.marks == 0 and res.cnps == [0]
    assert res.rates(0.1, 1.0)[0] == pytest.approx(200e9, rel=0.01)


def test_it_is_deterministic_per_seed():
    a, b = simulate(3, duration=0.01, seed=7), simulate(3, duration=0.01, seed=7)
    assert a.samples == b.samples and a.cnps == b.cnps


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(ValueError, match="senders"):
        simulate(0)
    with pytest.raises(ValueError, match="window"):
        simulate(2, duration=0.01).rates(0.5, 0.5)
    with pytest.raises(SystemExit):
        main(["--ecn", "nope"])
    assert main(["--ms", "2", "--every-ms", "1"]) == 0
    out = capsys.readouterr().out
    assert "fair share 66.7" in out and "CNPs per sender" in out
