"""DCQCN's fair share on the fabric (root, issue 31): a 2:1 incast into one 200 G port
with paper DCQCN and the paper's ECN (`emu run rail2x4 --workload incast --to h4g1
--from h1g1,h2g1 --size 96MB --qos paper`), compiled data path where built (default
auto), judged by the fidelity guard.

The claim: N long flows into one port converge to C/N each (Zhu et al., "Congestion
Control for Large-Scale RDMA Deployments", SIGCOMM 2015; docs/DCQCN_PARAMS.md), for a
2:1 within +-10 % of C/2 (issue 31's bound, `TOLERANCE`).

When to judge, from the discrete-event model on the product's DCQCN code
(`python -m emu.bench.dcqcnsim --senders 2 --qos paper --stagger-ms 0`, both senders
starting together as they do here; docs/DCQCN_PARAMS.md "The 2:1 with both senders
starting together"): every 5 ms average within +-10 % of C/2 from 0 ms (10 seeds, 30 ms),
every 1 ms average from 0-5 ms; the first cut (alpha = 1) puts each sender's target rate
at C/2, fast recovery reaches it in ~0.3 ms. The judged window starts at 2 ms model,
past the first cuts, and ends at 0.9 of the first sender's finish (`rdma.incast`'s
window); over [2, 8) ms the model gives 0.946-0.980 of C/2 per sender (10 seeds).

Size: 96 MB each is ~8.5 ms model at the model's 0.97 of C/2 on the wire, a judged
window of ~5.6 ms (one 5 ms block, 100 CNP intervals of the paper profile); at TDF
3000 that is ~29 s lab. TDF 3000 (was 5000, ~48 s; 8000 before, ~73 s): with the NIC's
loop in C (668047a; 2026-11-28 23:22-23:25 UTC) it kept up in 2 quiet runs (30.2 /
30.5 s, p99 lag 0.42 us) and kept up and passed in 2 of 2 beside a CPU hog (`python3 -c
'while 1: pass'`; 30.9 / 30.8 s, p99 0.42 us). At 5000, with the NIC's C payload view and
meter record (96ed12e, f508fe3; 21:19-21:22 UTC) it kept up and passed in 3
quiet runs (47.3 / 48.6 / 47.4 s; shares 0.97/0.97, 0.93/1.00, 0.97/0.96 of C/2) and in
2 of 2 beside a CPU hog (48.4 / 48.7 s). Before them (2164290's tree): at 5000 it kept
up in 2 quiet runs and 1 of 2 beside a hog (the other passed on the guard's retry at a
higher TDF, ~150 s); at 3000 in 2 quiet runs (30.5 / 30.6 s) and in 0 of 2 beside a hog
(each then passed at the guard's 7000-10000, 98-150 s). A run that falls behind is run
again at the guard's suggested TDF (the test body), so a busy machine makes it slower, not red.

The split is set by the 3-5 cuts of the first ~2.5 ms and then frozen (the two add up to
less than C for ~5 ms), so a run judges one draw of them. The switches' dice are the same
in every run of one `emu run --seed` (default 1), but the lab's timing is not: a frame
leaves up to its NIC's lag late (p99 0.42-0.56 us model in these runs), which moves the
interleaving at the port and so which frames meet the marks. The model with that noise
(`--jitter-us J`: each frame up to J late, uniform; 256 seeds, window [2, 8) ms):

    python -m emu.bench.dcqcnsim --senders 2 --qos paper --ms 9 --start-us 0,0.24 \
        --frame 4154 --slack-us 0.74 --wred-seed S:eth4 --seeds 1-256 --jitter-us J --window-ms 2,8

J = 0: no seed outside +-10 %, lowest share 0.913, the two together 1.906-1.944 of C/2;
J = 0.5 us: 2 of 256 outside, lowest 0.871, together 1.872-1.949; J = 0.75 us (the NIC's
pacer slack at TDF 3000): 8 of 256, lowest 0.666, together 1.654-1.947; J = 1.0 us, past
the slack, loses rate: 1.498-1.692 together. The fabric's p99 lag puts it near J = 0.5.
Its widest split since the grid went: CI at 5403b96,
2026-11-29, TDF 3000, kept up, p99 lag 0.56 us: 1.019 / 0.898 of C/2.

Two draws. So a draw is outside the bound with a probability of about 1-3 % without
anything being wrong, and a CI run in 30-100 would fail on chance. The test therefore
judges a second draw, `emu run --seed 2`'s dice, when the first has a sender outside, and
fails when both do: 1 in 10^3-10^4 by chance, while a fabric whose 2:1 does not converge
fails every time. A second draw costs ~35 s only when it runs. Runs under the NIC's
wake-up grid of 624e8ed (withdrawn in 5934ea4: a frame leaves at its pacer time) split up
to 0.286 (0.788 / 1.074 of C/2); since then the fabric's splits were 0.024-0.078 and,
once, 0.121 (docs/DCQCN_PARAMS.md "Why one sender leads"). The bound is the issue's, not
fitted to these runs.

The 3:1 (`--from h1g1,h2g1,h3g1 --size 860MiB`, TDF 3000): within +-15 % of C/3 per
sender (issue 31's bound, `TOLERANCE3`) over [80 ms, 0.9 of the first finish]. When to
judge, from the model with the fabric's PFC (the rail switch's ingress xOFF / xON and the
NICs' pauses, `--pfc`), all three starting together, the fabric's frame and pacer slack,
and the port's dice of `emu run --seed S` (S = 1..32):

    python -m emu.bench.dcqcnsim --senders 3 --qos paper --ms 100 --stagger-ms 0 \
        --frame 4154 --slack-us 0.74 --wred-seed S:eth4 --pfc --seeds 1-32

PFC pauses all three in the first ~60 us; in 10 of 32 seeds the pause stops the marks
long enough that some senders' second cut comes after their rate-increase timer: one
or two run at 0.97-1.38 of C/3 in the first ms, the rest at 0.66-0.76 - the fabric's start
(docs/DCQCN_PARAMS.md "Why one sender leads"). Every 5 ms average is within +-15 % from
80 ms or earlier in 29 of 32 seeds (3 never within in 100 ms, all three with such a
start; without PFC, seeds 1-16: all from 65 ms, 14 from 20 ms). The window starts at 80 ms;
860 MiB each (~108 ms model at C/3, ~6.4 min for the test at TDF 3000, where the guard
kept up) leaves a window of ~17 ms when all three are near C/3, and one 5 ms block
(the model's `SPAN`) while the leader averages up to ~1.14 of C/3 from posting; a sender
past ~1.21 finishes before 80 / 0.9 ms and leaves none (the test then reports its
average: past 1.15 a FairShareMissed, the xfail's). 800 MiB (until 2026-11-28) left no
window in a run whose leader averaged 1.14 and converged by 45 ms (docs/DCQCN_PARAMS.md,
run 5). Not strict: the model itself is not within by 80 ms in
3 of 32 seeds (3 of the 10 that start like the fabric), so a run may fail without the
fabric differing from the model. Opt-in (`EMU_LONG=1`): ~6.4 min, over the suite's budget.
Run it with `EMU_LONG=1 ./setup.sh test tests/netns/test_fairshare.py -k three -s`.
"""

