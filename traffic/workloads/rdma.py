"""Lab RDMA workloads over the emulated NICs: one RDMA WRITE, and an N:1 incast.

* `write`: GPU A writes `size` bytes into GPU B's registered memory (book ch.9 Figures
  9-5/9-6, ch.12 Figures 12-1..12-3; write-only mode Figure 12-7), with immediate so both
  sides complete; checks the target memory byte for byte. With `send`, a SEND with
  immediate instead, into the buffer of a receive B posted (ch.9's two-sided verb).
* `incast`: N GPUs write into one GPU at once (book ch.11, Figure 11-3 and the t1..t8
  timeline of Figure 11-7): the receiver's rail port congests, WRED-ECN marks, the
  receiving NIC sends CNPs, the senders' DCQCN cuts their rates; samples each sender's
  rate and reports the steady-state share of the link.

The worker side is played by this process through `traffic.nic.client` (the Unix
sockets are reachable from any namespace); `sockets` maps GPU name -> NIC control socket
(`FabricNet.start_nics`). A NIC on another server (emu run --servers) registers memory
made on its server (`memory`); the data is filled there and the two ends compared by
SHA-256. Rates are reported in model bit/s (emucore.timedil).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from emucore.timedil import TimeDilation, format_rate
from traffic.nic.client import CM_PORT, MemoryRegion, NicClient
from traffic.nic.nicconfig import NicConfig
from traffic.workreq import WCStatus

IMM = 0x1234
#: GPU -> a maker of its memory blocks, for GPUs whose NIC runs on another server
#: (emu.cluster.net: `size -> RemoteShm`); the others' are shared memory here
Memory = dict[str, Callable[[int], Any]]


@dataclass
class Side:
    """One GPU's verbs objects for a workload."""

    gpu: str
    nic: NicClient
    pd: int
    cq: int
    qp: int
    mr: MemoryRegion

    def close(self) -> None:
        """Destroy the QP, deregister and free the memory, close the connection."""
        for f in (lambda: self.nic.destroy_qp(self.qp), lambda: self.nic.dereg_mr(self.mr)):
            try:
                f()
            except Exception:  # best effort: the NIC may be gone
                pass
        self.mr.close()
        self.nic.close()


def _side(gpu: str, sock: str, size: int, write_only: bool, fill: bool,
          memory: Memory | None = None) -> Side:
    nic = NicClient(sock)
    pd = nic.alloc_pd()
    block = (memory or {}).get(gpu)
    mr = nic.reg_mr(pd, size, shm=block(size) if block else None)
    if block:
        mr.owner = True  # ours to drop
    if fill:
        mr.fill_random()
    cq = nic.create_cq()
    return Side(gpu, nic, pd, cq, nic.create_qp(pd, cq, write_only=write_only), mr)


