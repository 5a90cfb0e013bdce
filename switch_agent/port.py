"""Run-time state of one switch port: egress queues, shaper, delay line, PFC, watchdog,
LLDP neighbour, counters (book ch.11; docs/ARCHITECTURE.md "Switch agent pipeline").

Per port, the pure stages are assembled here: `queues.PortQueues` (8 queues, WRED-ECN,
strict + DWRR), `shaper.Shaper` (link rate / TDF), `pfc.IngressPfc` (this port as an
*ingress*: buffer accounting, xOFF/xON, pause refresh), `pfc.EgressPause` (pauses the
peer sent us: which of our egress priorities are stopped), `watchdog.PfcWatchdog`.
Each stage runs on its part of one `emucore.qos.qosconfig.QosConfig`. With QoS off (plain
forwarding) there is one FIFO (`Queuing.plain`), no PFC, no LLDP.
"""

from __future__ import annotations

import collections
import random
import socket
import struct

from emucore.qos.qosconfig import QosConfig
from emucore.qos.fields import QUEUE_LIMIT_BYTES
from emucore.qos.pfc import EgressPause, IngressPfc, Pfc
from emucore.qos.queuing import Queuing
from emucore.timedil import TimeDilation
from switch_agent.agentconfig import PortConfig
from emucore.wire.ether import mac_bytes
from emucore.qos.cbfc import CreditState
from switch_agent.queues import PortQueues
from switch_agent.shaper import Shaper
from switch_agent.watchdog import PfcWatchdog

#: getsockopt(SOL_PACKET, PACKET_STATISTICS) (linux/if_packet.h): struct tpacket_stats
SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS = 263, 6, struct.Struct("II")
#: the drop reason of frames the kernel found no room for on a port's socket
RX_RING_FULL = "rx_ring_full"


def packet_stats(sock) -> tuple[int, int]:
    """(tp_packets, tp_drops) of an AF_PACKET socket since the last call (reading resets
    them; packet(7)): frames that reached the socket, dropped ones included, and those the
    kernel dropped because the socket had no room - its PACKET_MMAP RX ring full (the C
    agent's, switch_agent/fast/ring.h) or, without a ring, its receive buffer full (the
    Python agent's). (0, 0) for a socket that keeps no such statistics (a test's)."""
    try:
        return TPACKET_STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS,
                                                    TPACKET_STATS.size))
    except (OSError, AttributeError):
        return 0, 0


class Impair:
    """Random loss and corruption of a degraded link's data frames (pure)."""

    __slots__ = ("loss", "corrupt", "random")

    def __init__(self, loss: float, corrupt: float, rng: random.Random) -> None:
        self.loss = loss
        self.corrupt = corrupt
        self.random = rng.random

    def verdict(self) -> str | None:
        """None: delivered; else the drop reason ("degrade_loss", "degrade_corrupt")."""
        r = self.random()
        if r < self.loss:
            return "degrade_loss"
        if r < self.loss + self.corrupt:
            return "degrade_corrupt"
        return None