import os

import pytest

import topologies
from emu.bench.dcqcnsim import fixed_points
from emu.realise.net import FabricNet
from emucore.qos.load import load_qos
from emucore.timedil import TimeDilation
from tests.netns.test_rnic import guarded
from traffic.workloads import rdma

pytestmark = pytest.mark.netns
MB = 1 << 20
TO, FROM = "h4g1", ["h1g1", "h2g1"]
SIZE = 96 * MB
TDF = 3000
#: the judged window's start, model seconds after the writes were posted (module docstring)
START_MODEL_S = 2e-3
ROCE_QUEUE = "3"
#: issue 31: a 2:1 within +-10 % of C/2 (the model's `emu.bench.dcqcnsim.TOLERANCE[2]`)
TOLERANCE = 0.10
#: the switches' and NICs' dice of each draw (`emu run --seed`); the second only when the
#: first has a sender outside `TOLERANCE` (module docstring, "Two draws")
SEEDS = (1, 2)
#: lab seconds between two readings of the bottleneck port's counters (`run_incast`)
PORT_EVERY_S = 2.0


def per_ms(r: dict, tdf: float) -> list[list[float]]:
    """Each sender's wire rate as a fraction of C/N per 1 ms of model time, from the
    incast's samples (for the report; the verdict is the window's steady rate)."""
    td, fair = TimeDilation(tdf), r["link_model_bps"] / len(r["from"])
    samples = r["rate_samples"]
    rows, k = [], 1
    prev = samples[0]
    for s in samples[1:]:
        if s[0] >= td.lab_time(k * 1e-3):
            rows.append([td.model_rate((b - a) * 8 / (s[0] - prev[0])) / fair
                         for a, b in zip(prev[2], s[2])])
            prev, k = s, k + 1
    return rows


