"""MAC address conversions (emucore/wire/ether.py): exact bytes, errors naming the field."""

import pytest

from emucore.wire.ether import mac_bytes, mac_str


@pytest.mark.parametrize("text,raw", [
    ("02:00:00:00:00:0a", b"\x02\x00\x00\x00\x00\x0a"),
    ("02-00-00-00-05-00", b"\x02\x00\x00\x00\x05\x00"),
    ("FF:ff:FF:ff:FF:ff", b"\xff" * 6),
    (b"\x02\x00\x00\x00\x01\x01", b"\x02\x00\x00\x00\x01\x01"),
])
def test_mac_bytes(text, raw):
    assert mac_bytes(text) == raw


@pytest.mark.parametrize("bad", ["02:00", "02:00:00:00:00:00:01", "zz:00:00:00:00:00", b"\x02"])
def test_mac_bytes_rejects(bad):
    with pytest.raises(ValueError, match="mac"):
        mac_bytes(bad)


def test_mac_str_round_trip():
    assert mac_str(b"\x02\x00\x00\x00\x05\x0a") == "02:00:00:00:05:0a"
    assert mac_str(mac_bytes("AA:BB:CC:DD:EE:FF")) == "aa:bb:cc:dd:ee:ff"
