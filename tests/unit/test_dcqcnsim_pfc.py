"""PFC in the DCQCN discrete-event model (emu/bench/dcqcnsim.py, `simulate(pfc=True)`):
the switch's ingress accounting per sender's port with the QoS preset's xOFF / xON
(emucore.qos.pfc.IngressPfc's rules), the pause reaching the sender a hop later, the
sender sending nothing while paused.

Bounds: a port's held bytes past xOFF are what is in flight while the pause takes
effect, `emucore.qos.pfc.headroom_needed` (book ch.11 Step 2: 2 x delay x rate + 2 x
MTU); a pause lasts `pause_quanta` x 512 bit times (IEEE 802.1Qbb) unless refreshed or
resumed.
"""

import pytest

from emu.bench.dcqcnsim import QUANTUM_BITS, simulate
from emucore.qos.load import load_qos
from emucore.qos.pfc import headroom_needed

PFC = load_qos("paper").pfc
FRAME = 4154
LINK = 200e9


def test_one_sender_at_line_rate_holds_one_frame_and_never_pauses():
    # one sender at the port's own rate: each frame finds the port idle and leaves at
    # once, so its ingress port holds exactly one frame at a time (a missed release
    # would pile up past xOFF within 62 frames)
    run = simulate(1, duration=0.001, frame=FRAME, pfc=True)
    assert run.max_held == [FRAME]
    assert (run.pauses, run.resumes, run.paused, run.headroom_over) == ([0], [0], [[]], 0)
    assert sum(r[0] for r in run.delivered) > 0.99 * LINK / 8 * 0.001 - FRAME


@pytest.mark.parametrize("seed", [1, 2, 10])
def test_three_to_one_pauses_each_sender_within_its_headroom(seed):
    hop = 1e-6
    run = simulate(3, duration=0.002, stagger=0.0, frame=FRAME, slack=0.74e-6, seed=seed,
                   wred_seed=f"{seed}:eth4", hop=hop, pfc=True)
    assert run.headroom_over == 0
    for held in run.max_held:   # past xOFF only by what was in flight (the book's rule)
        assert held <= PFC.xoff_bytes + headroom_needed(LINK, hop, FRAME)
    pause_s = PFC.pause_quanta * QUANTUM_BITS / LINK
    for i in range(3):
        ivs = run.paused[i]
        assert run.resumes[i] <= run.pauses[i]
        assert len(ivs) <= run.pauses[i]
        for (a, b), nxt in zip(ivs, ivs[1:] + [(2.0, 2.0)]):
            assert hop < a < b <= nxt[0]
            # one pause unrefreshed: at most its quanta; a refresh comes every half pause
            assert b - a <= pause_s * (1 + run.pauses[i])


def test_a_pause_stops_the_sender():
    # every sender is paused at the start (seed 1: ~17-57 us); it sends no frame while
    # paused and sends again after (traffic.nic.datapath: a QP waits while its priority
    # is paused)
    run = simulate(3, duration=0.0002, stagger=0.0, frame=FRAME, slack=0.74e-6,
                   wred_seed="1:eth4", pfc=True, sample=1e-6)
    assert all(run.paused)
    for i in range(3):
        for a, b in run.paused[i]:
            inside = range(int(a * 1e6) + 1, int(b * 1e6))
            assert len(inside) > 10
            assert [run.sent[k][i] for k in inside] == [0] * len(inside)
            assert sum(run.sent[k][i] for k in range(int(b * 1e6), int(b * 1e6) + 10)) > 0


def test_pfc_is_off_by_default():
    a = simulate(3, duration=0.002, stagger=0.0, frame=FRAME, wred_seed="1:eth4")
    b = simulate(3, duration=0.002, stagger=0.0, frame=FRAME, wred_seed="1:eth4", pfc=True)
    assert a.pauses == [0, 0, 0] and a.paused == [[], [], []]
    assert a.max_depth > PFC.xoff_bytes * 3   # no PFC: the queue goes past every xOFF
    assert b.max_depth < a.max_depth
