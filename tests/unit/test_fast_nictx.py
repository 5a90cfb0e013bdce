"""The C Nic.transmit (traffic/fast/nictx.c) against the Python reference
(traffic/nic/datapath.py): the same scenarios run with each - two socket-less NICs wired
back to back (test_nic's `connected`), WRITEs on several QPs in round robin, CE marks and
DCQCN's CNPs, PFC pauses that expire or are resumed, a small window that blocks and
re-opens QPs, lost and refused frames and their retransmissions - and must give the same
frames (bytes) at the same times, the same pacer state after every step, the same
counters, fidelity meter and DCQCN state. Also under ASan + UBSan."""

import contextlib
import random

import pytest

from emucore.fidelity import LagMeter
from tests.unit.test_fast_dcqcn import run_sanitized
from tests.unit.test_nic import Wire, connected, own_qps
from traffic.fast import nictx
from traffic.nic import datapath
from traffic.workreq import WCStatus

C = nictx.transmit("fast")


class Clock:
    """The NICs' lab clock: the driver's time plus a seeded lateness (the meter's lags)."""

    def __init__(self, seed):
        self.t, self.rng = 0.0, random.Random(seed)

    def __call__(self):
        return self.t + self.rng.choice((0.0, 0.0, 2e-7, 3e-5, 2e-3))


class Flaky(Wire):
    """A wire whose send fails (OSError) for every `every`-th frame."""

    def __init__(self, every):
        super().__init__()
        self.every, self.n = every, 0

    def send(self, f):
        self.n += 1
        if self.n % self.every == 0:
            raise OSError("ENOBUFS")
        super().send(f)


class Meter(LagMeter):
    """Not a LagMeter exactly: the C calls its record."""


class SubNic(datapath.Nic):
    """Not a Nic exactly: the C reads its attributes by getattr, not from its __dict__."""


def mark_ce(f):
    """The frame with ECN CE and its IPv4 header checksum redone (a switch's mark)."""
    m = bytearray(f)
    m[15] |= 3
    m[24:26] = b"\0\0"
    csum = sum(m[i] << 8 | m[i + 1] for i in range(14, 34, 2))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    m[24:26] = (~csum & 0xFFFF).to_bytes(2, "big")
    return m


def nic_state(nic, now):
    """Everything transmit changes or reads, but wall-clock fields."""
    return (dict(nic.c), nic.meter.snapshot(), nic.rr, nic.port_next,
            nic.pause.counters(now), nic.pause.mask,
            [(q.qpn, q.next_t, q.ready_at, q.blocked, q.tx_frames, q.tx_wire_bytes,
              q.snapshot(nic.td)) for q in nic.order])


@contextlib.contextmanager
def using(fn):
    """Nic.transmit dispatching to `fn` (None: the Python); counts what the C answered."""
    answers = []

    def counted(nic, now):
        r = fn(nic, now)
        answers.append(r)
        return r

    saved = datapath.TRANSMIT
    datapath.TRANSMIT = None if fn is None else counted
    try:
        yield answers
    finally:
        datapath.TRANSMIT = saved


def scenario(seed, fn, nqp=3, size=96 * 1024, loss=0.0, ce=0.0, pfc=(), window=None,
             flaky=0, send_hook=False, meter=False, delay=0, subclass=False):
    """One run; returns (trace, final states). `pfc`: (step, quanta) PFC frames to NIC a
    on its data priority; `loss`/`ce`: per data frame a -> b; `flaky`: a's wire fails
    every flaky-th send; `send_hook`: a's send is an instance attribute; `meter`: a's
    meter is a LagMeter subclass; `delay`: b's frames reach a that many steps later;
    `subclass`: a is a Nic subclass."""
    rng, clock = random.Random(seed), Clock(seed)
    kw = {} if window is None else {"window": window}
    data = random.Random(seed).randbytes(size)
    with using(fn) as answers, connected(size, data, clock=clock, **kw) as c, \
            own_qps(c.a, *[{}] * (nqp - 1), size=size, clear_shms=False) as qa_more, \
            own_qps(c.b, *[{}] * (nqp - 1), size=size, clear_shms=False) as qb_more:
        a, b = c.a, c.b
        pairs = [(c.qa, c.qb, c.ma, c.mb)]
        for (_, ma, _, qa), (_, mb, _, qb) in zip(qa_more, qb_more):
            a.to_rtr(qa, qb.qpn, qb.start_psn, b.cfg.ip, 4096)
            a.to_rts(qa)
            b.to_rtr(qb, qa.qpn, qa.start_psn, a.cfg.ip, 4096)
            b.to_rts(qb)
            pairs.append((qa, qb, ma, mb))
        if flaky:
            a.raw = Flaky(flaky)
        if send_hook:
            sent = []
            a.send = lambda f, send=a.send: sent.append(len(f)) or send(f)
        if meter:
            a.meter = Meter(a.td)
        if subclass:
            a.__class__ = SubNic
        now = clock.t = 100.0
        for k, (qa, _, ma, mb) in enumerate(pairs):
            n = size - 1000 * k
            a.post_send(qa.qpn, [{"wr_id": k, "local_addr": ma["addr"], "length": n,
                                  "lkey": ma["lkey"], "remote_addr": mb["addr"],
                                  "rkey": mb["rkey"], **({"imm": k} if k % 2 else {})}])
        trace, pfc, late = [], dict(pfc), []
        for step in range(4000):
            clock.t = now
            if step in pfc:
                a.on_pfc(1 << a.cfg.pfc_priority, (pfc[step],) * 8, now)
            sleeps = [nic.step(now) for nic in (a, b)]
            trace.append((now, a.port_next, a.rr, tuple((q.next_t, q.blocked) for q in a.order)))
            for src, dst in ((a, b), (b, a)):
                frames, src.raw.frames = src.raw.frames, []
                for f in frames:
                    trace.append((src.cfg.gpu, f))
                    if src is a and f[42] != 0x11:  # data, not an ACK
                        if rng.random() < loss:
                            continue
                        if rng.random() < ce:
                            f = mark_ce(f)
                    if src is b:
                        late.append((step + delay, f))
                    else:
                        dst.on_frame(memoryview(bytearray(f)), now)
            while late and late[0][0] <= step:
                a.on_frame(memoryview(bytearray(late.pop(0)[1])), now)
            if not late and all(qa.ep.requester.idle() for qa, *_ in pairs):
                break
            now += max(min(sleeps), 1e-7)
        assert all(qa.ep.requester.idle() for qa, *_ in pairs), "the scenario did not finish"
        assert all(qa.ep.requester.counters.completions == 1 for qa, *_ in pairs)
        assert all(qa.ep.requester.error is None for qa, *_ in pairs)
        return trace, nic_state(a, now), nic_state(b, now), answers