class Port:
    """One switch port (the agent holds one per interface)."""

    __slots__ = ("name", "cfg", "sock", "fd", "mac", "vlan", "shaper", "queues", "delay",
                 "inflight", "ctrl", "rx_packets", "rx_bytes", "tx_packets", "tx_bytes",
                 "drops", "ingress", "pause", "watchdog", "pfc_mode", "pfc_active",
                 "neighbor", "neighbor_seen", "lldp_rx", "lldp_tx", "pause_tx", "resume_tx",
                 "pfc_rx_frames", "eligible_at", "tx_what", "ctrl_what", "refresh_what",
                 "paused_logged", "dre", "impair", "link_up", "trimmed", "trimmed_bytes",
                 "llr", "llr_replays", "llr_exhausted", "llr_streak", "cbfc", "cbfc_early")

    def __init__(self, cfg: PortConfig, sock: socket.socket | None, mtu: int,
                 td: TimeDilation, qos: QosConfig | None = None,
                 queue_limit_bytes: int = QUEUE_LIMIT_BYTES, seed: int = 1) -> None:
        self.name = cfg.ifname
        self.cfg = cfg
        self.sock = sock
        self.fd = sock.fileno() if sock else -1
        self.mac = mac_bytes(cfg.mac)
        self.vlan = cfg.vlan
        self.shaper = Shaper(cfg.lab_bps, mtu=mtu)
        rng = random.Random(f"{seed}:{cfg.ifname}").random
        if qos is not None:
            self.queues = PortQueues(qos.queuing, qos.mtu, rng, trim=qos.trim)
        else:
            self.queues = PortQueues(Queuing.plain(queue_limit_bytes), mtu, rng)
        self.delay = cfg.delay_lab_s
        #: the delay line: (release time, frame, model-schedule release time) - the last
        #: is earlier than the first when the frame was booked late (the fidelity guard)
        self.inflight: collections.deque[tuple[float, bytes, float]] = collections.deque()
        self.ctrl: collections.deque[tuple[float, bytes, float]] = collections.deque()
        #: lab time since which the head of the queues could have been sent (pause
        #: expiry while every backlogged queue is paused): the ideal start of a late booking
        self.eligible_at = 0.0
        self.dre = None  # load estimate for flowlet routing (switch_agent.balancer.Dre)
        #: a degraded link's loss / corruption on this egress (`degrade`); None = healthy
        self.impair: Impair | None = None
        self.link_up = True  # the kernel's carrier (Agent.link_states)
        self.tx_what = f"{cfg.ifname} tx"  # LagMeter labels, built once
        self.ctrl_what = f"{cfg.ifname} ctrl"
        self.refresh_what = f"{cfg.ifname} pfc refresh"
        self.rx_packets = self.rx_bytes = self.tx_packets = self.tx_bytes = 0
        self.drops: dict[str, int] = {}
        self.trimmed = self.trimmed_bytes = 0  # UET frames cut on their way out (trimming)
        #: link-level retry (emucore.qos.llr, modelled): on when both partners advertise it
        self.llr = False
        self.llr_replays = self.llr_exhausted = self.llr_streak = 0
        #: credit-based flow control (emucore.qos.cbfc, modelled): on when both partners
        #: advertise it; it then replaces PFC on this link
        self.cbfc: CreditState | None = None
        self.cbfc_early = [0] * 8  # credits the partner granted before we turned CBFC on
        model = cfg.model_bps
        self.pause = EgressPause(model, td)
        if qos is not None:
            self.ingress = IngressPfc(qos.port_pfc(cfg.ifname), self.mac, model, td)
            self.watchdog = (PfcWatchdog(qos.watchdog, qos.pfc.no_drop, td, cfg.ifname)
                             if qos.watchdog_on(cfg.ifname) else None)
            self.pfc_mode = qos.port(cfg.ifname).pfc_mode
        else:
            self.ingress = IngressPfc(Pfc(no_drop=frozenset()), self.mac, model, td)
            self.watchdog = None
            self.pfc_mode = "off"
        # operational lossless priorities: mode on = configured; auto = after LLDP/DCBX
        self.pfc_active: frozenset[int] = frozenset(
            p for p in range(8) if self.ingress.enabled[p]) if self.pfc_mode == "on" else frozenset()
        self.set_pfc_active(self.pfc_active)
        self.neighbor = None
        self.neighbor_seen = 0.0
        self.lldp_rx = self.lldp_tx = 0
        self.pause_tx = [0] * 8
        self.resume_tx = [0] * 8
        self.pfc_rx_frames = 0
        #: priorities the event log last showed paused (pause_start .. pause_end)
        self.paused_logged = 0

    def set_pfc_active(self, prios: frozenset[int]) -> None:
        """Enable PFC accounting for these priorities (subset of the configured no-drop)."""
        configured = set(self.ingress.cfg.no_drop)
        self.pfc_active = frozenset(p for p in prios if p in configured)
        for p in range(8):
            self.ingress.enabled[p] = p in self.pfc_active

    def drop(self, reason: str) -> None:
        """Count a frame dropped at this port (not in a queue)."""
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def rx_overflow(self) -> int:
        """The frames the kernel dropped on arrival since the last call, for want of room
        on this port's socket (`packet_stats`), counted as drops `rx_ring_full`: the
        kernel gives a count, not the frames, so no queue and no time of their own."""
        n = packet_stats(self.sock)[1] if self.sock is not None else 0
        if n:
            self.drops[RX_RING_FULL] = self.drops.get(RX_RING_FULL, 0) + n
        return n

    def degrade(self, lab_bps: float | None, loss: float, corrupt: float, extra_delay_lab_s: float,
                seed: int = 1) -> None:
        """A degraded link (issue 14 `link ... degrade`): this egress runs at `lab_bps`
        (None: its nominal rate), loses a fraction `loss` of its data frames on the wire,
        corrupts a fraction `corrupt` (the receiver's MAC discards a frame whose FCS fails,
        so a corrupted frame is counted here and never delivered) and adds a one-way delay.
        `restore` undoes it."""
        self.shaper.rate_Bps = (lab_bps if lab_bps is not None else self.cfg.lab_bps) / 8.0
        self.delay = self.cfg.delay_lab_s + extra_delay_lab_s
        self.impair = Impair(loss, corrupt, random.Random(f"{seed}:{self.name}:impair"))\
            if loss or corrupt else None

    def replay(self, frame: bytes, model_due: float, now: float, delay: float) -> None:
        """LLR (modelled): the frame the link just lost goes out again `delay` lab seconds
        from now, first, and every frame behind it moves back as much (order kept)."""
        self.llr_replays += 1
        self.llr_streak += 1
        line = self.inflight
        for i, (d, f, m) in enumerate(line):
            line[i] = (d + delay, f, m + delay)
        line.appendleft((now + delay, frame, max(model_due, now) + delay))
        self.shaper.free_at = max(self.shaper.free_at, now) + delay  # the link replays

    def restore(self) -> None:
        """Back to the link's nominal rate and delay, no loss."""
        self.shaper.rate_Bps = self.cfg.lab_bps / 8.0
        self.delay = self.cfg.delay_lab_s
        self.impair = None

    def send_ctrl(self, frame: bytes, now: float) -> None:
        """Queue a MAC control frame (PFC, LLDP): it bypasses the data queues and the
        shaper and reaches the peer after the propagation delay."""
        due = now + self.delay
        self.ctrl.append((due, frame, due))

    def paused_mask(self, now: float) -> int:
        """Priorities this port must not transmit now (pauses received, watchdog)."""
        m = self.pause.paused_mask(now)
        if self.watchdog is not None:
            m = self.watchdog.effective_mask(m)
        if self.cbfc is not None:
            m |= self.cbfc.blocked  # channels out of credits
        return m

    # -- reporting -------------------------------------------------------------------
    def counters(self, now: float) -> dict:
        """Counters snapshot (the metrics contract: rx/tx, drops, queues, pfc)."""
        qc = self.queues.counters()
        ep = self.pause.counters(now)
        mask = ep["paused_mask"]
        queue_drops = {}
        for q in qc:
            for reason, n in q["drops"].items():
                queue_drops[reason] = queue_drops.get(reason, 0) + n
        drops = dict(self.drops)
        for reason, n in queue_drops.items():
            drops[reason] = drops.get(reason, 0) + n
        return {"rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes,
                "tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
                "drops": drops, "rx_ring_drops": self.drops.get(RX_RING_FULL, 0),
                "trimmed": self.trimmed, "trimmed_bytes": self.trimmed_bytes,
                # model µs of wire time the shaper could not make up (Shaper.lost_s); an
                # unshaped port has no wire time to lose
                "lost_service_us": (round(self.pause.td.model_time(self.shaper.lost_s) * 1e6, 3)
                                    if self.shaper.burst_s > 0 else 0.0),
                "llr": {"active": self.llr, "replays": self.llr_replays,
                        "exhausted": self.llr_exhausted},
                "cbfc": self.cbfc.counters() if self.cbfc is not None else None,
                "queue_bytes": self.queues.bytes,
                "max_queue_bytes": max(q["max_depth_bytes"] for q in qc),
                "model_bps": self.cfg.model_bps, "lab_bps": self.cfg.lab_bps,
                "peer": self.cfg.peer,
                "queues": {str(q["queue"]): {**q, "ecn_marks": q["ecn_marked"],
                                              "tx_bytes": q["dequeued_bytes"]} for q in qc},
                "wred_bins": self.queues.wred_bins(),
                "pfc": {"mode": self.pfc_mode, "active": sorted(self.pfc_active),
                        "lldp_rx": self.lldp_rx,  # > 0: DCBX has the neighbour's PFC TLV
                        "pause_tx": list(self.pause_tx), "resume_tx": list(self.resume_tx),
                        "pause_rx": ep["pauses_rx"], "resume_rx": ep["resumes_rx"],
                        "paused": [bool(mask >> p & 1) for p in range(8)],
                        "paused_model_s": ep["paused_model_s"],
                        "ingress": self.ingress.counters(),
                        "watchdog": self.watchdog.counters() if self.watchdog else None}}

    def brief(self, now: float) -> dict:
        """What the metrics sampler reads between two full `counters` (the same values,
        fewer of them: emu.observe.metrics.switch_rows): rx/tx bytes, drops, the queues
        that ever held a frame (depth, CE marks, frames enqueued, drops), PFC's pauses."""
        q, pause = self.queues, self.pause
        drops = dict(self.drops)
        queues = {}
        for i, n in enumerate(q.enq_packets):
            if n or q.qbytes[i] or q.drops[i]:
                queues[str(i)] = {"depth_bytes": q.qbytes[i], "ecn_marks": q.marks[i],
                                  "enqueued": n, "drops": dict(q.drops[i])}
                for reason, k in q.drops[i].items():
                    drops[reason] = drops.get(reason, 0) + k
        mask = pause.paused_mask(now)
        return {"rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes, "drops": drops,
                "queues": queues, "pfc": {"pause_tx": list(self.pause_tx),
                                          "pause_rx": list(pause.pauses_rx),
                                          "paused": [bool(mask >> p & 1) for p in range(8)]}}

    def show_state(self, now: float) -> dict:
        """This port's part of the `switch_agent.show` state dict."""
        qc = self.queues.counters()
        ing = self.ingress.counters()
        ep = self.pause.counters(now)
        wd = self.watchdog.counters() if self.watchdog else None
        wd_state = "off" if wd is None else ("storm" if wd["stormed"] else
                                             "restored" if any(wd["storms_restored"]) else "ok")
        return {
            "queues": {str(q["queue"]): {
                "depth_bytes": q["depth_bytes"], "max_depth_bytes": q["max_depth_bytes"],
                "enq_pkts": q["enqueued"], "enq_bytes": q["enqueued_bytes"],
                "tx_pkts": q["dequeued"], "tx_bytes": q["dequeued_bytes"],
                "ecn_marked": q["ecn_marked"], "drops": q["drops"]} for q in qc},
            "ingress": {str(p): {"bytes": ing["held_bytes"][p], "xoff": p in ing["paused"]}
                        for p in range(8) if self.ingress.enabled[p] or ing["held_bytes"][p]},
            "pfc": {"mode": self.pfc_mode, "active": sorted(self.pfc_active),
                    "paused": [p for p in range(8) if ep["paused_mask"] >> p & 1],
                    "rx_pause": {str(p): ep["pauses_rx"][p] for p in range(8)},
                    "tx_pause": {str(p): self.pause_tx[p] for p in range(8)},
                    "watchdog": {"enabled": wd is not None, "state": wd_state,
                                 "storms": sum(wd["storms_detected"]) if wd else 0,
                                 "dropped": sum(wd["dropped"]) if wd else 0}},
        }
