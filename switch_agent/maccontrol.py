"""The MAC control frames a switch port receives - IEEE 802.1 link-local, never forwarded:
PFC (IEEE 802.1Qbb; book ch.11 Step 4, Fig 11-4: the pause stops our egress priority),
CBFC credit updates (`emucore.wire.credit`, modelled) and LLDP/DCBX (`switch_agent.dcbx`:
the neighbour decides where PFC is active, `priority-flow-control mode auto`).

Handed what it needs by the agent (`switch_agent.agent.Agent.mac_control`): whether QoS
is on, the DCBX state, the agent's backlog of ports to serve and its event sink.
"""

from __future__ import annotations

from emucore.wire.credit import parse_credit
from emucore.wire.pause import parse_pfc
from switch_agent.dcbx import Dcbx
from switch_agent.events import EventSink
from switch_agent.port import Port

ETH_PFC = b"\x88\x08"
ETH_LLDP = b"\x88\xcc"
ETH_CBFC = b"\x88\xb5"


class MacControl:
    """The receive side of PFC, CBFC and LLDP of one switch."""

    __slots__ = ("qos_on", "dcbx", "backlog", "sink")

    def __init__(self, qos_on: bool, dcbx: Dcbx | None, backlog: set[Port],
                 sink: EventSink) -> None:
        self.qos_on = qos_on  # PFC frames are obeyed only with QoS on
        self.dcbx = dcbx
        self.backlog = backlog  # the agent's ports to serve
        self.sink = sink

    def on_frame(self, port: Port, frame: bytes, now: float) -> None:
        """One link-local frame received on `port` (never forwarded)."""
        et = frame[12:14]
        if et == ETH_PFC:
            port.pfc_rx_frames += 1
            pfc = parse_pfc(frame)
            if pfc is None:
                return
            sink = self.sink
            if sink.enabled:
                sink.pfc_rx(port, pfc[0], pfc[1], now)
            if self.qos_on:
                port.pause.on_pfc(pfc[0], pfc[1], now)
                if sink.enabled:
                    sink.pauses(port, now)
                self.backlog.add(port)  # the paused set changed: re-evaluate the scheduler
                if now < port.eligible_at:  # a resume: queued frames may leave from now
                    port.eligible_at = now
        elif et == ETH_CBFC:
            upd = parse_credit(frame)
            if upd is None:
                port.drop("bad_cbfc")
                return
            if port.cbfc is None:  # the partner agreed first: its initial grant, kept
                port.cbfc_early[upd[0]] += upd[1]
                return
            if port.cbfc.grant(*upd):  # credits back: the channel may send again
                self.backlog.add(port)
                if now < port.eligible_at:
                    port.eligible_at = now
                self.sink.cbfc_resume(port, upd[0], port.cbfc.credits[upd[0]], now)
        elif et == ETH_LLDP and self.dcbx is not None:
            was_on = bool(port.pfc_active)
            text = self.dcbx.receive(port, frame, now)
            if text:
                self.sink.note(text)
                self.backlog.add(port)  # CBFC's initial grants may be queued
                if bool(port.pfc_active) != was_on:
                    self.sink.pfc_oper(port, not was_on, now)
