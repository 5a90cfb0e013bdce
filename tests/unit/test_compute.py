"""The GPU compute model (issue 15, `--gpu h100`): the measured tables as a model, the
clock that spends model time, FLOP counting per module, the per-op mode for scripts, the
compute / communication split - with fake clocks and exact numbers."""

import json
import math

import pytest
import torch

from collectives.compute.clock import ComputeClock
from collectives.compute.gpu import DATA, MLP, Curve, GpuModel, family_name
from collectives.compute.meter import attach, count_step
from collectives.compute.opmode import GpuOps
from collectives.compute.split import intersect, split, union
from collectives.compute.summary import rank_split
from emucore.timedil import TimeDilation

H100 = GpuModel.h100()
RECORDS = json.loads((DATA / "h100-flopcounter.json").read_text())


def fam_of(case: str) -> str:
    w = case.split()
    return MLP if w[0] == "mlp" else f"xfmr {w[1]} {w[2]}"


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: f"{r['case']} {r['dtype']}")
def test_every_measured_point_is_reproduced_or_capped_by_a_larger_one(rec):
    fam, dt = fam_of(rec["case"]), rec["dtype"]
    t = H100.step_seconds(rec["flops_counted"], dt, fam)
    later = [r["seconds"] for r in RECORDS if fam_of(r["case"]) == fam and r["dtype"] == dt
             and r["flops_counted"] >= rec["flops_counted"]]
    assert t == pytest.approx(min(later), rel=1e-12)


def test_the_capped_points_are_three_small_launch_bound_ones():
    capped = [r for r in RECORDS if H100.step_seconds(r["flops_counted"], r["dtype"],
                                                      fam_of(r["case"])) < r["seconds"] * 0.9999]
    assert sorted((r["case"], r["dtype"]) for r in capped) == [
        ("mlp w16 d2 b32", "float32"), ("mlp w256 d4 b64", "float32"),
        ("xfmr d768 L12 b1 s256", "bfloat16")]


