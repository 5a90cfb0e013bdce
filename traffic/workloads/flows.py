"""A list of RDMA WRITE flows with start times: the traffic of a lab (docs/LABS.md).

Book ch.11's experiments are flows that start at chosen times - an incast whose senders
start together (Figure 11-3), a victim flow that starts first and shares a path with it
(L2656-2661), a low-priority DSCP 0 flow beside RoCE (Figure 11-4 step 4). A `Flow` is
src, dst, size, start (model seconds), QPs (the size is split among them), write-only,
message size and the gap between messages (model seconds: a message is posted when the
previous one completed plus the gap, so flowlets exist), DSCP and ECN of its data.

`run` connects every QP first (the CM exchange, ch.9 Fig 9-4, takes lab seconds), then
posts each flow's messages at t0 + lab_time(start) from one thread per QP, waits for
every completion, checks the target memory byte for byte and returns per flow its
status, start/finish in model microseconds after t0, goodput and counters. `flow_start`
and `flow_done` go to the event log (emucore.eventlog) of node "lab".
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from emucore.eventlog import EventLog, model_us
from emucore.timedil import TimeDilation
from traffic.nic.client import CM_PORT, MemoryRegion, NicClient, RemoteBuffer
from traffic.workreq import WCStatus

LEAD_S = 0.3  #: lab seconds between the last connect and t0 (the threads get ready)


@dataclass(frozen=True)
class Flow:
    """One flow of a lab (validated by emu.lab.schema)."""

    name: str
    src: str
    dst: str
    size: int
    start_s: float = 0.0  # model seconds after t0
    qps: int = 1
    write_only: bool = False
    message: int | None = None  # bytes per message (None: the QP's whole share at once)
    gap_s: float = 0.0  # model seconds between a completion and the next message
    dscp: int | None = None  # None: the NIC's RoCE default (24)
    ecn: int | None = None  # None: the NIC's default (ECT(0))
    #: (sender, receiver) QPNs pinned instead of random (one QP): they fix the flow's UDP
    #: source port, udp_sport(sender, receiver), and so its ECMP path (emu.lab.flowkeys)
    qpns: tuple[int, int] | None = None

    def shares(self) -> list[int]:
        """Bytes per QP: the size split as evenly as possible."""
        base, extra = divmod(self.size, self.qps)
        return [base + (1 if i < extra else 0) for i in range(self.qps)]


@dataclass
class _Conn:
    flow: Flow
    index: int
    nbytes: int
    snic: NicClient
    rnic: NicClient
    sqp: int
    rqp: int
    scq: int
    smr: MemoryRegion
    rmr: MemoryRegion
    remote: RemoteBuffer | None = None
    status: str = "NOT_STARTED"
    t_start: float | None = None
    t_done: float | None = None
    messages: int = 0


def _qp(nic: NicClient, pd: int, cq: int, f: Flow, side: int) -> int:
    """The flow's QP on one side (0 sender, 1 receiver)."""
    kw = {k: v for k, v in (("dscp", f.dscp), ("ecn", f.ecn),
                            ("qpn", f.qpns[side] if f.qpns else None)) if v is not None}
    return nic.create_qp(pd, cq, write_only=f.write_only, **kw)


def connect(fabric: Any, sockets: dict[str, str], flows: list[Flow]) -> list[_Conn]:
    """Registered memory, QPs and a CM connection per (flow, QP); random source data."""
    conns: list[_Conn] = []
    port = CM_PORT + 1
    try:
        for f in flows:
            for i, n in enumerate(f.shares()):
                rnic, snic = NicClient(sockets[f.dst]), NicClient(sockets[f.src])
                rpd, spd = rnic.alloc_pd(), snic.alloc_pd()
                rmr, smr = rnic.reg_mr(rpd, max(n, 1)), snic.reg_mr(spd, max(n, 1))
                smr.buf[:] = os.urandom(len(smr.buf))
                rcq, scq = rnic.create_cq(), snic.create_cq()
                c = _Conn(f, i, n, snic, rnic, _qp(snic, spd, scq, f, 0),
                          _qp(rnic, rpd, rcq, f, 1), scq, smr, rmr)
                conns.append(c)
                rnic.listen(c.rqp, port, rmr)
                c.remote = snic.connect(c.sqp, fabric.gpus[f.dst].ip, port, smr)
                port += 1
    except BaseException:
        close(conns)
        raise
    return conns


def _messages(c: _Conn) -> list[tuple[int, int]]:
    m = c.flow.message or c.nbytes or 1
    return [(off, min(m, c.nbytes - off)) for off in range(0, max(c.nbytes, 1), m)]


