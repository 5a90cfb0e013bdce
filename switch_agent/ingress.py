"""The switch's buffer as its ingress ports account it: bytes held per (ingress port,
priority) under PFC - a pause sent upstream at xOFF, a resume below xON (book ch.11
Steps 2-3 and 10-14, Figs 11-4 and 11-6) - or, on a link running CBFC, the credits
returned to the partner once `update` bytes are owed (`emucore.qos.cbfc`).

The agent admits a frame itself (`emucore.qos.pfc.IngressPfc.admit`, the hot path) and
hands the pause it must send here (`xoff`). Every admitted frame is released here once it
leaves the switch or is dropped after admission: the scheduler, WRED, the test hook, the
PFC watchdog, a port that went down or a switch taken down all call `release` (one
frame) or `release_entries` (a flushed queue's `switch_agent.queues.Entry`s).
"""

from __future__ import annotations

from collections.abc import Iterable

from emucore.wire.credit import build_credit_frame
from switch_agent.events import EventSink
from switch_agent.port import Port


class IngressBuffers:
    """Ingress accounting of one switch: what is sent upstream as bytes come and go."""

    __slots__ = ("backlog", "sink")

    def __init__(self, backlog: set[Port], sink: EventSink) -> None:
        self.backlog = backlog  # the agent's ports with work (control frames to send)
        self.sink = sink

    def xoff(self, inp: Port, prio: int, now: float) -> None:
        """(inp, prio) just reached xOFF: pause the upstream sender of that priority."""
        ing = inp.ingress
        inp.send_ctrl(ing.pause_frames[prio], now)
        inp.pause_tx[prio] += 1
        self.backlog.add(inp)
        self.sink.xoff(inp, prio, ing.held[prio], ing.cfg.pause_quanta, now)

    def release(self, inp: Port, prio: int, nbytes: int, now: float) -> None:
        """A frame admitted at `inp` left the switch: free its bytes; resume below xON
        (PFC) or return the credits once `update` bytes are owed (CBFC)."""
        cb = inp.cbfc
        if cb is not None and prio in cb.vcs:
            n = cb.freed(prio, nbytes)
            if n:
                inp.send_ctrl(build_credit_frame(inp.mac, prio, n), now)
                self.backlog.add(inp)
            return
        ing = inp.ingress
        if ing.release(prio, nbytes, now):
            inp.send_ctrl(ing.resume_frames[prio], now)
            inp.resume_tx[prio] += 1
            self.backlog.add(inp)
            self.sink.xon(inp, prio, ing.held[prio], now)

    def release_entries(self, entries: Iterable[tuple], now: float) -> None:
        """Release the accounted frames of flushed queue entries."""
        for _q, frame, ingress, _queued, prio in entries:
            if ingress is not None:
                self.release(ingress, prio, len(frame), now)