@pytest.mark.parametrize("family", ["mlp", "xfmr d768 L12", "xfmr d2048 L4"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_step_time_is_monotone_in_flops(family, dtype):
    times = [H100.step_seconds(10 ** (k / 4), dtype, family) for k in range(16, 60)]
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_below_the_first_point_the_floor_above_the_last_the_best_rate():
    assert H100.step_seconds(1.0, "bfloat16", MLP) == pytest.approx(0.0007210043)
    top = [r for r in RECORDS if r["case"] == "mlp w8192 d4 b4096" and r["dtype"] == "bfloat16"][0]
    assert H100.step_seconds(2 * top["flops_counted"]) == pytest.approx(2 * top["seconds"])


def test_between_points_a_power_law_piece():
    c = Curve.of([(1e9, 1e-3), (1e11, 1e-2)])
    assert c.seconds_for(1e10) == pytest.approx(math.sqrt(1e-3 * 1e-2))


@pytest.mark.parametrize("d, layers, want", [(768, 12, "xfmr d768 L12"), (2048, 4, "xfmr d2048 L4"),
                                             (1024, 24, MLP), (None, None, MLP)])
def test_family_for(d, layers, want):
    assert H100.family_for(d, layers) == want
    if d:
        assert family_name(d, layers) == f"xfmr d{d} L{layers}"


def test_bad_family_and_dtype_name_the_field():
    with pytest.raises(ValueError, match="family: 'xfmr d1 L1' is not measured in bfloat16"):
        H100.step_seconds(1e9, "bfloat16", "xfmr d1 L1")
    with pytest.raises(ValueError, match="dtype: one of bfloat16, float32, got 'float16'"):
        H100.step_seconds(1e9, "float16")
    with pytest.raises(ValueError, match="--gpu: h100 or none, got 'a100'"):
        GpuModel.by_name("a100")


def test_op_seconds_from_the_matmul_records():
    n1024 = 2 * 1024 ** 3
    assert H100.op_seconds(1.0) == H100.op_seconds(n1024) == pytest.approx(2.54756e-5)
    assert H100.op_seconds(2 * 8192 ** 3) == pytest.approx(0.0013969585)


class Fake:
    """A lab clock that advances only when slept on (or by `work`)."""

    def __init__(self):
        self.t, self.slept = 100.0, []

    def clock(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s

    def work(self, s):
        self.t += s


def test_clock_sleeps_to_cumulative_targets_and_absorbs_cpu_time():
    f = Fake()
    c = ComputeClock(TimeDilation(1000.0), f.clock, f.sleep)
    c.begin("fwd")
    c.spend(1e-3, 10.0)            # target 101.0
    f.work(0.4)                    # the CPU computed meanwhile
    c.spend(1e-3, 10.0)            # target 102.0: sleeps 0.6
    assert f.slept == pytest.approx([1.0, 0.6])
    f.work(3.0)                    # the CPU is slower than the model
    c.spend(1e-3)                  # target 103.0, now 105.0: late by 2 s lab = 2 ms model
    r = c.regions[0]
    assert (r.model_s, r.flops, r.holds) == (pytest.approx(3e-3), 20.0, 3)
    assert r.lag_model_s == pytest.approx(2e-3) and r.end_lab == 105.0
    assert c.totals()["fwd"] == {"model_s": pytest.approx(3e-3), "flops": 20.0, "count": 1}
    assert c.meter.count == 3 and c.meter.max_s == pytest.approx(2e-3)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_count_step_exact_for_an_mlp():
    """Forward 2 b i o per Linear; backward: grad weight (2 b i o) for both, grad input
    (2 b i o) only for the second (the first one's input needs none)."""
    c = count_step(mlp, lambda: (torch.empty(8, 16),), lambda y: y.pow(2).mean())
    assert c.fwd == {"0": 2 * 8 * 16 * 32, "2": 2 * 8 * 32 * 4}
    assert sum(c.bwd.values()) == 2 * 8 * 16 * 32 + 2 * (2 * 8 * 32 * 4)
    assert c.bwd["0"] / c.bwd["2"] == pytest.approx(c.fwd["0"] / c.fwd["2"])


def test_attach_spends_the_step_by_flop_shares_forward_then_backward():
    c = count_step(mlp, lambda: (torch.empty(8, 16),), lambda y: y.pow(2).mean())
    f = Fake()
    clock = ComputeClock(TimeDilation(1000.0), f.clock, f.sleep)
    m = mlp()
    attach(m, c, 2e-3, clock)
    m(torch.randn(8, 16)).pow(2).mean().backward()
    fwd, bwd = clock.regions
    share = 2e-3 / c.total
    assert (fwd.kind, bwd.kind) == ("fwd", "bwd")
    assert fwd.model_s == pytest.approx(share * sum(c.fwd.values()))
    assert bwd.model_s == pytest.approx(share * sum(c.bwd.values()))
    assert sum(f.slept) == pytest.approx(2.0, rel=1e-6)  # 2 ms model x TDF 1000, fake CPU


def test_opmode_prices_each_counted_op_and_opens_a_region_after_a_wait():
    f = Fake()
    clock = ComputeClock(TimeDilation(1.0), f.clock, f.sleep)
    m = torch.nn.Linear(1024, 1024)
    x = torch.randn(1024, 1024)
    with GpuOps(H100, "bfloat16", clock) as ops:
        y = m(x)
        f.work(1.0)               # a collective: far more than a model microsecond
        y.sum().backward()
    assert ops.ops == 2           # addmm forward, mm for the weight's gradient (x needs none)
    assert [r.holds for r in clock.regions] == [1, 1]
    assert clock.regions[0].flops == clock.regions[1].flops == 2 * 1024 ** 3
    assert clock.regions[1].model_s == pytest.approx(H100.op_seconds(2 * 1024 ** 3))


@pytest.mark.parametrize("window, compute, comm, want", [
    ((0, 10), [(0, 6)], [(4, 9)], dict(compute_s=6, comm_s=5, overlap_s=2, exposed_comm_s=3,
                                       other_s=1)),
    ((0, 10), [(0, 3), (2, 5)], [], dict(compute_s=5, comm_s=0, overlap_s=0, other_s=5)),
    ((2, 4), [(0, 10)], [(3, 12)], dict(compute_s=2, comm_s=1, overlap_s=1, exposed_comm_s=0,
                                        other_s=0))])
def test_split(window, compute, comm, want):
    s = split(window, compute, comm)
    assert {k: s[k] for k in want} == pytest.approx(want)
    assert s["compute_s"] + s["exposed_comm_s"] + s["other_s"] == pytest.approx(s["window_s"])


def test_union_and_intersect():
    assert union([(3, 4), (0, 2), (1, 3), (5, 5)]) == [(0, 4)]
    assert intersect([(0, 2), (3, 6)], [(1, 4), (5, 9)]) == [(1, 2), (3, 4), (5, 6)]


def test_rank_split_from_records():
    compute = {"regions": [{"t0_model_s": 1.0, "t1_model_s": 2.0}],
               "totals": {"fwd": {"flops": 5.0}, "lag_max_model_s": 1e-7}}
    backend = [{"history": [{"t0_lab": 1500.0, "seconds_lab": 1000.0, "tdf": 1000.0}]}]
    s = rank_split(compute, backend)
    assert (s["window_ms"], s["compute_ms"], s["comm_ms"], s["overlap_ms"],
            s["exposed_comm_ms"]) == (1500.0, 1000.0, 1000.0, 500.0, 500.0)
    assert s["flops"] == 5.0 and s["lag_max_model_us"] == 0.1