def _drive(c: _Conn, t_post: float, td: TimeDilation, deadline: float) -> None:
    """Post the QP's messages at `t_post`: all at once without a gap, else each one a
    gap after the previous one completed; wait for every completion."""
    time.sleep(max(0.0, t_post - time.monotonic()))
    c.t_start = time.monotonic()
    msgs = _messages(c)
    gap = td.lab_time(c.flow.gap_s)
    groups = [msgs] if gap <= 0 else [[m] for m in msgs]
    try:
        for k, group in enumerate(groups):
            if k:
                time.sleep(gap)
            for off, n in group:
                c.messages += 1
                c.snic.post_write(c.sqp, c.messages, c.smr, off, n, c.remote, remote_offset=off)
            for wc in c.snic.wait(c.scq, len(group), max(1.0, deadline - time.monotonic())):
                if wc.status is not WCStatus.SUCCESS:
                    c.status = wc.status.value
                    return
        c.status = "SUCCESS"
    except Exception as exc:  # a timeout or a NIC gone: the flow's verdict says so
        c.status = f"ERROR: {exc}"
    finally:
        c.t_done = time.monotonic()


def run(fabric: Any, sockets: dict[str, str], flows: list[Flow], timeout: float,
        events: EventLog | None = None, on_t0=None) -> dict:
    """Connect, start every flow at its time, wait; the result per flow (model units).
    `on_t0(t0)` learns the lab time flows' start times count from (a lab's faults)."""
    td = TimeDilation(fabric.tdf)
    conns = connect(fabric, sockets, flows)
    try:
        t0 = time.monotonic() + LEAD_S
        if on_t0 is not None:
            on_t0(t0)
        deadline = t0 + timeout
        threads = [threading.Thread(target=_drive, name=f"flow-{c.flow.name}-{c.index}",
                                    args=(c, t0 + td.lab_time(c.flow.start_s), td, deadline),
                                    daemon=True) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()) + 5.0)
        out = {"t0_lab": t0, "t0_model_us": model_us(t0, td), "flows": {}}
        for f in flows:
            mine = [c for c in conns if c.flow is f]
            out["flows"][f.name] = _flow_result(f, mine, t0, td, fabric, events)
        return out
    finally:
        close(conns)


def _flow_result(f: Flow, mine: list[_Conn], t0: float, td: TimeDilation, fabric: Any,
                 events: EventLog | None) -> dict:
    starts = [c.t_start for c in mine if c.t_start is not None]
    dones = [c.t_done for c in mine if c.t_done is not None]
    status = next((c.status for c in mine if c.status != "SUCCESS"), "SUCCESS")
    exact = all(bytes(c.rmr.buf[:c.nbytes]) == bytes(c.smr.buf[:c.nbytes]) for c in mine)
    qs = [c.snic.query_qp(c.sqp) for c in mine]
    rq = [c.rnic.query_qp(c.rqp) for c in mine]
    t_s = min(starts) if starts else None
    t_d = max(dones) if dones and status == "SUCCESS" else None
    if events is not None and t_s is not None:
        events.emit("flow_start", t_s, flow=f.name, src=f.src, dst=f.dst, bytes=f.size)
        if t_d is not None:
            events.emit("flow_done", t_d, flow=f.name, status=status, bytes=f.size)
    dur = td.model_time(t_d - t_s) if t_d is not None and t_s is not None else None
    g = fabric.gpus[f.src]
    link = fabric.link_of(g.host, g.nic).model_bps
    rate = f.size * 8 / dur if dur else None  # goodput over the flow's life, model
    return {"src": f.src, "dst": f.dst, "bytes": f.size, "status": status, "byte_exact": exact,
            "start_us": round(td.model_time(t_s - t0) * 1e6, 2) if t_s is not None else None,
            "done_us": round(td.model_time(t_d - t0) * 1e6, 2) if t_d is not None else None,
            "rate_model_bps": rate, "link_bps": link,
            "link_fraction": rate / link if rate else None,
            "qps": [c.sqp for c in mine], "rx_qps": [c.rqp for c in mine],
            "retransmits": sum(q["retransmits"] for q in qs),
            "cnps_rx": sum(q["cnps_rx"] for q in qs),
            "cnps_sent_by_receiver": sum(q["cnps_sent"] for q in rq),
            "ce_rx_by_receiver": sum(q["ce_rx"] for q in rq)}


def close(conns: list[_Conn]) -> None:
    """Destroy QPs, free memory, close the control connections (best effort)."""
    for c in conns:
        for nic, qp, mr in ((c.snic, c.sqp, c.smr), (c.rnic, c.rqp, c.rmr)):
            for fn in (lambda: nic.destroy_qp(qp), lambda: nic.dereg_mr(mr)):
                try:
                    fn()
                except Exception:  # the NIC may be gone
                    pass
            mr.close()
            nic.close()