CASES = {
    "round robin": dict(nqp=3),
    "one QP, 1 MB": dict(nqp=1, size=1 << 20),
    "CE marks, CNPs": dict(ce=0.3),
    "PFC pause expires, another resumed": dict(pfc=((5, 2000), (40, 0xFFFF), (48, 0))),
    "window fills": dict(window=4, ce=0.1, delay=6),
    "loss": dict(loss=0.05, window=16),
    "send fails, hooked send, meter subclass": dict(flaky=9, send_hook=True, meter=True),
    "a Nic subclass, send fails": dict(flaky=7, subclass=True, ce=0.2),
}


@pytest.mark.parametrize("case", CASES)
def test_c_transmit_is_the_python(case):
    """Frames, times, pacer state, counters, meter and DCQCN are identical; the C did every
    call (it never answered NotImplemented)."""
    kw = CASES[case]
    ref = scenario(1, None, **kw)
    got = scenario(1, C, **kw)
    assert got[:3] == ref[:3]
    assert got[3] and all(r is None for r in got[3])
    frames = [t for t in ref[0] if isinstance(t[0], str) and t[0] == "h1g1"]
    assert len(frames) > 20


def test_scenarios_exercise_what_they_name():
    """The cases are not vacuous: CNPs cut a rate, a pause held frames, a window blocked,
    frames were retransmitted, sends failed."""
    _, a, _, _ = scenario(1, C, **CASES["CE marks, CNPs"])
    assert any(q[6]["cnps_rx"] > 0 and q[6]["rate_model_bps"] < 200e9 for q in a[6])
    _, a, _, _ = scenario(1, C, **CASES["PFC pause expires, another resumed"])
    assert a[4]["pauses_rx"][3] == 2 and a[4]["resumes_rx"][3] == 1
    trace, _, _, _ = scenario(1, C, **CASES["window fills"])
    assert sum(b for t in trace if isinstance(t[0], float) for _, b in t[3]) > 20
    _, a, _, _ = scenario(1, C, **CASES["loss"])
    assert sum(q[6]["retransmits"] for q in a[6]) > 0
    _, a, _, _ = scenario(1, C, **CASES["send fails, hooked send, meter subclass"])
    assert a[0]["tx_errors"] > 0


def test_what_the_c_does_not_do_changes_nothing():
    """A time that is neither float nor int, or a TimeDilation replaced: NotImplemented,
    and the NIC's state is as it was."""
    with connected(4096 * 4, bytes(4096 * 4)) as c:
        a = c.a
        a.post_send(c.qa.qpn, [{"wr_id": 1, "local_addr": c.ma["addr"], "length": 4096 * 4,
                                "lkey": c.ma["lkey"], "remote_addr": c.mb["addr"],
                                "rkey": c.mb["rkey"]}])
        before = nic_state(a, 100.0)
        assert C(a, "100") is NotImplemented
        from decimal import Decimal
        assert C(a, Decimal(100)) is NotImplemented
        td = a.td
        a.td = type("TD", (), {"tdf": td.tdf, "model_time": td.model_time,
                               "lab_rate": td.lab_rate})()
        assert C(a, 100.0) is NotImplemented
        a.td = td
        assert nic_state(a, 100.0) == before and a.raw.frames == []
        assert C(a, 100.0) is None and len(a.raw.frames) == 1


SANITIZED_CHILD = """
from tests.unit import test_fast_nictx as t
assert t.C is mod.transmit, "the sanitized build is not the one in use"
for case in ("round robin", "PFC pause expires, another resumed", "loss",
             "send fails, hooked send, meter subclass"):
    t.test_c_transmit_is_the_python(case)
t.test_what_the_c_does_not_do_changes_nothing()
import gc; gc.collect()
print("sanitized ok")
"""


def test_sanitized(tmp_path):
    """The differential scenarios against an ASan + UBSan build, in a child Python."""
    run_sanitized(nictx.MODULE, SANITIZED_CHILD, tmp_path)