def write(fabric: Any, sockets: dict[str, str], src: str, dst: str, size: int,
          write_only: bool = False, rkey: int | None = None, port: int = CM_PORT,
          timeout: float | None = None, send: bool = False,
          memory: Memory | None = None) -> dict:
    """RDMA WRITE with immediate of `size` random bytes from GPU `src` into GPU `dst`;
    `rkey` overrides the R_Key the target exposed (to provoke a remote access error);
    `send`: a SEND with immediate into a receive buffer `dst` posted, instead;
    `memory`: where the memory of GPUs elsewhere is made (`Memory`)."""
    td = TimeDilation(fabric.tdf)
    timeout = patience(fabric, size, src) if timeout is None else timeout
    a = b = None
    try:
        b = _side(dst, sockets[dst], size, write_only, fill=False, memory=memory)
        a = _side(src, sockets[src], size, write_only, fill=True, memory=memory)
        b.nic.post_recv(b.qp, 1, b.mr if send else None, 0, size if send else 0)
        b.nic.listen(b.qp, port, b.mr)
        remote = a.nic.connect(a.qp, fabric.gpus[dst].ip, port, a.mr)
        t0 = time.monotonic()
        if send:
            a.nic.post_send_msg(a.qp, 1, a.mr, 0, size, imm=IMM)
        else:
            a.nic.post_write(a.qp, 1, a.mr, 0, size, remote, imm=IMM, rkey=rkey)
        [wc] = a.nic.wait(a.cq, 1, timeout)
        elapsed = time.monotonic() - t0
        rwc = b.nic.poll_cq(b.cq, 1, 10.0 if wc.status is WCStatus.SUCCESS else 0.5)
        exact = b.mr.digest() == a.mr.digest()
        untouched = b.mr.is_zero()
        qa, qb = a.nic.query_qp(a.qp), b.nic.query_qp(b.qp)
    finally:
        for s in (a, b):
            if s is not None:
                s.close()
    link = fabric.link_of(fabric.gpus[src].host, fabric.gpus[src].nic).model_bps
    goodput = td.model_rate(size * 8 / elapsed)
    return {"workload": "write", "op": "send" if send else "write", "src": src, "dst": dst,
            "size": size, "write_only": write_only, "status": wc.status.value, "recv_status": rwc[0].status.value if rwc else None,
            "recv_imm": rwc[0].imm if rwc else None, "byte_exact": exact,
            "target_untouched": untouched, "seconds_lab": elapsed,
            "goodput_model_bps": goodput, "link_fraction": goodput / link,
            "retransmits": qa["retransmits"], "timeouts": qa["timeouts"],
            "naks_rx": qa["naks_rx"], "cnps_rx": qa["cnps_rx"], "cnps_sent": qb["cnps_sent"],
            "rx_nak_access": qb["rx_nak_access"], "rx_out_of_order": qb["rx_out_of_order"],
            "remote": {"rkey": remote.rkey, "addr": remote.addr}}


def patience(fabric: Any, nbytes: int, via_gpu: str) -> float:
    """Lab seconds to wait for `nbytes` through GPU `via_gpu`'s link: 5 x its line-rate
    time at the fabric's TDF, plus the NIC's whole retry budget ((retry_cnt + 1) local
    ACK timeouts: a peer that never answers ends in RETRY_EXC_ERR before we give up, so
    the error names the cause), plus 60 s for connecting and a loaded machine."""
    g = fabric.gpus[via_gpu]
    link = fabric.link_of(g.host, g.nic).model_bps
    td = TimeDilation(fabric.tdf)
    retries = (NicConfig.retry_cnt + 1) * NicConfig.timeout_s
    return 5 * td.lab_time(nbytes * 8 / link) + td.lab_time(retries) + 60.0


