"""An over-long UET SEND is answered RC_TOO_LONG (0x22, UE 1.0.1's SES return-code table)."""

import pytest

from emucore.wire.uet import NextHdr, RetCode
from emucore.wire.uet_codec import parse
from tests.unit.test_send import urecv, usend
from tests.unit.test_uet_transport import Fabric, fill


@pytest.mark.parametrize("length", [5000, 20_000])   # one packet and several
def test_an_over_long_send_is_answered_rc_too_long(length):
    fab = Fabric(2, size=1 << 20)
    codes = []
    send = fab.send

    def spy(frm, frame, to):
        f = parse(frame)
        if frm is fab.b and f is not None and f.nh == NextHdr.RSP and f.rsp:
            codes.append(f.rsp[1])
        send(frm, frame, to)

    fab.send = spy
    fill(fab.a, 3)
    urecv(fab.b, 8, 500_000, 4096)
    usend(fab.a, 1, 0, length)
    fab.run(until=1e-3)
    assert codes and set(codes) == {0x22} and RetCode.TOO_LONG == 0x22
