"""LLDP/DCBX on the agent's ports: advertise our QoS, learn each neighbour, and turn PFC
on where both ends agree (`priority-flow-control mode auto`, book ch.11 Example 11-7;
IEEE 802.1AB LLDP, 802.1Qaz/Qbb DCBX TLVs in `emucore.wire.lldp`, what they say of
our QoS in `emucore.qos.dcbx`).

A new neighbour on a port we advertise on is answered at once (IEEE 802.1AB-2016
9.2.10, the transmit timer state machine: newNeighbor -> TX_FAST_START -> SIGNAL_TX, the
fast-start whose later frames come every msgFastTx = 1 s, our period anyway): at a
fabric's start the agent that came up first announced before its neighbour listened,
and the link's DCBX waited for its next period (~0.65-0.87 s of every `emu run`).

LLDPDUs never change for a port (QoS is fixed for the agent's life) and a neighbour
repeats the same bytes every period: each is built and parsed once. (Scapy takes ~3 ms
to build one and ~1 ms to parse one: every second that stalled forwarding for ~25 ms lab
and left 300-600 KB bursts in the queues.)
"""

from __future__ import annotations

import logging

from emucore.qos import dcbx
from emucore.qos.qosconfig import QosConfig
from emucore.qos.cbfc import CreditState
from emucore.wire import lldp
from emucore.wire.credit import build_credit_frame
from switch_agent.port import Port

log = logging.getLogger("switch_agent")


class Dcbx:
    """The LLDP/DCBX speaker of one switch (frames built and parsed once each)."""

    def __init__(self, system_name: str, qos: QosConfig, n_ports: int) -> None:
        self.system_name = system_name
        self.qos = qos
        self.max_neighbours = 4 * n_ports + 16  # distinct LLDPDUs remembered
        self.chassis: bytes | None = None
        #: port -> our LLDPDU: the ports we advertise on (never a `no lldp transmit` one)
        self.tx: dict[str, bytes] = {}
        self.rx: dict[bytes, lldp.Neighbor] = {}  # received LLDPDU -> what it says

    def announce(self, port: Port, now: float) -> None:
        """Queue our LLDPDU (with the DCBX TLVs of our QoS) on `port`."""
        if self.chassis is None:
            self.chassis = port.mac  # the first port's MAC names the switch
        frame = self.tx.get(port.name)
        if frame is None:
            frame = self.tx[port.name] = dcbx.build_lldp_frame(
                port.mac, self.chassis, port.name, self.system_name, self.qos)
        port.send_ctrl(frame, now)
        port.lldp_tx += 1

    def _cbfc_start(self, port: Port, now: float) -> None:
        """Turn CBFC on: nothing to send with until the partner's initial grant (one that
        came early is applied now); grant the partner our buffer less what of its frames
        we still hold - they return their credits as they leave (emucore.qos.cbfc)."""
        c, vcs = self.qos.cbfc, frozenset(self.qos.pfc.no_drop)
        buf = c.credits_bytes or self.qos.pfc.xoff_bytes
        cs = port.cbfc = CreditState(vcs, buf, c.update_bytes, self.qos.mtu, start=0)
        ing = port.ingress
        for vc in sorted(vcs):
            if port.cbfc_early[vc]:
                cs.grant(vc, port.cbfc_early[vc])
            port.send_ctrl(build_credit_frame(port.mac, vc, max(0, buf - ing.held[vc])), now)
            cs.owed[vc], ing.held[vc] = 0, 0  # held bytes now come back as credits
        port.cbfc_early = [0] * 8

    @staticmethod
    def _cbfc_stop(port: Port) -> None:
        port.cbfc = None
        port.cbfc_early = [0] * 8

    def receive(self, port: Port, frame: bytes, now: float) -> str | None:
        """Learn the neighbour on `port` from its LLDPDU and set the port's lossless
        priorities; the event text when they changed (or on a new neighbour's first
        LLDPDU, answered with ours at once where we advertise)."""
        nb = self.rx.get(frame)
        if nb is None:
            try:
                nb = lldp.parse_lldp_frame(frame)
            except ValueError as exc:
                port.drop("bad_lldp")
                log.debug("%s: bad LLDP on %s: %s", self.system_name, port.name, exc)
                return None
            if len(self.rx) >= self.max_neighbours:
                self.rx.clear()  # neighbours changed: forget the old ones
            self.rx[bytes(frame)] = nb
        port.lldp_rx += 1
        old = port.neighbor
        first = old is None or (old.chassis_id, old.port_id) != (nb.chassis_id, nb.port_id)
        port.neighbor, port.neighbor_seen = nb, now
        if first and port.name in self.tx:  # newNeighbor: fast start (802.1AB 9.2.10)
            self.announce(port, now)
        port.llr = dcbx.llr_active(self.qos, nb)
        cb = dcbx.cbfc_active(self.qos, nb)
        changed = cb != (port.cbfc is not None)
        if changed:  # CBFC replaces PFC on this link (emucore.qos.cbfc)
            self._cbfc_start(port, now) if cb else self._cbfc_stop(port)
        active = frozenset() if cb else dcbx.pfc_active(self.qos, nb, port.name)
        if active == port.pfc_active and not first and not changed:
            return None
        port.set_pfc_active(active)
        how = (f"CBFC on priorities {sorted(self.qos.pfc.no_drop)} (instead of PFC)" if cb
               else f"PFC active on priorities {sorted(active)}")
        return (f"{port.name}: LLDP neighbour {nb.system_name or nb.chassis_id} "
                f"port {nb.port_id}; {how}")