def queue3(counters: dict) -> dict:
    """The RoCE queue's drops and CE marks, and PFC pauses sent, summed over every port
    of every switch in `counters` (switch -> counters)."""
    out = {"drops": 0, "marks": 0, "pause_tx": 0}
    for c in counters.values():
        for p in c["ports"].values():
            q = p["queues"].get(ROCE_QUEUE, {})
            out["drops"] += sum(q.get("drops", {}).values())
            out["marks"] += q.get("ecn_marks", 0)
            out["pause_tx"] += sum(p["pfc"]["pause_tx"])
    return out


def run_incast(tdf: float, froms: list[str] = FROM, size: int = SIZE,
               start_model_s: float = START_MODEL_S, port: tuple[str, str] | None = None,
               seed: int = 1) -> tuple[dict, dict, dict]:
    """(the incast's result, the guard's verdict, queue3 deltas) on a fresh rail2x4 whose
    switches and NICs draw from `seed` (`emu run --seed`); with `port` (switch, interface)
    also that port's RoCE-queue counters about every `PORT_EVERY_S` lab during the incast
    (`r["port_samples"]`: (lab s after posting, counters))."""
    with FabricNet(topologies.load("rail2x4", tdf=tdf), qos=load_qos("paper"),
                   seed=seed) as f:
        assert f.wait_pfc() == {}
        f.start_nics(gpus=[TO, *froms])  # DCQCN profile: paper (the NICs' default)
        switches = [s.name for s in f.fabric.switches()]
        before = queue3({s: f.counters(s) for s in switches})
        samples: list[tuple[float, dict]] = []

        def read_port(t: float) -> None:
            if port and (not samples or t >= samples[-1][0] + PORT_EVERY_S):
                samples.append((t, f.counters(port[0])["ports"][port[1]]["queues"][ROCE_QUEUE]))

        r, fid = guarded(f, [TO, *froms], lambda: rdma.incast(
            f.fabric, f.nic_sockets, TO, froms, size, start_model_s=start_model_s,
            on_sample=read_port))
        after = queue3({s: f.counters(s) for s in switches})
    r["port_samples"] = samples
    return r, fid, {k: after[k] - before[k] for k in after}


def one_draw(seed: int, earlier: list | None = None) -> dict[str, float]:
    """One 2:1 incast with the switches' dice of `seed`, once more at the guard's TDF if it
    fell behind (a busy machine makes it slower, not red): each sender's share of C/2 over
    the judged window, after the checks every draw must pass (byte-exact, no drop, no
    retransmit). A skip names the `earlier` draws' shares (a miss stays visible)."""
    tdf = TDF
    r, fid, q = run_incast(tdf, seed=seed)
    if not fid["kept_up"]:
        tdf = fid["suggested_tdf"]
        r, fid, q = run_incast(tdf, seed=seed)
    fair = r["link_model_bps"] / len(FROM)
    print(f"--- seed {seed}")
    print(rdma.describe(r))
    print(f"TDF {tdf:g}, kept up {fid['kept_up']} (p99 lag {fid['p99_lag_model_us']:.2f} us "
          f"model), finish {r['seconds_lab']} s lab, window "
          f"{r['window_lab_s']} s lab; switches: {q}; receiver CE {r['ce_rx_by_receiver']}, "
          f"CNPs {r['cnps_sent_by_receiver']}")
    print("per 1 ms model, share of C/2:",
          " ".join("/".join(f"{x:.2f}" for x in row) for row in per_ms(r, tdf)))
    assert set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values()), r
    assert q["drops"] == 0 and set(r["retransmits"].values()) == {0}, (q, r["retransmits"])
    if not fid["kept_up"]:
        pytest.skip(f"the lab fell behind at TDF {TDF:g} and {tdf:g} (seed {seed}): no rate "
                    f"to judge ({fid}); earlier draws (seed, shares): {earlier or []}")
    return {g: r["steady_rate_model_bps"][g] / fair for g in FROM}


