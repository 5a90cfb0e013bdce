"""emu.bench.nicloop: two NICs' loops over a socketpair deliver a paced WRITE and report
per-frame CPU, wake-ups and the sender's pacer lag (no root)."""

from emu.bench import nicloop


def test_one_write_is_delivered_and_counted():
    r = nicloop.once(frames=40, tdf=200)  # 200 Gb/s model -> 1 Gb/s lab: 33 us a frame
    assert r["done"] and r["tx_frames"] == 40
    assert r["frame_lab_us"] == 4096 * 8 / 1e9 * 1e6
    assert r["tx_cpu_us_per_frame"] > 0 and r["rx_cpu_us_per_frame"] > 0
    assert 0 < r["tx_wakeups_per_frame"] and 0 < r["rx_wakeups_per_frame"]


def test_both_ways_each_nic_sends_and_receives_its_write():
    r = nicloop.once(frames=40, tdf=200, both=True)
    assert r["done"] and r["both"]
    assert r["tx_frames"] >= 40 and r["rx_acks"] >= 40  # its data out, the other's data in


def test_split_times_each_stage_of_both_loops_and_restores_select():
    r = nicloop.once(frames=40, tdf=200, split=True)
    assert r["done"] and r["tx_frames"] == 40
    tx, rx = r["tx_split_us_per_frame"], r["rx_split_us_per_frame"]
    assert set(tx) == set(rx) == {"wait", "receive", "transmit", "rest"}
    assert tx["wait"] > 0 and tx["transmit"] > 0  # the sender waits and sends
    assert rx["wait"] > 0 and rx["receive"] > 0  # the receiver waits and reads
    assert r["tx_minflt_per_frame"] >= 0 and r["rx_minflt_per_frame"] >= 0
    assert nicloop.datapath.select is nicloop.select  # the module's own select again
