"""The trimmed-header class of a switch port (switch_agent.queues, issue 32): served after
the strict control queue and before data, capped at `share` % while data waits, work
conserving when alone."""

import pytest

from emucore.qos.queuing import Queuing
from emucore.qos.trim import Trim
from switch_agent.queues import PortQueues

DATA, TRIMQ, CTRL = 3, 6, 7
MTU = 4200


def fill(pq, q, n, size):
    for _ in range(n):
        pq.enqueue(q, bytes(size))


def drain(pq, n=10 ** 6):
    out = []
    while len(out) < n and (e := pq.dequeue()) is not None:
        out.append(e)
    return out


@pytest.mark.parametrize("share", [25, 50])
def test_the_trimmed_class_gets_at_most_its_share_when_data_is_backlogged(share):
    pq = PortQueues(Queuing(), MTU, trim=Trim(share=share))
    fill(pq, DATA, 2000, 4098)
    fill(pq, TRIMQ, 20_000, 106)
    got = drain(pq, 1500)
    tb = sum(len(e[1]) for e in got if e[0] == TRIMQ)
    db = sum(len(e[1]) for e in got if e[0] == DATA)
    assert tb / (tb + db) == pytest.approx(share / 100, abs=0.01)


def test_the_trimmed_class_runs_before_data_and_alone_takes_the_link():
    pq = PortQueues(Queuing(), MTU, trim=Trim())
    fill(pq, DATA, 3, 4098)
    fill(pq, TRIMQ, 2, 106)
    assert [e[0] for e in drain(pq)] == [TRIMQ, TRIMQ, DATA, DATA, DATA]
    fill(pq, TRIMQ, 500, 106)   # no data: every header at once, owing at most one MTU
    assert [e[0] for e in drain(pq)] == [TRIMQ] * 500
    assert pq.trim_debt <= pq.trim_burst + 106 * 75


def test_a_control_frame_is_never_delayed_by_trimmed_headers():
    pq = PortQueues(Queuing(), MTU, trim=Trim())
    fill(pq, TRIMQ, 50, 106)
    fill(pq, DATA, 50, 4098)
    for i in range(40):
        pq.enqueue(CTRL, bytes(64))
        assert pq.dequeue()[0] == CTRL   # the next frame out, whatever waits
        drain(pq, i % 3)


def test_a_strict_trim_queue_keeps_the_old_strict_uncapped_service():
    pq = PortQueues(Queuing(), MTU, trim=Trim(queue=CTRL))
    assert pq.trim_q == -1
    fill(pq, DATA, 2, 4098)
    fill(pq, CTRL, 100, 106)
    assert [e[0] for e in drain(pq)] == [CTRL] * 100 + [DATA] * 2


def test_share_is_validated_and_round_trips():
    with pytest.raises(ValueError, match="share"):
        Trim(share=0)
    t = Trim(share=40)
    assert Trim.from_dict(t.to_dict()) == t and "40 %" in t.describe()
