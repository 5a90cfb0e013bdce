"""Which receive loop the NIC runs: the C of traffic/fast/nicrx.c or the Python reference
(issue 30).

traffic/fast/nicrx.c, built by emucore/cbuild.py as `traffic.fast._nicrx`, mirrors
traffic/nic/datapath.py's `Nic.receive` stage by stage under the same name: the reads of the
raw socket (recvmsg with the kernel's SO_TIMESTAMPNS stamp, or recv), each frame's arrival
on the monotonic clock (traffic.nic.wakeup.arrival's float operations) to the fidelity
meter ("rx": emucore.fidelity.LagMeter.record in C for a LagMeter, emucore/csrc/lagrec.h,
as traffic/fast/nictx.c's "pacer"), and each frame's `on_frame`: in C for a data, ACK or CNP frame of a known QP
(counters, the CNP's reaction point, a CE mark's notification point and CNP, the RocePkt
of `pkt_of`, the RC endpoint - its C in-order WRITE / SEND / ACK first, as the Fast
classes -, each reply's frame sent, nak_tx, q.blocked), every other frame (PFC, UET,
malformed, bad checksum, another address, an unknown QP) handed whole to the Python
`Nic.on_frame` before anything changed; an instance whose on_frame is not Nic.on_frame
gets its own for every frame. A call it cannot do exactly answers NotImplemented having
changed nothing, and the Python runs. tests/unit/test_fast_nicrx.py holds the two equal
(both directions: data and CE to a responder, ACKs, NAKs and CNPs to a requester), also
under ASan + UBSan.

`EMU_DATAPATH` chooses (emucore.datapath), read once at import: `RECEIVE` is the C
function under auto and fast, None under python; with auto or fast and the C not built
from today's sources, importing this module is emucore.datapath.NotBuilt.
"""

from __future__ import annotations

from typing import Callable

from emucore import datapath

__all__ = ["MODULE", "receive", "lag_record", "RECEIVE"]

MODULE = "traffic.fast._nicrx"


def receive(name: str | None = None) -> Callable | None:
    """The C Nic.receive on data path `name` (default $EMU_DATAPATH); None: Python."""
    c = datapath.compiled(MODULE, name)
    return c and c.receive


def lag_record(name: str | None = None) -> Callable | None:
    """The C meter.record(due, done, what) the receive loop uses for each frame's "rx"
    wait (emucore/csrc/lagrec.h: emucore.fidelity.LagMeter.record inline) on data path
    `name`; None: Python."""
    c = datapath.compiled(MODULE, name)
    return c and c.lag_record


RECEIVE = receive()
