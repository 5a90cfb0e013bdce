"""Time-dilation conversions and unit parsing."""

import pytest

from emucore.timedil import (DEFAULT_TDF, TimeDilation, format_duration, format_rate, parse_duration,
                         parse_rate, parse_size)


def test_rates_and_times():
    td = TimeDilation(1000)
    assert td.lab_rate(200e9) == 200e6
    assert td.model_rate(400e6) == 400e9
    assert td.lab_time(55e-6) == pytest.approx(55e-3)
    assert td.model_time(2.0) == pytest.approx(2e-3)
    for v in (1.0, 3e9, 7e-7):
        assert td.model_rate(td.lab_rate(v)) == pytest.approx(v)
        assert td.model_time(td.lab_time(v)) == pytest.approx(v)


def test_pause_quanta_book_example():
    td = TimeDilation(1000)
    # ch.11: 0xFFFF quanta at 400 Gbps ~ 83.9 us; at 100G 335 us (docs/DCQCN_PARAMS.md)
    assert td.pause_model_s(0xFFFF, 400e9) == pytest.approx(83.8848e-6)
    assert td.pause_model_s(0xFFFF, 100e9) == pytest.approx(335.5392e-6)
    assert td.pause_lab_s(0xFFFF, 400e9) == pytest.approx(83.8848e-3)
    assert td.pause_model_s(1, 400e9) == pytest.approx(1.28e-9)


def test_default_and_bad_tdf():
    assert TimeDilation().tdf == DEFAULT_TDF
    with pytest.raises(ValueError, match="tdf"):
        TimeDilation(0)


@pytest.mark.parametrize("text, bps", [("200G", 200e9), ("400Gbps", 400e9), ("100M", 100e6),
                                      ("1.5T", 1.5e12), (5, 5.0), ("10 kbps", 10e3)])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text, n", [("150KB", 150_000), ("3000 KB", 3_000_000), ("64MB", 64_000_000),
                                    ("9216", 9216), ("2KiB", 2048), ("1MiB", 1 << 20)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text, s", [("55us", 55e-6), ("1.5 ms", 1.5e-3), ("2s", 2.0),
                                    ("10ns", 10e-9), ("4µs", 4e-6)])
def test_parse_duration(text, s):
    assert parse_duration(text) == pytest.approx(s)


def test_formatting():
    assert format_rate(200e9) == "200 Gbps"
    assert format_rate(2e8) == "200 Mbps"
    assert format_duration(83.8848e-6) == "83.88 µs"


@pytest.mark.parametrize("env, tdf", [({}, 1.0), ({"EMU_TDF": "5000"}, 5000.0),
                                      ({"EMU_TDF": "2.5e3"}, 2500.0), ({"EMU_TDF": ""}, 1.0)])
def test_from_env(env, tdf):
    assert TimeDilation.from_env(env) == TimeDilation(tdf)


@pytest.mark.parametrize("bad", ["fast", "0", "-3"])
def test_from_env_names_the_variable(bad):
    with pytest.raises(ValueError, match="EMU_TDF"):
        TimeDilation.from_env({"EMU_TDF": bad})
