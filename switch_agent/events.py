"""Where a switch's stages report what happened: `EventSink`, one object with a method per
event of docs/EVENTS.md ("Switch agents"), writing to the agent's event log
(`emucore.eventlog.EventLog`), and the recent events `show` lists.

The agent builds one sink and hands it to its stages, as htsim hands its queues a logger:
the pipeline calls `sink.xoff(...)`, never the log. A method writes nothing while the log
is closed (a run without a run directory); where computing the fields would cost the hot
path, the caller asks `enabled` first.

The pure stages only note, in lists that exist while the log is open: the egress queues
(`switch_agent.queues.PortQueues.events`: WRED threshold crossings, the first CE mark,
drops) and the received pauses (`emucore.qos.pfc.EgressPause.expired`: pauses that ran
out, found lazily). The agent hands them here when a list is not empty (`queues`,
`pauses`): while nothing happens a frame costs one truth test and one integer comparison.

Pauses are logged as the scheduler obeys them (book ch.11 Step 4): a priority is paused
while a received pause holds it and the PFC watchdog does not ignore it (action
``forward``). `Port.paused_logged` is what the log last showed; `pauses` writes the
difference. An expiry is stamped with the moment the pause ran out, not the (later)
moment it was noticed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from emucore.eventlog import EventLog, model_us
from switch_agent.port import Port

log = logging.getLogger("switch_agent")

RECENT = 100  #: events `show` and the counters keep (newest last)


class EventSink:
    """The events of one switch agent: `log` (docs/EVENTS.md), `recent` (text, for `show`)."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.emit = log.emit
        self.recent: list[str] = []  # configuration / watchdog / LLDP events, newest last

    @property
    def enabled(self) -> bool:
        """Whether events are written (callers may skip computing their fields)."""
        return self.log.f is not None

    def note(self, text: str) -> None:
        """A configuration, link, watchdog or LLDP event: logged and kept for `show`."""
        log.warning("%s: %s", self.log.node, text)
        self.recent.append(text)
        del self.recent[:-RECENT]

    # -- the egress queues and received pauses (noted by the pure stages) ---------------
    def queues(self, port: Port, now: float) -> None:
        """Write and forget what `port`'s egress queues noted (at lab time `now`)."""
        evs = port.queues.events
        for ev, fields in evs:
            self.emit(ev, now, port=port.name, **fields)
        evs.clear()

    def pfc_rx(self, port: Port, class_enable: int, quanta: Sequence[int], now: float) -> None:
        """One pfc_rx per priority of a received PFC frame's class-enable vector."""
        for prio in range(8):
            if class_enable >> prio & 1:
                self.emit("pfc_rx", now, port=port.name, prio=prio, quanta=quanta[prio])

    def pauses(self, port: Port, now: float) -> None:
        """Bring the log's view of `port`'s paused egress priorities up to date at `now`:
        pause_end for expiries (at their expiry time), resumes and pauses the watchdog now
        ignores; pause_start for priorities that became paused."""
        pause = port.pause
        mask = pause.paused_mask(now)  # notes the expiries up to now
        logged = port.paused_logged
        for prio, t in pause.expired:
            bit = 1 << prio
            if logged & bit:
                self.emit("pause_end", t, port=port.name, prio=prio, how="expiry")
                logged &= ~bit
        pause.expired.clear()
        ignored = port.watchdog.ignore_mask if port.watchdog is not None else 0
        mask &= ~ignored
        if mask != logged:
            for prio in range(8):
                bit = 1 << prio
                if mask & bit and not logged & bit:
                    self.emit("pause_start", now, port=port.name, prio=prio,
                              until=model_us(pause.until[prio], self.log.td))
                elif logged & bit and not mask & bit:
                    self.emit("pause_end", now, port=port.name, prio=prio,
                              how="watchdog" if ignored & bit else "resume")
        port.paused_logged = mask

    # -- PFC and CBFC ----------------------------------------------------------------
    def xoff(self, port: Port, prio: int, held: int, quanta: int, now: float) -> None:
        """(port, prio) reached xOFF: the count and the pause sent upstream."""
        self.emit("xoff", now, port=port.name, prio=prio, bytes=held)
        self.emit("pfc_tx", now, port=port.name, prio=prio, quanta=quanta, refresh=False)

    def xon(self, port: Port, prio: int, held: int, now: float) -> None:
        """(port, prio) fell below xON: the count and the resume (quanta 0) sent."""
        self.emit("xon", now, port=port.name, prio=prio, bytes=held)
        self.emit("pfc_tx", now, port=port.name, prio=prio, quanta=0, refresh=False)

    def pfc_refresh(self, port: Port, prio: int, quanta: int, now: float) -> None:
        """A pause re-sent while (port, prio) is still above xON."""
        self.emit("pfc_tx", now, port=port.name, prio=prio, quanta=quanta, refresh=True)

    def pfc_oper(self, port: Port, on: bool, now: float) -> None:
        """DCBX turned PFC on or off on `port`."""
        self.emit("pfc_oper", now, port=port.name, on=on)

    def watchdog(self, port: Port, storm: bool, prio: int, action: str, now: float) -> None:
        """The PFC watchdog declared a storm (`storm`) or restored a priority."""
        self.emit("wd_storm" if storm else "wd_restore", now, port=port.name, prio=prio,
                  action=action)

    def cbfc_block(self, port: Port, prio: int, credits: int, now: float) -> None:
        """A CBFC channel ran out of credits and stops."""
        self.emit("cbfc_block", now, port=port.name, prio=prio, credits=credits)

    def cbfc_resume(self, port: Port, prio: int, credits: int, now: float) -> None:
        """A CBFC channel got credits back and may send again."""
        self.emit("cbfc_resume", now, port=port.name, prio=prio, credits=credits)

    # -- frames ------------------------------------------------------------------------
    def drop(self, port: Port, queue: int, reason: str, now: float) -> None:
        """A frame dropped on its way into `queue` of `port` (headroom, test hook)."""
        self.emit("drop", now, port=port.name, queue=queue, reason=reason)

    def wire_drop(self, port: Port, reason: str, queue: int, now: float) -> None:
        """A frame of `queue` lost leaving `port` (a degraded link, a send error)."""
        self.emit("drop", now, port=port.name, reason=reason, queue=queue)

    def rx_ring_full(self, port: Port, count: int, now: float) -> None:
        """`count` frames the kernel dropped arriving at `port` (no room on its socket,
        `Port.rx_overflow`) since the last reading, now: before any queue was chosen."""
        self.emit("drop", now, port=port.name, reason="rx_ring_full", queue=None, count=count)

    def cnp_fwd(self, port: Port, queue: int, sojourn_us: float, now: float) -> None:
        """A CNP left `port` after `sojourn_us` model µs in `queue`."""
        self.emit("cnp_fwd", now, port=port.name, queue=queue, sojourn=round(sojourn_us, 3))

    def trim(self, port: Port, cut: bytes, depth: int, now: float) -> None:
        """The `port.trimmed`-th UET frame was cut to `cut` with `depth` bytes queued."""
        self.emit("trim", now, port=port.name, n=port.trimmed, dscp=cut[15] >> 2,
                  depth=depth, last_hop=port.cfg.edge)

    def llr_replay(self, port: Port, why: str, now: float) -> None:
        """LLR replays the `port.llr_replays`-th frame the link lost (`why`)."""
        self.emit("llr_replay", now, port=port.name, n=port.llr_replays, why=why)

    # -- load balancing ----------------------------------------------------------------
    def path(self, flow: str, port: str, now: float) -> None:
        """ECMP chose `port` for a new flow with several equal-cost next hops."""
        self.emit("path", now, flow=flow, port=port, mode="ecmp")

    def flowlet(self, flow: str, port: str, prev: str, load: float, now: float) -> None:
        """A flow started a flowlet (flowlet mode): its port, the previous flowlet's
        ("" for the first) and the chosen port's load against the threshold (> 1: over;
        balancer.FlowLb.pick)."""
        self.emit("flowlet", now, flow=flow, port=port, prev=prev, load=round(load, 3))

    def spray(self, flow: str, port: str, n: int, now: float) -> None:
        """A sampled packet of a sprayed flow: the n-th took this port (spray mode)."""
        self.emit("spray", now, flow=flow, port=port, n=n)

    # -- control plane -----------------------------------------------------------------
    def fib(self, changed: dict[str, list[str]], now: float) -> None:
        """New routes installed: {prefix: egress ports} of the prefixes that changed."""
        self.emit("fib", now, changed=changed)

    def link(self, port: str, up: bool, dropped: int, now: float) -> None:
        """The kernel reported `port`'s carrier change; `dropped` frames lost on down."""
        self.emit("link", now, port=port, state="up" if up else "down", dropped=dropped)

    def switch_admin(self, up: bool, dropped: int, now: float) -> None:
        """The switch was taken down or brought up."""
        self.emit("switch_admin", now, up=up, dropped=dropped)
