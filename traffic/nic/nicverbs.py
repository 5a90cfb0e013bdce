"""The verbs side of the emulated RDMA NIC: its objects and the QP life cycle.

Book ch.9 (Figures 9-2 "Memory Allocation and Registration", 9-3 "Create Queue Pairs",
9-4 "RDMA Connection Initiation", 9-5 "Work Request Message"): what the worker asks of
its NIC over the control socket (traffic.nic.ctl) — protection domains, memory regions
over the worker's shared memory, completion queues, RC QPs taken INIT -> RTR -> RTS as
the CM exchange agrees, work requests posted and received. Each QP gets its transport
(traffic.rc.endpoint), its frame template towards the peer QP (emucore.framing: C or
Python, EMU_DATAPATH) and, with DCQCN on, a reaction point (traffic.dcqcn, book ch.11;
C or Python by EMU_DATAPATH: traffic.fast.dcqcn). The local ACK timeout is a model
duration, converted to lab time with emucore.timedil.

A QP's data frames carry its DSCP and ECN (default DSCP 24, ECT(0), Example 11-1) and
travel on the PFC priority of that DSCP: the NIC's `pfc_priority` for DSCP 24 (what the
run's classification maps RoCE data to), the book's classes (emucore.qos.classify)
otherwise. Its CNPs carry `NicConfig.cnp_dscp`. Start PSN and QPN are random unless the
worker pins them (the book's QPN 0x123456 and PSN 0x000abc, Figure 9-5).

The draws (issue 31), each from a generator seeded by the run's seed (`NicConfig.rng`):
QPNs, keys, MR addresses, start PSNs and the first UET PDC id from `rng`, in the order
the worker asks; the CM's communication ids from `cm_rng` (the passive side answers on
its own thread, so sharing `rng` would make the next QPN depend on when a peer called);
each UET QP's PSN, message id and entropy values (drawn per packet when spraying) from
its own generator, seeded from `rng` when the QP is made, so one QP's packets do not
move another's draws.

The NIC's events (docs/EVENTS.md, emucore.eventlog) go to `ev`: wr_post here, wr_done /
nak_rx / retransmit from the requester's `on_event`, rate from the reaction point's
`on_rate`, the rest from the data path.

`NicVerbs` is the device without a wire; `traffic.nic.datapath.Nic` adds the data path.
Callers hold the NIC lock.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from emucore.eventlog import EventLog
from emucore.fidelity import LagMeter
from emucore.qos.classify import ROCE_PRIORITY, Classifier
from emucore.timedil import TimeDilation
from emucore.wire.dscp import DSCP_ROCEV2
from emucore.wire.ib import Op
from emucore.wire.roce_codes import CNP_ECN, DATA_ECN, udp_sport
from emucore.framing import FrameTemplate
from emucore.wire.uet_codec import UetTemplate
from traffic.dcqcn import DcqcnProfile
from traffic.fast.dcqcn import NotificationPoint, ReactionPoint
from traffic.nic.client import access_from_json, attach_untracked
from traffic.nic.nicconfig import NicConfig
from traffic.rc.endpoint import RcEndpoint
from traffic.rc.rcconfig import RcConfig
from traffic.uet.endpoint import UetEndpoint
from traffic.uet.frames import frame_of as uet_frame_of
from traffic.uet.initiator import TxReq
from traffic.verbs import MIN_RNR_TIMER_S, Context, VerbsError
from traffic.workreq import WR, WROpcode

__all__ = ["CLOSED_KEPT", "CLOSED_SUMS", "NicQp", "NicVerbs"]

log = logging.getLogger("traffic.nic")

#: a QP's counters that a NIC's totals add up: when the QP is destroyed they go to the
#: NIC's ``closed_qps_<name>`` (summed since it started), so that a NIC total is exact,
#: closed_qps_<name> + the live QPs' <name>, whenever it is read
CLOSED_SUMS = ("tx_bytes", "tx_packets", "tx_frames", "tx_wire_bytes", "retransmits",
               "timeouts", "completions", "cnps_sent", "cnps_rx", "ce_rx")
#: the final counters of the last CLOSED_KEPT destroyed QPs (``closed_qps``, oldest first:
#: qpn, state, error, peer, t_lab destroyed and CLOSED_SUMS), so that a sampler reading
#: the NIC every so often gets each QP's last figures unless more than this many QPs were
#: destroyed between two readings (emu.observe.metrics.merge_qps); a bound on the reply
CLOSED_KEPT = 16


def _get(table: dict, key: int, what: str) -> Any:
    if key not in table:
        raise VerbsError(f"{what} {key:#x}")
    return table[key]


@dataclass(eq=False)
class NicQp:
    """One QP as the NIC drives it: transport, template, DCQCN, pacing, counters."""

    ep: RcEndpoint | UetEndpoint
    start_psn: int
    write_only: bool
    dscp: int = DSCP_ROCEV2       # of its data frames (and ACKs)
    ecn: int = DATA_ECN
    prio: int = ROCE_PRIORITY     # the PFC priority its data travels on
    tmpl: FrameTemplate | UetTemplate | None = None
    cnp: bytes = b""              # the CNP frame towards the peer QP (set with tmpl; RoCE)
    build: Any = None             # descriptor -> frame (set with tmpl, per transport)
    rp: ReactionPoint | None = None
    next_t: float = 0.0
    blocked: bool = False
    ready_at: float = 0.0         # lab time it last got something to send (fidelity guard)
    peer: dict | None = None      # what the peer exposed (remote_ip, remote_qpn, rkey, ...)
    expose: Any = None            # our MR offered to the peer
    tx_frames: int = 0
    tx_wire_bytes: int = 0
    ce_rx: int = 0
    cnp_tx: int = 0
    cnp_rx: int = 0
    connected: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    @property
    def qpn(self) -> int:
        """The QP number."""
        return self.ep.qp.qpn

    def snapshot(self, td: TimeDilation) -> dict:
        """Counters for the control socket."""
        rq, rs = self.ep.requester.counters, self.ep.responder.counters
        return {"state": self.ep.qp.state.value, "peer": self.peer,
                "error": self.ep.requester.error,
                "tx_bytes": rq.bytes, "tx_packets": rq.packets, "retransmits": rq.retransmitted,
                "timeouts": rq.timeouts, "acks_rx": rq.acks, "naks_rx": rq.naks,
                "completions": rq.completions, "tx_frames": self.tx_frames,
                "tx_wire_bytes": self.tx_wire_bytes, **{f"rx_{k}": v for k, v in
                                                        dataclasses.asdict(rs).items()},
                "ce_rx": self.ce_rx, "cnps_sent": self.cnp_tx, "cnps_rx": self.cnp_rx,
                "rate_model_bps": self.rp.rc if self.rp else None,
                "dcqcn": self.rp.snapshot() if self.rp else None, **self._uet(td)}

    def _uet(self, td: TimeDilation) -> dict:
        """UET: the transport's own counters, NSCC's window (times in model seconds), and
        the window as a rate (cwnd / base RTT, at most the link) in the DCQCN rate's place
        for the plots."""
        ep = self.ep
        if not isinstance(ep, UetEndpoint):
            return {}
        rq, n = ep.requester, ep.requester.nscc
        nscc = {k: td.model_time(v) if k.endswith("_s") else v for k, v in n.snapshot().items()}
        t = ep.target.counters if ep.target is not None else None
        return {"transport": "uet",
                # RC's names where UET has the same thing: an access violation at the target
                "rx_nak_access": t.drop_access if t is not None else 0,
                "rate_model_bps": td.model_rate(min(n.link_bps, n.cwnd * 8 / n.base_rtt)),
                "nscc": nscc, "pdc": {"local": rq.spdcid, "peer": rq.dpdcid,
                                              "target": ep.target.pdcid if ep.target else None},
                "uet": dataclasses.asdict(rq.counters),
                "ev": {"mode": rq.entropy.mode, "fresh": rq.entropy.fresh,
                       "recycled": rq.entropy.recycled}}


class NicVerbs:
    """The NIC's verbs objects and QPs, and the calls that create and drive them."""

    def __init__(self, cfg: NicConfig) -> None:
        """Create the device (keys, QPNs and start PSNs from a generator seeded by cfg.seed)."""
        self.cfg = cfg
        self.td = TimeDilation(cfg.tdf)
        self.rng = cfg.rng()
        self.cm_rng = cfg.rng("cm")  #: the CM's communication ids (traffic.nic.ctl)
        self.ctx = Context(self.rng)
        self.pds: dict[int, Any] = {}
        self.cqs: dict[int, Any] = {}
        self.qps: dict[int, NicQp] = {}
        self.shms: dict[int, Any] = {}  # lkey -> SharedMemory
        self.order: list[NicQp] = []    # connected QPs, in the data path's round robin
        self.profile = None if cfg.dcqcn == "off" else DcqcnProfile.by_name(cfg.dcqcn)
        self.np = NotificationPoint(self.profile) if self.profile else None
        #: what the QPs destroyed since start sent (CLOSED_SUMS) and the last ones' figures
        self.c: dict[str, Any] = {**{f"closed_qps_{k}": 0 for k in CLOSED_SUMS}, "closed_qps": []}
        self.clock = time.monotonic  # lab time (a fake clock in tests)
        #: UET: PDC id -> the QP whose endpoint owns it (initiator and target PDCs)
        self.pdcs: dict[int, NicQp] = {}
        self._next_pdc = self.rng.randrange(1, 0xFFFF)
        #: UET: the transport's knobs on the lab clock (times x TDF; the link rate / TDF below)
        self.uet_cfg = cfg.uet_config().dilated(cfg.tdf) if cfg.transport == "uet" else None
        #: the fidelity guard: how late pacer, timers and CNPs act (traffic.nic.datapath)
        self.meter = LagMeter(self.td)
        #: the event log (docs/EVENTS.md); a no-op without cfg.events_path
        self.ev = EventLog(cfg.events_path, cfg.gpu, self.td)

    def wake(self) -> None:
        """Tell the data path there is new work (a device without one has nothing to do)."""

    def alloc_pd(self) -> int:
        """ibv_alloc_pd."""
        pd = self.ctx.alloc_pd()
        self.pds[pd.handle] = pd
        return pd.handle

    def reg_mr(self, pd: int, shm: str, length: int, access: Any) -> dict:
        """ibv_reg_mr over the worker's shared memory `shm`."""
        sm = attach_untracked(shm)
        if sm.size < length:
            sm.close()
            raise VerbsError(f"length: shared memory {shm} has {sm.size} bytes, asked {length}")
        mr = self._pd(pd).reg_mr(sm.buf[:length], access_from_json(access), shm_name=shm)
        self.shms[mr.lkey] = sm
        return {"lkey": mr.lkey, "rkey": mr.rkey, "addr": mr.addr, "length": mr.length}

    def dereg_mr(self, lkey: int) -> None:
        """ibv_dereg_mr."""
        mr = self.ctx.mrs_by_lkey.get(lkey)
        if mr is None:
            raise VerbsError(f"lkey: no MR {lkey:#x}")
        self.ctx.dereg_mr(mr)
        sm = self.shms.pop(lkey)
        try:
            sm.close()
        except BufferError:
            log.warning("MR %#x: shared memory still referenced", lkey)

    def create_cq(self, depth: int = 4096) -> int:
        """ibv_create_cq; returns a handle."""
        h = len(self.cqs) + 1
        self.cqs[h] = self.ctx.create_cq(depth)
        return h

    def create_qp(self, pd: int, send_cq: int, recv_cq: int, max_send_wr: int = 1024,
                  write_only: bool = False, pkey: int = 0xFFFF, dscp: int | None = None,
                  ecn: int | None = None, start_psn: int | None = None,
                  qpn: int | None = None) -> int:
        """ibv_create_qp (RC) and modify to INIT; returns the QP number. dscp / ecn of
        its data frames (None: DSCP 24, ECT(0)); start_psn and qpn pin the random ones."""
        dscp = DSCP_ROCEV2 if dscp is None else dscp
        ecn = DATA_ECN if ecn is None else ecn
        for name, v, lo, hi in (("dscp", dscp, 0, 63), ("ecn", ecn, 0, 3),
                                ("start_psn", start_psn, 0, 0xFFFFFF),
                                ("qpn", qpn, 2, 0xFFFFFF)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)
                                  or not lo <= v <= hi):
                raise VerbsError(f"{name}: must be an integer {lo}..{hi}, got {v!r}")
        ctx = self.ctx
        if qpn is not None and qpn in ctx.qps:
            raise VerbsError(f"qpn: {qpn:#x} is in use")
        qp = self._pd(pd).create_qp(self._cq(send_cq), self._cq(recv_cq), max_send_wr)
        if qpn is not None:  # the book's identifiers (Figure 9-5) instead of random ones
            del ctx.qps[qp.qpn]
            qp.qpn = qpn
            ctx.qps[qpn] = qp
        qp.modify_to_init(pkey)
        c = self.cfg
        prio = (c.pfc_priority if dscp == DSCP_ROCEV2
                else Classifier.book().priority_of_dscp(dscp))
        if self.uet_cfg is not None:  # issue 16: the QP's writes over UET (RUD / ROD)
            own = random.Random(self.rng.getrandbits(64))  # this QP's draws, per packet too
            ep = UetEndpoint(qp, self.uet_cfg, self.alloc_pdc, self.td.lab_rate(c.model_bps), own,
                             c.job_id, c.trimmed_dscps)
        else:
            ep = RcEndpoint(qp, RcConfig(mtu=c.mtu, write_only=write_only, window=c.window,
                                         ackreq_every=c.ackreq_every,
                                         reorder_window=max(1024, c.window)))
        q = NicQp(ep, self.rng.getrandbits(24) if start_psn is None
                  else start_psn, write_only, dscp, ecn, prio)
        if self.ev.enabled:
            q.ep.requester.on_event = functools.partial(self._qp_event, qp.qpn)
        self.qps[qp.qpn] = q
        if isinstance(ep, UetEndpoint):
            for pdc in ep.pdcids:
                self.pdcs[pdc] = q
        return qp.qpn

    def alloc_pdc(self) -> int:
        """A PDC id not in use on this NIC (UET, 16 bits, never 0)."""
        for _ in range(0xFFFF):
            self._next_pdc = self._next_pdc % 0xFFFF + 1
            if self._next_pdc not in self.pdcs:
                self.pdcs[self._next_pdc] = None  # type: ignore[assignment]  # reserved
                return self._next_pdc
        raise VerbsError("pdc: all 65535 PDC ids of this NIC are in use")

    def _qp_event(self, qpn: int, name: str, now: float, **fields: Any) -> None:
        """An event of QP `qpn` at lab time `now` (the requester's on_event)."""
        self.ev.emit(name, now, qp=qpn, **fields)

    def _rate_event(self, qpn: int, t_model: float, rate: float, why: str) -> None:
        """A DCQCN rate change of QP `qpn` at model time `t_model` (on_rate)."""
        self.ev.emit("rate", self.td.lab_time(t_model), qp=qpn, rate_bps=rate, why=why)

    def destroy_qp(self, qpn: int) -> None:
        """ibv_destroy_qp."""
        q = self.qps.pop(self._qp(qpn).qpn)
        self.ctx.qps.pop(q.qpn, None)  # its number may be pinned again
        self._keep_closed(q)
        q.ep.qp.to_error()
        if q in self.order:
            self.order.remove(q)
        if isinstance(q.ep, UetEndpoint):
            for pdc in q.ep.pdcids:
                self.pdcs.pop(pdc, None)
        if self.np:
            self.np.forget(qpn)

    def _keep_closed(self, q: NicQp) -> None:
        """Add a QP being destroyed to the NIC's closed_qps sums and records (a new list,
        never one a counters reply may be holding)."""
        snap = q.snapshot(self.td)
        rec = {"qpn": q.qpn, "state": snap["state"], "error": snap["error"],
               "peer": snap["peer"], "t_lab": self.clock(), **{k: snap[k] for k in CLOSED_SUMS}}
        for k in CLOSED_SUMS:
            self.c[f"closed_qps_{k}"] += rec[k]
        self.c["closed_qps"] = (self.c["closed_qps"] + [rec])[-CLOSED_KEPT:]

    def to_rtr(self, q: NicQp, peer_qpn: int, peer_psn: int, peer_ip: str, mtu: int) -> None:
        """INIT -> RTR once the CM exchange agreed on QPNs and PSNs; the frame template
        (needed for ACKs already) and the DCQCN reaction point."""
        c, qp = self.cfg, q.ep.qp
        qp.modify_to_rtr(peer_qpn, peer_psn, min(mtu, c.mtu), peer_ip, c.ip)
        if isinstance(q.ep, UetEndpoint):  # NSCC paces it, not DCQCN; no CNPs
            t = q.tmpl = UetTemplate(c.mac, c.next_hop_mac(peer_ip), c.ip, peer_ip,
                                     dscp=q.dscp, ecn=q.ecn, ctrl_dscp=c.cnp_dscp)
            ep, rod = q.ep, self.uet_cfg.mode == "rod"
            q.build = lambda tx: uet_frame_of(
                t, ep.requester.spdcid if isinstance(tx, TxReq) else ep.target.pdcid, tx,
                ep.ack_ev, rod)
            self.order.append(q)
            return
        q.tmpl = FrameTemplate(c.mac, c.next_hop_mac(peer_ip), c.ip, peer_ip,
                               udp_sport(qp.qpn, peer_qpn), peer_qpn, pkey=qp.pkey,
                               dscp=q.dscp, ecn=q.ecn)
        q.cnp = q.tmpl.build(Op.CNP, 0, becn=True, dscp=c.cnp_dscp, ecn=CNP_ECN)
        if self.profile is not None:
            q.rp = ReactionPoint(c.model_bps, self.profile)
            if self.ev.enabled:
                q.rp.on_rate = functools.partial(self._rate_event, qp.qpn)
        self.order.append(q)

    def to_rts(self, q: NicQp) -> None:
        """RTR -> RTS: start PSN, local ACK timeout (model, converted to lab), retries."""
        q.ep.qp.modify_to_rts(q.start_psn, self.td.lab_time(self.cfg.timeout_s),
                              self.cfg.retry_cnt, rnr_delay_s=self.td.lab_time(MIN_RNR_TIMER_S))
        q.blocked = False
        q.ready_at = self.clock()
        self.wake()

    def post_send(self, qpn: int, wrs: list[dict]) -> None:
        """ibv_post_send of RDMA WRITE or SEND [with immediate] work requests (`opcode`
        "write" - the default - or "send"; `imm` makes it the with-immediate kind)."""
        q = self._qp(qpn)
        if q.blocked or q.ep.requester.idle():  # nothing to send until now
            q.ready_at = self.clock()
        for w in wrs:
            imm = w.get("imm")
            kind = w.get("opcode", "write")
            if kind not in ("write", "send"):
                raise VerbsError(f"opcode: write or send, got {kind!r}")
            send = kind == "send"
            if send and q.write_only and not isinstance(q.ep, UetEndpoint):
                raise VerbsError("opcode: a SEND carries no address and cannot be sprayed; "
                                 f"QP {qpn:#x} is write-only (WRITE ONLY packets)")
            op = ((WROpcode.SEND_WITH_IMM if send else WROpcode.WRITE_WITH_IMM) if imm is not None
                  else WROpcode.SEND if send else WROpcode.WRITE)
            wr = WR(int(w["wr_id"]), op, int(w["local_addr"]), int(w["length"]), int(w["lkey"]),
                    int(w.get("remote_addr", 0)), int(w.get("rkey", 0)),
                    bool(w.get("signaled", True)), imm)
            q.ep.qp.post_send(wr)
            self.ev.emit("wr_post", self.clock(), qp=qpn, wr_id=wr.wr_id, bytes=wr.length)
        q.blocked = False
        self.wake()

    def post_recv(self, qpn: int, wrs: list[int | dict]) -> None:
        """ibv_post_recv: a wr_id (for a WRITE with immediate), or {wr_id, addr, length,
        lkey} - the buffer a SEND lands in."""
        q = self._qp(qpn)
        for w in wrs:
            if isinstance(w, dict):
                q.ep.qp.post_recv(int(w["wr_id"]), int(w.get("addr", 0)),
                                  int(w.get("length", 0)), int(w.get("lkey", 0)))
            else:
                q.ep.qp.post_recv(int(w))

    def _pd(self, h: int) -> Any:
        return _get(self.pds, h, "pd: no protection domain")

    def _cq(self, h: int) -> Any:
        return _get(self.cqs, h, "cq: no completion queue")

    def _qp(self, qpn: int) -> NicQp:
        return _get(self.qps, qpn, "qpn: no QP")
