"""A run's NIC totals count what destroyed QPs sent (no root): a QP sampled, sending
more, then destroyed before the next sample must not lose its last bytes from
summary.json's "nics", metrics.csv or a lab's NIC counter."""

import pytest

import topologies
from emu.lab.checks import Evidence, counter
from emu.observe.metrics import Sampler, merge_qps, nic_rows, read_rows
from emu.observe.summary import nic_totals
from emucore.timedil import TimeDilation
from traffic.nic.datapath import Nic
from traffic.nic.nicconfig import NicConfig
from traffic.nic.nicverbs import CLOSED_KEPT, CLOSED_SUMS

TD = TimeDilation(1000)


def qp(tx, cnps=0, retx=0, state="RTS"):
    """A QP's counters as the NIC reports them (traffic.nic.nicverbs.NicQp.snapshot)."""
    return {"state": state, "tx_bytes": tx, "tx_wire_bytes": tx + 58, "cnps_sent": 0,
            "cnps_rx": cnps, "retransmits": retx, "rate_model_bps": 1e11}


def nic(t, qps, closed=(), tx=0, cnps=0, retx=0):
    """A NIC snapshot: its live QPs, the sums over its destroyed QPs and their records."""
    return {"gpu": "h1g1", "t_lab": t, "qps": qps, "closed_qps_tx_bytes": tx,
            "closed_qps_tx_wire_bytes": tx + 58 * len(closed), "closed_qps_cnps_sent": 0,
            "closed_qps_cnps_rx": cnps, "closed_qps_retransmits": retx,
            "closed_qps": list(closed)}


def sequence():
    """QP 7 sampled at 1,000 B, then sends 2,500 B more and is destroyed (3,500 B, 2
    CNPs received, 1 retransmit) before the sample at t=2; QP 9 is created, sends
    4,000 B and is destroyed between t=2 and t=3, never sampled; QP 8 lives on."""
    final7 = {"qpn": 7, "t_lab": 1.5, **qp(3_500, cnps=2, retx=1)}
    final9 = {"qpn": 9, "t_lab": 2.5, **qp(4_000)}
    return [nic(1.0, {"7": {**qp(1_000), "nscc": {"nacks": 4}}, "8": qp(100)}),
            nic(2.0, {"8": qp(300)}, [final7], tx=3_500, cnps=2, retx=1),
            nic(3.0, {"8": qp(600)}, [final7, final9], tx=7_500, cnps=2, retx=1)]


def sampled(tmp_path, snaps):
    it = iter(snaps)
    s = Sampler(tmp_path / "m.csv", TD, 1.0, {"h1g1": lambda brief: next(it)}, {"h1g1": "nic"})
    s.start()
    for _ in snaps[2:]:
        s.sample()
    return s.stop()


def test_nic_total_is_closed_plus_live(tmp_path):
    last = sampled(tmp_path, sequence())
    # 3,500 (QP 7, final) + 4,000 (QP 9, never sampled) + 600 (QP 8, live); the
    # last-sampled sum was 1,000 + 600 = 1,600: 6,500 B lost (2,500 of QP 7, all of QP 9)
    assert nic_totals(last)["h1g1"] == {"tx_bytes": 8_100, "cnps_rx": 2, "retransmits": 1,
                                        "cnps_sent": 0}


def test_destroyed_qps_carry_their_final_counters(tmp_path):
    qps = sampled(tmp_path, sequence())["h1g1"]["qps"]
    assert qps["7"]["tx_bytes"] == 3_500 and qps["7"]["destroyed"] == "final"
    assert qps["7"]["nscc"] == {"nacks": 4}  # what the record lacks: as last sampled
    assert qps["9"]["tx_bytes"] == 4_000 and qps["9"]["destroyed"] == "final"
    assert "destroyed" not in qps["8"]


def test_beyond_the_record_a_qp_is_marked_last_sampled():
    a = nic(1.0, {"7": qp(1_000)})
    b = nic(2.0, {}, (), tx=3_500)  # the NIC no longer holds QP 7's record
    merge_qps(a, b)
    assert b["qps"]["7"] == {**qp(1_000), "destroyed": "last_sampled"}
    assert nic_totals({"h1g1": b})["h1g1"]["tx_bytes"] == 3_500


def test_metrics_csv_keeps_every_byte(tmp_path):
    sampled(tmp_path, sequence())
    wire = sum(r["value"] * 1e-3 / 8 for r in read_rows(tmp_path / "m.csv")  # 1 s lab = 1 ms model
               if r["metric"] == "tx_bps")
    # tx_wire_bytes grew by 3,558 - 1,058 (QP 7) + 4,058 (QP 9) + 600 - 100 (QP 8)
    assert wire == pytest.approx(7_058)


def test_destroyed_qps_give_no_rows_after_the_interval_they_ended_in():
    a, b, c = sequence()
    merge_qps(a, b)
    merge_qps(b, c)
    assert {r[2] for r in nic_rows(b, c, TD, 0.0)} == {"qp8", "qp9"}


def test_old_snapshots_without_closed_records_sum_every_qp():
    # an older run's last_counters.json: QP 7 kept unmarked, its 1,000 B also in the sum
    old = {"h1g1": {"qps": {"7": qp(1_000), "8": qp(600)}, "closed_qps_tx_bytes": 1_000}}
    assert nic_totals(old)["h1g1"]["tx_bytes"] == 1_600


def test_lab_counter_of_a_nic_counts_destroyed_qps(tmp_path):
    a = nic(1.0, {"7": qp(1_000, cnps=1)})
    b = nic(2.0, {"8": qp(0)}, (), tx=3_500, cnps=3)  # QP 7's record is gone
    last = sampled(tmp_path, [a, b])
    ev = Evidence.__new__(Evidence)
    ev.counters, ev.links = last, {}
    assert counter(ev, {"node": "h1g1", "name": "cnps_rx"}) == 3  # not 1, as sampled


def test_the_nic_keeps_destroyed_qps_final_counters():
    fab = topologies.load("rail2x4", tdf=1000)
    n = Nic(NicConfig.for_gpu(fab, "h1g1", "/nonexistent", seed=1), open_sockets=False)
    pd, cq = n.alloc_pd(), n.create_cq()
    qpns = [n.create_qp(pd, cq, cq) for _ in range(CLOSED_KEPT + 2)]
    for i, qpn in enumerate(qpns):
        n.qps[qpn].ep.requester.counters.bytes = 1_000 + i
        n.qps[qpn].cnp_rx = 1
    live = n.create_qp(pd, cq, cq)
    n.qps[live].ep.requester.counters.bytes = 5
    for qpn in qpns:
        n.destroy_qp(qpn)
    c = n.counters()
    assert c["closed_qps_tx_bytes"] == sum(1_000 + i for i in range(len(qpns)))
    assert c["closed_qps_cnps_rx"] == len(qpns)
    assert [r["qpn"] for r in c["closed_qps"]] == qpns[-CLOSED_KEPT:]
    assert c["closed_qps"][-1]["tx_bytes"] == 1_000 + len(qpns) - 1
    assert {f"closed_qps_{k}" for k in CLOSED_SUMS} <= set(c)
    assert nic_totals({"h1g1": c})["h1g1"]["tx_bytes"] == c["closed_qps_tx_bytes"] + 5
