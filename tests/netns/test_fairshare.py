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
8000 that is ~70 s lab. TDF 8000: the 3:1 incast kept up there on the compiled path
(docs/PERFORMANCE.md, `emu bench fidelity`); a 2:1 offers two thirds of its load.

The split is set by the 3-5 cuts of the first ~2.5 ms and then frozen (the two add up to
less than C for ~5 ms), so a run judges one draw of them. The switches' dice are the same
in every run unless `emu run --seed` changes them (default 1, this test's). Runs under
the NIC's wake-up grid of 624e8ed (withdrawn in 5934ea4: a frame leaves at its pacer
time) split up to 0.286 (0.788 / 1.074 of C/2), wider than the model; since then, seeds
1, 2 and 3 gave splits 0.024, 0.065 and 0.042 (docs/DCQCN_PARAMS.md "Why one sender
leads"), within the model's spread over 24 dice. One draw per run still decides, so a
wider draw remains possible; the bound is the issue's, not fitted to these runs.
"""

import pytest

import topologies
from emu.realise.net import FabricNet
from emucore.qos.load import load_qos
from emucore.timedil import TimeDilation
from tests.netns.test_rnic import guarded
from traffic.workloads import rdma

pytestmark = pytest.mark.netns
MB = 1 << 20
TO, FROM = "h4g1", ["h1g1", "h2g1"]
SIZE = 96 * MB
TDF = 8000
#: the judged window's start, model seconds after the writes were posted (module docstring)
START_MODEL_S = 2e-3
ROCE_QUEUE = "3"
#: issue 31: a 2:1 within +-10 % of C/2 (the model's `emu.bench.dcqcnsim.TOLERANCE[2]`)
TOLERANCE = 0.10


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


def run_incast(tdf: float) -> tuple[dict, dict, dict]:
    """(the incast's result, the guard's verdict, queue3 deltas) on a fresh rail2x4."""
    with FabricNet(topologies.load("rail2x4", tdf=tdf), qos=load_qos("paper")) as f:
        assert f.wait_pfc() == {}
        f.start_nics(gpus=[TO, *FROM])  # DCQCN profile: paper (the NICs' default)
        switches = [s.name for s in f.fabric.switches()]
        before = queue3({s: f.counters(s) for s in switches})
        r, fid = guarded(f, [TO, *FROM], lambda: rdma.incast(
            f.fabric, f.nic_sockets, TO, FROM, SIZE, start_model_s=START_MODEL_S))
        after = queue3({s: f.counters(s) for s in switches})
    return r, fid, {k: after[k] - before[k] for k in after}


def test_two_to_one_incast_gives_each_sender_half_the_port():
    tdf = TDF
    r, fid, q = run_incast(tdf)
    if not fid["kept_up"]:  # a busy machine: once more at the guard's TDF
        tdf = fid["suggested_tdf"]
        r, fid, q = run_incast(tdf)
    fair = r["link_model_bps"] / len(FROM)
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
        pytest.skip(f"the lab fell behind at TDF {TDF:g} and {tdf:g}: no rate to judge ({fid})")
    for g in FROM:
        rate = r["steady_rate_model_bps"][g]
        assert rate == pytest.approx(fair, rel=TOLERANCE), (g, rate / fair, r["fair_share"])