def incast(fabric: Any, sockets: dict[str, str], to: str, froms: list[str], size: int,
           sample_s: float = 0.25, timeout: float | None = None,
           window: tuple = (0.3, 0.9), memory: Memory | None = None,
           start_model_s: float | None = None,
           on_sample: Callable[[float], None] | None = None) -> dict:
    """Every GPU of `froms` writes `size` bytes into its own buffer on GPU `to` at once;
    returns per-sender steady-state rates (model bit/s, averaged over the `window`
    fractions of the time until the first sender finished), CNPs and rate cuts. With
    `start_model_s` the window starts that many model seconds after the writes were
    posted instead (a convergence time known beforehand, e.g. from emu.bench.dcqcnsim).
    A sender without a completion after `timeout` lab seconds (default `patience` for
    all the bytes through the receiver's link) has status "TIMEOUT". `memory`: as
    `write`'s. `on_sample(t)` is called at each sample, t lab seconds after the writes
    were posted (the time base of `window_lab_s`), e.g. to read a switch's counters."""
    td = TimeDilation(fabric.tdf)
    if timeout is None:
        timeout = patience(fabric, size * len(froms), to)
    recv: list[Side] = []
    send: list[Side] = []
    samples: list[tuple[float, list[dict]]] = []
    try:
        for i, g in enumerate(froms):
            r = _side(to, sockets[to], size, False, fill=False, memory=memory)
            recv.append(r)
            r.nic.post_recv(r.qp, i + 1)
            r.nic.listen(r.qp, CM_PORT + 1 + i, r.mr)
        remotes = []
        for i, g in enumerate(froms):
            s = _side(g, sockets[g], size, False, fill=True, memory=memory)
            send.append(s)
            remotes.append(s.nic.connect(s.qp, fabric.gpus[to].ip, CM_PORT + 1 + i, s.mr))
        t0 = time.monotonic()
        for i, (s, rem) in enumerate(zip(send, remotes)):
            s.nic.post_write(s.qp, i + 1, s.mr, 0, size, rem, imm=IMM + i)
        done: dict[str, float] = {}
        status: dict[str, str] = {}
        while len(done) < len(send) and time.monotonic() - t0 < timeout:
            samples.append((time.monotonic() - t0, [s.nic.query_qp(s.qp) for s in send]))
            if on_sample is not None:
                on_sample(samples[-1][0])
            for s in send:
                if s.gpu not in done:
                    for wc in s.nic.poll_cq(s.cq, 1, 0.0):
                        done[s.gpu] = time.monotonic() - t0
                        status[s.gpu] = wc.status.value
            time.sleep(sample_s)
        for s in send:
            status.setdefault(s.gpu, "TIMEOUT")
        exact = {s.gpu: r.mr.digest() == s.mr.digest() for s, r in zip(send, recv)}
        final = [s.nic.query_qp(s.qp) for s in send]
        rq = [r.nic.query_qp(r.qp) for r in recv]
    finally:
        for s in send + recv:
            s.close()
    first = min(done.values()) if done else time.monotonic() - t0
    lo, hi = window[0] * first, window[1] * first
    if start_model_s is not None:
        lo = td.lab_time(start_model_s)
    win = [x for x in samples if lo <= x[0] <= hi]
    rates = {}
    for i, g in enumerate(froms):
        if len(win) >= 2:
            (ta, a), (tb, b) = win[0], win[-1]
            rates[g] = td.model_rate((b[i]["tx_wire_bytes"] - a[i]["tx_wire_bytes"]) * 8 / (tb - ta))
        else:
            rates[g] = None
    link = fabric.link_of(fabric.gpus[to].host, fabric.gpus[to].nic).model_bps
    return {"workload": "incast", "to": to, "from": froms, "size": size,
            "status": status, "byte_exact": exact, "seconds_lab": done,
            "window_lab_s": [lo, hi], "steady_rate_model_bps": rates, "link_model_bps": link,
            "fair_share": {g: (r / (link / len(froms)) if r else None) for g, r in rates.items()},
            "cnps_rx": {g: q["cnps_rx"] for g, q in zip(froms, final)},
            "rate_cuts": {g: (q["dcqcn"] or {}).get("cnps", 0) for g, q in zip(froms, final)},
            "retransmits": {g: q["retransmits"] for g, q in zip(froms, final)},
            "cnps_sent_by_receiver": sum(q["cnps_sent"] for q in rq),
            "ce_rx_by_receiver": sum(q["ce_rx"] for q in rq),
            "rate_samples": [(t, [q["rate_model_bps"] for q in qs],
                              [q["tx_wire_bytes"] for q in qs]) for t, qs in samples]}


def describe(res: dict) -> str:
    """Human-readable lines for `emu run --workload`."""
    if res["workload"] == "write":
        verb = "SEND" if res.get("op") == "send" else "RDMA WRITE"
        return (f"{verb} {res['src']} -> {res['dst']}: {res['size']} bytes, "
                f"{'write-only, ' if res['write_only'] else ''}status {res['status']} "
                f"(receiver {res['recv_status']}), byte-exact {res['byte_exact']}\n"
                f"  {res['seconds_lab']:.2f} s lab, goodput {format_rate(res['goodput_model_bps'])}"
                f" model = {res['link_fraction']:.2f} of the link; retransmits "
                f"{res['retransmits']}, timeouts {res['timeouts']}, CNPs {res['cnps_rx']}")
    lines = [f"Incast {', '.join(res['from'])} -> {res['to']}: {res['size']} bytes each"]
    for g in res["from"]:
        r = res["steady_rate_model_bps"][g]
        lines.append(f"  {g}: {res['status'].get(g)}, byte-exact {res['byte_exact'][g]}, "
                     f"steady {format_rate(r) if r else '-'} "
                     f"({res['fair_share'][g] or 0:.2f} of a fair share), CNPs "
                     f"{res['cnps_rx'][g]}, retransmits {res['retransmits'][g]}")
    lines.append(f"  receiver: {res['ce_rx_by_receiver']} CE-marked packets, "
                 f"{res['cnps_sent_by_receiver']} CNPs sent")
    return "\n".join(lines)