def test_two_to_one_incast_gives_each_sender_half_the_port():
    draws = []
    for seed in SEEDS:
        shares = one_draw(seed, draws)
        draws.append((seed, shares))
        if all(abs(x - 1) <= TOLERANCE for x in shares.values()):
            return
    pytest.fail(f"a sender outside +-{TOLERANCE:.0%} of C/2 in every draw (seed: shares): "
                + "; ".join(f"{s}: " + ", ".join(f"{g} {x:.3f}" for g, x in sh.items())
                            for s, sh in draws))


#: the 3:1 (module docstring, "The 3:1"): senders, bytes each, TDF (the guard kept up at
#: 3000, p99 lag 0.75 us model), the judged window's start (model s after posting: the
#: model with PFC's 80 ms), issue 31's bound (`emu.bench.dcqcnsim.TOLERANCE[3]`)
FROM3 = ["h1g1", "h2g1", "h3g1"]
SIZE3 = 860 * MB
TDF3 = 3000
START3_MODEL_S = 80e-3
TOLERANCE3 = 0.15


class FairShareMissed(AssertionError):
    """A sender outside the tolerance of C/N over the judged window - the one failure
    the 3:1's xfail expects (a drop, a byte, a retransmit or no window fails it)."""


def steady_port(r: dict) -> dict:
    """The bottleneck port's RoCE queue over the judged window, from `port_samples`
    (the first and last reading inside `window_lab_s`): CE fraction of arrivals, and the
    sojourn histogram (switch_agent.queues.SOJOURN_EDGES_US bins) of the frames sent."""
    lo, hi = r["window_lab_s"]
    inside = [c for t, c in r["port_samples"] if lo <= t <= hi]
    if len(inside) < 2:
        return {}
    a, b = inside[0], inside[-1]
    arrivals = b["enqueued"] - a["enqueued"]
    return {"arrivals": arrivals, "marks": b["ecn_marked"] - a["ecn_marked"],
            "mark_fraction": (b["ecn_marked"] - a["ecn_marked"]) / arrivals if arrivals else 0.0,
            "sojourn_hist": [y - x for x, y in zip(a["sojourn_hist"], b["sojourn_hist"])]}


@pytest.mark.skipif(not os.environ.get("EMU_LONG"), reason=(
    "opt-in: EMU_LONG=1 runs the 3:1 fair share (~6 min, an expected failure, not strict; "
    "the module docstring says why it is not in the default suite)"))
@pytest.mark.xfail(strict=False, raises=FairShareMissed, reason=(
    "issue 31 finding: a lead set at the start by the PFC pause (docs/DCQCN_PARAMS.md "
    "'Why one sender leads') can outlast 80 ms, on the fabric as in the model with PFC "
    "(29 of 32 seeds within by 80 ms; 3 of the 10 that start with a lead never within in "
    "100 ms). Three runs judged from 80 ms (TDF 3000, kept up, p99 lag 0.42-0.75 us, "
    "seed 1, 16cd15c + the test, 2026-11-28), h1g1 / h2g1 / h3g1 of C/3: 0.94 / 0.94 / "
    "1.05 over 80-90.5 ms (860 MiB, within from 40 ms), 0.96 / 1.02 / 1.01 over 80-91.4 "
    "ms (within from 0 ms), and no window: h3g1 led at 1.14-1.57 per 5 ms and finished at "
    "74.6 ms (0.60 / 0.60 / 1.14 in 0-5 ms, 0.88 / 0.86 / 1.24 in 65-70 ms); a fourth "
    "(2dd296b) 1.06 / 0.92 / 1.02 over 80-80.7 ms (within from 50 ms); a fifth converged "
    "from 45 ms but left no window at 800 MiB; a sixth (668047a, 860 MiB) 0.92 / 1.09 / "
    "0.96 over 80-89.9 ms (within from 70 ms); a seventh (89537a4) 0.85 / 1.24 / 0.85 over "
    "80-81.1 ms (h2g1 at 1.16-1.34 of C/3 in every 5 ms); an eighth (9b8516a) 1.09 / 0.94 / "
    "0.97 over 80-80.6 ms (within from 70 ms). Not strict: 5 of 8 runs were "
    "judged within; a drop, a wrong byte, a retransmit or a missing window "
    "without a sender past the bound still fails the test."))
