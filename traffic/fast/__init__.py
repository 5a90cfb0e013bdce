"""The NIC's per-frame work in C (issue 30): DCQCN's reaction and notification points, the
RC responder's in-order WRITE and SEND packets, the requester's next WRITE packet and its
ACKs, the NIC's transmit loop.

Each `traffic/fast/NAME.c` is built by emucore/cbuild.py (./setup.sh runs it) as
`traffic.fast._NAME` and mirrors a Python reference under the same names; the Python stays
the reference (docs/DATAPATH.md "Keeping Python the reference") and a differential test
holds the two equal: `dcqcn.c` mirrors traffic/dcqcn.py (tests/unit/test_fast_dcqcn.py),
`rc.c` traffic/rc/responder.py's on_packet and traffic/rc/requester.py's next_packet and
on_response for their commonest cases (test_fast_rc.py), `nictx.c` traffic/nic/datapath.py's
Nic.transmit (test_fast_nictx.py).
`traffic.fast.dcqcn`, `traffic.fast.rc` and `traffic.fast.nictx` choose by EMU_DATAPATH.
Importing this package imports no C, so the Python data path runs where nothing is built.
"""
