"""Control plane of the NIC process: the worker's Unix socket and the CM handshake.

Book ch.9: the worker drives the NIC through verbs (Figures 9-2/9-3/9-5) and the two
NICs agree on QP numbers, start PSNs, P_Key, path MTU and the exposed memory (R_Key,
address, length) over a management connection (Figure 9-4, REQ/REP/RTU, traffic.nic.cm),
here TCP on the NIC's own IP address, so it crosses the fabric like the data.

* `NicControl`: JSON lines (emucore.ctlsock) on the Unix socket of `NicConfig.control`,
  one thread per client connection (traffic.nic.client is the client). Verbs calls take
  the NIC lock; the blocking ones (connect, wait_connected, poll_cq with a timeout)
  never hold it while they wait on the network or for completions.
* CM listeners are per TCP port (as rdma_cm's port space): `listen(qpn, port)` queues a
  QP for the next REQ on that port (first in, first out); an REQ with nobody queued is
  rejected with a reason the connecting side retries on. The passive QP goes to RTR
  when it sends the REP and to RTS on the RTU; the active one to RTR and RTS on the REP.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from typing import Any

from emucore.ctlsock import LineServer
from emucore.wire.ib import pkey_match
from emucore.wire.roce_codes import udp_sport
from traffic.nic.cm import (CmError, CmListener, CmRej, CmRep, CmReq, CmRtu, client_socket,
                            recv_msg, send_msg)
from traffic.nic.client import wc_to_json

log = logging.getLogger("traffic.nic.ctl")
NOT_LISTENING = "no QP listening on port"
_QP_PINS = ("dscp", "ecn", "start_psn", "qpn")  #: create_qp's optional knobs (None: default)


class NicControl(LineServer):
    """Unix-socket verbs server and CM endpoint of one `traffic.nic.datapath.Nic`: a
    thread per client connection (`start`, from emucore.ctlsock.LineServer)."""

    def __init__(self, nic: Any) -> None:
        """Bind the control socket (published under its final name by `start`)."""
        super().__init__(nic.cfg.control, backlog=64)
        self.nic = nic
        self.listeners: dict[int, CmListener] = {}
        self.pending: dict[int, deque] = {}

    def close(self) -> None:
        """Stop listening (Unix socket and CM ports) and remove the socket file."""
        super().close()
        for lst in self.listeners.values():
            lst.close()

    def reply(self, req: dict) -> dict:
        """The reply to one request: "ok" and what `dispatch` answered."""
        return {"ok": True, **(self.dispatch(req) or {})}

    # -- requests --------------------------------------------------------------------
    def dispatch(self, req: dict) -> dict | None:
        """Answer one request (the reply's "ok" is added by the caller)."""
        nic, cmd = self.nic, req.get("cmd")
        if cmd == "ping":
            return {"gpu": nic.cfg.gpu, "ip": nic.cfg.ip, "pid": os.getpid(), "run": nic.cfg.run}
        if cmd == "connect":
            return self.connect(int(req["qpn"]), str(req["ip"]), int(req.get("port") or
                                nic.cfg.cm_port), req.get("lkey"), float(req.get("timeout", 30)))
        if cmd == "wait_connected":
            with nic.lock:
                q = nic._qp(int(req["qpn"]))
            if not q.connected.wait(float(req.get("timeout", 30))):
                raise TimeoutError(f"qpn: QP {q.qpn:#x} not connected (error: {q.error})")
            return dict(q.peer)
        with nic.lock:
            if cmd == "alloc_pd":
                return {"pd": nic.alloc_pd()}
            if cmd == "reg_mr":
                return nic.reg_mr(int(req["pd"]), str(req["shm"]), int(req["length"]),
                                  req.get("access", 3))
            if cmd == "dereg_mr":
                return nic.dereg_mr(int(req["lkey"]))
            if cmd == "create_cq":
                return {"cq": nic.create_cq(int(req.get("depth", 4096)))}
            if cmd == "create_qp":
                return {"qpn": nic.create_qp(int(req["pd"]), int(req["send_cq"]),
                                             int(req.get("recv_cq") or req["send_cq"]),
                                             int(req.get("max_send_wr", 1024)),
                                             bool(req.get("write_only", False)),
                                             int(req.get("pkey", 0xFFFF)),
                                             **{k: req.get(k) for k in _QP_PINS})}
            if cmd == "destroy_qp":
                return nic.destroy_qp(int(req["qpn"]))
            if cmd == "listen":
                return self.listen(int(req["qpn"]), int(req.get("port") or nic.cfg.cm_port),
                                   req.get("lkey"))
            if cmd == "post_send":
                return nic.post_send(int(req["qpn"]), list(req["wrs"]))
            if cmd == "post_recv":
                return nic.post_recv(int(req["qpn"]), list(req["wr_ids"]))
            if cmd == "poll_cq":
                return {"wcs": self.poll_cq(int(req["cq"]), int(req.get("n", 16)),
                                            float(req.get("timeout", 0.0)))}
            if cmd == "query_qp":
                return nic._qp(int(req["qpn"])).snapshot(nic.td)
            if cmd == "counters":
                return nic.counters()
            if cmd == "fidelity_reset":  # a measurement window starts now (emu.observe.guard)
                nic.meter.reset()
                return {}
        raise ValueError(f"cmd: unknown command {cmd!r}")

    def poll_cq(self, cq: int, n: int, timeout: float) -> list[dict]:
        """ibv_poll_cq, waiting up to `timeout` for a first completion (NIC lock held;
        the wait releases it, the data path notifies after each iteration)."""
        nic = self.nic
        c = nic._cq(cq)
        deadline = time.monotonic() + timeout
        while True:
            wcs = c.poll_stamped(n)
            left = deadline - time.monotonic()
            if wcs or left <= 0:  # "ts": when the NIC completed it (CQ.poll_stamped)
                return [{**wc_to_json(w), "ts": t} for w, t in wcs]
            nic.waiters += 1
            try:
                nic.cond.wait(min(left, 0.05))
            finally:
                nic.waiters -= 1

    def _exposed(self, lkey: Any) -> dict:
        if lkey is None:
            return {"rkey": 0, "mr_addr": 0, "mr_len": 0}
        mr = self.nic.ctx.mrs_by_lkey.get(int(lkey))
        if mr is None:
            raise ValueError(f"lkey: no MR {int(lkey):#x}")
        return {"rkey": mr.rkey, "mr_addr": mr.addr, "mr_len": mr.length}

    def listen(self, qpn: int, port: int, lkey: Any) -> None:
        """Queue `qpn` for the next REQ on `port` (opening the port if needed); lock held."""
        q = self.nic._qp(qpn)
        q.expose = self._exposed(lkey)
        if port not in self.listeners:
            self.listeners[port] = CmListener((self.nic.cfg.ip, port))
            self.pending[port] = deque()
            threading.Thread(target=self._cm_loop, args=(port,), daemon=True).start()
        self.pending[port].append(q)

    def _cm_loop(self, port: int) -> None:
        nic, lst = self.nic, self.listeners[port]
        while True:
            got: list = []

            def on_req(req: CmReq) -> CmRep | CmRej:
                with nic.lock:
                    if not self.pending[port]:
                        return CmRej(req.comm_id, f"{NOT_LISTENING} {port}")
                    q = self.pending[port][0]
                    if not pkey_match(req.pkey, q.ep.qp.pkey):
                        return CmRej(req.comm_id, f"pkey: {req.pkey:#x} does not match "
                                                  f"{q.ep.qp.pkey:#x}")
                    self.pending[port].popleft()
                    got.append(q)  # (before to_rtr: a failure there is the QP's error)
                    nic.to_rtr(q, req.local_qpn, req.start_psn, req.fabric_ip, req.path_mtu)
                    return CmRep(nic.cm_rng.getrandbits(32), req.comm_id, q.qpn, q.start_psn,
                                 q.ep.qp.pkey, q.ep.qp.path_mtu, nic.cfg.ip,
                                 udp_sport(q.qpn, req.local_qpn), **{
                                     k: v for k, v in q.expose.items()})

            try:
                req, _ = lst.accept(on_req, timeout=30.0)
            except socket.timeout:
                continue
            except Exception as exc:  # one exchange failed; the port serves the next
                if lst.closed:
                    return  # the NIC stops
                # (a peer that reset the connection, a malformed message: before, any
                # of these ended this thread, and the kernel went on accepting the
                # port's connections with nobody to answer them)
                log.warning("CM on port %d: %s: %s", port, type(exc).__name__, exc,
                            exc_info=not isinstance(exc, (CmError, ConnectionError)))
                for q in got:
                    q.error = str(exc)
                continue
            if got:
                q = got[0]
                with nic.lock:
                    nic.to_rts(q)
                    q.peer = {"remote_ip": req.fabric_ip, "remote_qpn": req.local_qpn,
                              "rkey": req.rkey, "addr": req.mr_addr, "length": req.mr_len}
                q.connected.set()
                log.info("QP %#x connected (passive) to %s QP %#x", q.qpn, req.fabric_ip,
                         req.local_qpn)

    def connect(self, qpn: int, ip: str, port: int, lkey: Any, timeout: float) -> dict:
        """Active side of Figure 9-4: REQ, REP, RTU; retries while the peer is not
        listening yet. Returns what the peer exposed."""
        nic = self.nic
        with nic.lock:
            q = nic._qp(qpn)
            req = CmReq(nic.cm_rng.getrandbits(32), qpn, q.start_psn, q.ep.qp.pkey, nic.cfg.mtu,
                        nic.cfg.ip, udp_sport(qpn, qpn), **self._exposed(lkey))
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                # the management connection leaves this NIC from a port of this QP's
                # stream (the same first draw on every attempt: its ECMP path is the seed's)
                with client_socket(nic.cfg.ip, nic.cfg.rng(f"cm:{qpn:#x}"),
                                   max(0.5, deadline - time.monotonic())) as s:
                    s.connect((ip, port))
                    send_msg(s, req)
                    rep = recv_msg(s)
                    if isinstance(rep, CmRej):
                        if rep.reason.startswith(NOT_LISTENING):
                            raise ConnectionRefusedError(rep.reason)
                        raise CmError(f"rejected: {rep.reason}")
                    if not isinstance(rep, CmRep) or rep.remote_comm_id != req.comm_id:
                        raise CmError(f"bad reply to REQ {req.comm_id}: {rep}")
                    with nic.lock:
                        nic.to_rtr(q, rep.local_qpn, rep.start_psn, rep.fabric_ip, rep.path_mtu)
                        nic.to_rts(q)
                        q.peer = {"remote_ip": rep.fabric_ip, "remote_qpn": rep.local_qpn,
                                  "rkey": rep.rkey, "addr": rep.mr_addr, "length": rep.mr_len}
                    send_msg(s, CmRtu(req.comm_id, rep.comm_id))
                q.connected.set()
                log.info("QP %#x connected (active) to %s QP %#x", qpn, ip, rep.local_qpn)
                return dict(q.peer)
            except (ConnectionRefusedError, ConnectionResetError, socket.timeout) as exc:
                last = str(exc) or type(exc).__name__
                time.sleep(0.1)
        raise TimeoutError(f"connect: {ip}:{port} not accepting after {timeout:g} s ({last})")