def test_three_to_one_incast_gives_each_sender_a_third_of_the_port():
    tdf = TDF3
    r, fid, q = run_incast(tdf, FROM3, SIZE3, START3_MODEL_S, ("rail1", "eth4"))
    if not fid["kept_up"]:  # a busy machine: once more at the guard's TDF
        tdf = fid["suggested_tdf"]
        r, fid, q = run_incast(tdf, FROM3, SIZE3, START3_MODEL_S, ("rail1", "eth4"))
    fair = r["link_model_bps"] / len(FROM3)
    rows = per_ms(r, tdf)
    print(rdma.describe(r))
    print(f"TDF {tdf:g}, kept up {fid['kept_up']} (p99 lag {fid['p99_lag_model_us']:.2f} us "
          f"model), finish {r['seconds_lab']} s lab, window {r['window_lab_s']} s lab; "
          f"switches: {q}; receiver CE {r['ce_rx_by_receiver']}, CNPs "
          f"{r['cnps_sent_by_receiver']}, rate cuts {r['rate_cuts']}")
    print("per 1 ms model, share of C/3:",
          " ".join("/".join(f"{x:.2f}" for x in row) for row in rows))
    print("per 5 ms model, share of C/3:", " ".join(
        "/".join(f"{sum(x[i] for x in rows[k:k + 5]) / len(rows[k:k + 5]):.2f}"
                 for i in range(len(FROM3))) for k in range(0, len(rows), 5)))
    closed, exact = fixed_points(3, "paper", "paper")
    print(f"rail1 eth4 queue 3 over the window: {steady_port(r)}; the fluid fixed point "
          f"(traffic.dcqcnfluid, 4174-byte frames): p* {closed.p:.2e} closed / {exact.p:.2e} "
          f"exact, q* {closed.queue_bytes / 1e3:.1f} / {exact.queue_bytes / 1e3:.1f} KB "
          f"(a sojourn of {exact.queue_bytes * 8 / r['link_model_bps'] * 1e6:.2f} us)")
    assert set(r["status"].values()) == {"SUCCESS"} and all(r["byte_exact"].values()), r
    assert q["drops"] == 0 and set(r["retransmits"].values()) == {0}, (q, r["retransmits"])
    if not fid["kept_up"]:
        pytest.skip(f"the lab fell behind at TDF {TDF3:g} and {tdf:g}: no rate to judge ({fid})")
    if None in r["steady_rate_model_bps"].values():
        # no window: a sender finished before START3 / 0.9; if its payload alone from
        # posting to its finish was above the bound, the lead outlasted the window's start
        g, t = min(r["seconds_lab"].items(), key=lambda x: x[1])
        share = SIZE3 * 8 / TimeDilation(tdf).model_time(t) / fair
        if share > 1 + TOLERANCE3:
            raise FairShareMissed(f"no window: {g} finished at "
                                  f"{TimeDilation(tdf).model_time(t) * 1e3:.1f} ms model, "
                                  f"{share:.2f} of C/3 from posting (payload)")
        raise AssertionError(("no window past the start", r))
    off = {g: rate / fair for g, rate in r["steady_rate_model_bps"].items()
           if rate != pytest.approx(fair, rel=TOLERANCE3)}
    if off:
        raise FairShareMissed(f"outside +-{TOLERANCE3:.0%} of C/3: {off}; {r['fair_share']}")
