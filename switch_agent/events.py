"""What a switch port's stages noted, written to the agent's event log (docs/EVENTS.md,
"Switch agents"; `emucore.eventlog.EventLog`).

The pure stages only note, in lists that exist while the log is open: the egress queues
(`switch_agent.queues.PortQueues.events`: WRED threshold crossings, the first CE mark,
drops) and the received pauses (`emucore.qos.pfc.EgressPause.expired`: pauses that ran
out, found lazily). The agent hands them here when a list is not empty: while nothing
happens a frame costs one truth test here and one integer comparison in the queues.

Pauses are logged as the scheduler obeys them (book ch.11 Step 4): a priority is paused
while a received pause holds it and the PFC watchdog does not ignore it (action
``forward``). `Port.paused_logged` is what the log last showed; `pause_events` writes the
difference. An expiry is stamped with the moment the pause ran out, not the (later)
moment it was noticed.
"""

from __future__ import annotations

from collections.abc import Sequence

from emucore.eventlog import EventLog, model_us
from switch_agent.port import Port


def queue_events(log: EventLog, port: Port, now: float) -> None:
    """Write and forget what `port`'s egress queues noted (at lab time `now`)."""
    evs = port.queues.events
    for ev, fields in evs:
        log.emit(ev, now, port=port.name, **fields)
    evs.clear()


def pfc_rx_events(log: EventLog, port: Port, class_enable: int, quanta: Sequence[int],
                  now: float) -> None:
    """One pfc_rx per priority of a received PFC frame's class-enable vector."""
    for prio in range(8):
        if class_enable >> prio & 1:
            log.emit("pfc_rx", now, port=port.name, prio=prio, quanta=quanta[prio])


def pause_events(log: EventLog, port: Port, now: float) -> None:
    """Bring the log's view of `port`'s paused egress priorities up to date at `now`:
    pause_end for expiries (at their expiry time), resumes and pauses the watchdog now
    ignores; pause_start for priorities that became paused."""
    pause = port.pause
    mask = pause.paused_mask(now)  # notes the expiries up to now
    logged = port.paused_logged
    for prio, t in pause.expired:
        bit = 1 << prio
        if logged & bit:
            log.emit("pause_end", t, port=port.name, prio=prio, how="expiry")
            logged &= ~bit
    pause.expired.clear()
    ignored = port.watchdog.ignore_mask if port.watchdog is not None else 0
    mask &= ~ignored
    if mask != logged:
        for prio in range(8):
            bit = 1 << prio
            if mask & bit and not logged & bit:
                log.emit("pause_start", now, port=port.name, prio=prio,
                         until=model_us(pause.until[prio], log.td))
            elif logged & bit and not mask & bit:
                log.emit("pause_end", now, port=port.name, prio=prio,
                         how="watchdog" if ignored & bit else "resume")
    port.paused_logged = mask
