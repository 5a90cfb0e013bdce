"""Sampled time series of a run: per port and queue, per QP -> RUNDIR/metrics.csv.

A `Sampler` thread polls every switch agent's control socket (and every RDMA NIC's, when
the run started them) at an interval given in *model* time, converted to lab time by
`emucore.timedil`. Counters are cumulative; `rows()` turns two successive snapshots into
long-format rows ``t_model_s,node,port,queue,metric,value`` (rates from deltas, in model
units). CSV rather than Parquet: it needs no extra dependency, streams row by row while
the run goes on, and opens in a spreadsheet, pandas or gnuplot alike.

Metrics per port: tx_bps, rx_bps (model bit/s), drops (frames in the interval), and per
queue: depth_bytes, ecn_marks, drops; per port and priority: pause_tx, pause_rx
(frames in the interval), paused (0/1). Per QP (NICs): rate_bps (DCQCN current rate,
model; UET: NSCC's window / base RTT), cwnd_bytes (UET: NSCC's window), cnps_rx,
cnps_sent (in the interval), tx_bps (wire bytes); a QP destroyed in the interval gets
its last tx_bps and CNP rows from the NIC's record of its final counters (`merge_qps`),
none after; a NIC snapshot the sampler keeps (destroyed QPs marked) adds up with
`nic_sum`. Per process that reports its lag (agents and NICs, the fidelity guard:
emu.observe.guard), on port "": lag_p99_s and lag_max_s, model seconds, of the actions
of the interval - the p99 from the difference of two cumulative histograms
(emucore.fidelity: the upper edge of its bucket), the max exact when the process's
maximum rose in the interval, else the upper edge of the highest bucket that grew (a
bucket is 1/8 decade wide).

Per flow and egress port (book ch.12: which uplink each flow, flowlet or sprayed packet
took), `path_rows` turns the agents' path accounting (the snapshot's ``lb.paths``,
cumulative bytes per flow and port, only for flows that had a choice of equal-cost next
hops) into ``t_model_s,node,flow,port,bps`` rows of RUNDIR/paths.csv: the model bit/s of
that flow on that port over the interval, a row only where its bytes grew. The file is
created by the first such row (a run without balanced flows has none); emu.observe.paths
summarises it and emu.observe.plots draws it. RUNDIR/sampler.json states the files' t = 0 on
the event log's axis (``t0_model_us``, model µs of CLOCK_MONOTONIC, emucore.eventlog), so
that events can be put on the sampled series.
"""

from __future__ import annotations

import csv
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from emucore.eventlog import model_us
from emucore.fidelity import BUCKET_EDGES, P99, percentile
from emucore.timedil import TimeDilation

log = logging.getLogger("emu.observe.metrics")

FIELDS = ("t_model_s", "node", "port", "queue", "metric", "value")
PATH_FIELDS = ("t_model_s", "node", "flow", "port", "bps")
PATHS_CSV = "paths.csv"  #: next to metrics.csv
SAMPLER_JSON = "sampler.json"  #: next to metrics.csv: the sampled files' time origin


def switch_rows(prev: dict, cur: dict, td: TimeDilation, t0_lab: float) -> list[tuple]:
    """Rows for one switch between two `counters` snapshots (switch_agent schema)."""
    dt = cur["t_lab"] - prev["t_lab"]
    if dt <= 0:
        return []
    t = td.model_time(cur["t_lab"] - t0_lab)
    node = cur["switch"]
    out: list[tuple] = []
    for name, c in cur["ports"].items():
        p = prev["ports"].get(name)
        if p is None:
            continue
        # a port read at its own time (a switch answers a port at a time: switch_agent.control)
        dt = c.get("t_lab", cur["t_lab"]) - p.get("t_lab", prev["t_lab"])
        if dt <= 0:
            continue
        out.append((t, node, name, "", "tx_bps", td.model_rate((c["tx_bytes"] - p["tx_bytes"]) * 8 / dt)))
        out.append((t, node, name, "", "rx_bps", td.model_rate((c["rx_bytes"] - p["rx_bytes"]) * 8 / dt)))
        out.append((t, node, name, "", "drops",
                    sum(c["drops"].values()) - sum(p["drops"].values())))
        for q, qc in c.get("queues", {}).items():
            pq = p.get("queues", {}).get(q, {})
            if not (qc["depth_bytes"] or qc.get("ecn_marks") or qc.get("enqueued")):
                continue
            out.append((t, node, name, q, "depth_bytes", qc["depth_bytes"]))
            out.append((t, node, name, q, "ecn_marks",
                        qc.get("ecn_marks", 0) - pq.get("ecn_marks", 0)))
            out.append((t, node, name, q, "drops",
                        sum(qc["drops"].values()) - sum(pq.get("drops", {}).values())))
        pfc, ppfc = c.get("pfc"), p.get("pfc")
        if pfc and ppfc:
            for prio in range(8):
                tx = pfc["pause_tx"][prio] - ppfc["pause_tx"][prio]
                rx = pfc["pause_rx"][prio] - ppfc["pause_rx"][prio]
                paused = int(pfc["paused"][prio])
                if tx or rx or paused:
                    out += [(t, node, name, prio, "pause_tx", tx), (t, node, name, prio, "pause_rx", rx),
                            (t, node, name, prio, "paused", paused)]
    return out


def path_bytes(snap: dict) -> dict[tuple[str, str], int]:
    """{(flow, port): cumulative bytes} of a switch snapshot's path accounting."""
    out: dict[tuple[str, str], int] = {}
    for p in (snap.get("lb") or {}).get("paths", ()):
        out[(p["flow"], p["port"])] = out.get((p["flow"], p["port"]), 0) + p["bytes"]
    return out


def path_rows(prev: dict, cur: dict, td: TimeDilation, t0_lab: float) -> list[tuple]:
    """paths.csv rows for one switch between two snapshots: the model bit/s of every
    flow on every egress port whose bytes grew (a flow new since `prev` counts from 0)."""
    dt = cur["t_lab"] - prev["t_lab"]
    if dt <= 0:
        return []
    before, now = path_bytes(prev), path_bytes(cur)
    t = td.model_time(cur["t_lab"] - t0_lab)
    grew = {k: b - before.get(k, 0) for k, b in now.items() if b > before.get(k, 0)}
    return [(t, cur["switch"], flow, port, td.model_rate(d * 8 / dt))
            for (flow, port), d in grew.items()]


def merge_qps(prev: dict | None, cur: dict) -> None:
    """Keep the QPs destroyed since `prev` in NIC snapshot `cur`'s "qps", marked
    "destroyed": "final" with the counters the NIC recorded when it destroyed them
    (its ``closed_qps``, the last traffic.nic.nicverbs.CLOSED_KEPT: CLOSED_SUMS, state,
    error, peer, t_lab destroyed; the rest, DCQCN's or NSCC's state, as last sampled),
    else "last_sampled" with `prev`'s. A live QP wins over a destroyed one of the same
    number (QPNs can be pinned again); the NIC's closed_qps_<name> sums count both
    (`nic_sum`)."""
    live, gone, was = cur["qps"], {}, (prev or {}).get("qps") or {}
    for qpn, q in was.items():
        if qpn not in live:
            gone[qpn] = q if q.get("destroyed") else {**q, "destroyed": "last_sampled"}
    for rec in cur.get("closed_qps") or ():  # oldest first: the last of a number wins
        qpn = str(rec["qpn"])
        if qpn in live:
            continue
        q = was.get(qpn) or {}  # the same QP sampled alive, or already merged: keep the rest
        same = not q.get("destroyed") or q.get("t_lab") == rec.get("t_lab")
        gone[qpn] = {**(q if same else {}), **{k: v for k, v in rec.items() if k != "qpn"},
                     "destroyed": "final"}
    cur["qps"] = {**gone, **live}


def nic_sum(snap: dict, name: str) -> int | float:
    """A per-QP counter summed over a NIC snapshot's QPs, those destroyed since the NIC
    started included: its ``closed_qps_<name>`` plus the live QPs' (the destroyed ones
    `merge_qps` keeps are in the former). A snapshot of an older run, without the NIC's
    ``closed_qps`` records (whose sampler kept destroyed QPs unmarked), sums every QP it
    lists: the last-sampled figures, which may be short."""
    qps = (snap.get("qps") or {}).values()
    closed = snap.get(f"closed_qps_{name}")
    if closed is None or "closed_qps" not in snap:
        return sum(q.get(name) or 0 for q in qps)
    return closed + sum(q.get(name) or 0 for q in qps if not q.get("destroyed"))


def nic_rows(prev: dict, cur: dict, td: TimeDilation, t0_lab: float) -> list[tuple]:
    """Rows for one RDMA NIC between two snapshots (traffic.nic.main counters schema); a
    QP destroyed in the interval gives its tx_bps and CNPs up to its end, no rate."""
    dt = cur.get("t_lab", 0) - prev.get("t_lab", 0)
    if dt <= 0:
        return []
    t = td.model_time(cur["t_lab"] - t0_lab)
    node = cur.get("gpu", cur.get("nic", "?"))
    out: list[tuple] = []
    for qpn, q in cur.get("qps", {}).items():
        p = prev.get("qps", {}).get(qpn, {})
        if q.get("destroyed") == "last_sampled":
            continue  # its figures since the last sample are lost
        if p.get("destroyed"):
            if p.get("t_lab") == q.get("t_lab"):
                continue  # ended in an earlier interval
            p = {}  # another QP of that number, created and destroyed since
        rate = None if q.get("destroyed") else q.get("rate_model_bps")
        if rate is not None:
            out.append((t, node, f"qp{qpn}", "", "rate_bps", rate))
        cwnd = None if q.get("destroyed") else (q.get("nscc") or {}).get("cwnd")
        if cwnd is not None:  # UET: NSCC's window, bytes
            out.append((t, node, f"qp{qpn}", "", "cwnd_bytes", cwnd))
        out.append((t, node, f"qp{qpn}", "", "tx_bps",
                    td.model_rate((q.get("tx_wire_bytes", 0) - p.get("tx_wire_bytes", 0)) * 8 / dt)))
        for k in ("cnps_rx", "cnps_sent"):
            out.append((t, node, f"qp{qpn}", "", k, q.get(k, 0) - p.get(k, 0)))
    return out


def fidelity_rows(prev: dict, cur: dict, td: TimeDilation, t0_lab: float,
                  node: str) -> list[tuple]:
    """lag_p99_s and lag_max_s of one process's actions between two snapshots (none
    when it does not report lag, or did nothing scheduled in the interval)."""
    p, c = prev.get("fidelity"), cur.get("fidelity")
    if not (isinstance(p, dict) and isinstance(c, dict)):
        return []
    delta = [b - a for a, b in zip(p.get("hist", ()), c.get("hist", ()))]
    if len(delta) != len(c.get("hist", ())) or sum(delta) <= 0:
        return []
    t = td.model_time(cur["t_lab"] - t0_lab)
    if c["max_lag_model_s"] > p["max_lag_model_s"]:
        mx = c["max_lag_model_s"]
    else:
        top = max(i for i, n in enumerate(delta) if n > 0)
        mx = (0.0 if top == 0 else c["max_lag_model_s"] if top > len(BUCKET_EDGES)
              else min(BUCKET_EDGES[top - 1], c["max_lag_model_s"]))
    return [(t, node, "", "", "lag_p99_s", percentile(delta, P99)),
            (t, node, "", "", "lag_max_s", mx)]


class Sampler:
    """Background sampling of every agent (and NIC) into metrics.csv."""

    def __init__(self, path: Path, td: TimeDilation, interval_model_s: float,
                 sources: dict[str, Callable[[bool], dict]], kinds: dict[str, str],
                 max_rate_hz: float = 20.0) -> None:
        self.path = path
        self.td = td
        # never poll faster than max_rate_hz in lab time: the agents have work to do
        self.interval_lab = max(td.lab_time(interval_model_s), 1.0 / max_rate_hz)
        #: name -> fetch(brief): its counters; brief between the first and the last
        #: sample (a switch's `counters` with "brief": only what the rows read, cheaper
        #: to answer: switch_agent.state.AgentState.snapshot_steps), full at both ends
        self.sources = sources
        self.kinds = kinds  # name -> "switch" | "nic"
        self.last: dict[str, dict] = {}
        self.first: dict[str, dict] = {}
        self.rows = 0
        self.paths_path = path.parent / PATHS_CSV
        self.paths_rows = 0
        self._paths_fh = None  # opened by the first path row
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = time.monotonic()
        #: called after every sampling round (e.g. emu.observe.procstat.CpuTracker.sample)
        self.hooks: list[Callable[[], None]] = []

    def start(self) -> None:
        """Start sampling (takes a first snapshot at once)."""
        (self.path.parent / SAMPLER_JSON).write_text(json.dumps(
            {"t0_lab_s": self.t0, "t0_model_us": model_us(self.t0, self.td),
             "interval_lab_s": self.interval_lab}))
        self.paths_path.unlink(missing_ok=True)  # a rerun into the same directory
        self._fh = self.path.open("w", newline="")
        self._w = csv.writer(self._fh)
        self._w.writerow(FIELDS)
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="emu-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_lab):
            self.sample(brief=True)

    def sample(self, brief: bool = False) -> None:
        """Poll every source once and append its rows."""
        for name, fetch in list(self.sources.items()):  # the run may add NICs meanwhile
            try:
                cur = fetch(brief)
            except (OSError, ValueError) as exc:
                log.debug("sampling %s: %s", name, exc)
                continue
            cur.setdefault("t_lab", time.monotonic())
            prev = self.last.get(name)
            if "qps" in cur:  # keep destroyed QPs, with their final counters
                merge_qps(prev, cur)
            self.first.setdefault(name, cur)
            if prev is not None:
                fn = switch_rows if self.kinds.get(name) == "switch" else nic_rows
                rows = fn(prev, cur, self.td, self.t0)
                rows += fidelity_rows(prev, cur, self.td, self.t0, name)
                self._w.writerows(rows)
                self.rows += len(rows)
                if self.kinds.get(name) == "switch":
                    self._write_paths(path_rows(prev, cur, self.td, self.t0))
            self.last[name] = cur
        self._fh.flush()
        if self._paths_fh is not None:
            self._paths_fh.flush()
        for hook in self.hooks:
            try:
                hook()
            except OSError as exc:  # /proc of a process that is going away
                log.debug("sampling hook: %s", exc)

    def _write_paths(self, rows: list[tuple]) -> None:
        if not rows:
            return
        if self._paths_fh is None:
            self._paths_fh = self.paths_path.open("w", newline="")
            self._pw = csv.writer(self._paths_fh)
            self._pw.writerow(PATH_FIELDS)
        self._pw.writerows(rows)
        self.paths_rows += len(rows)

    def stop(self) -> dict[str, dict]:
        """Stop, take a last sample; returns the last snapshot of every source."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        for fetch in self.sources.values():  # a source keeping a connection open
            close = getattr(fetch, "close", None)
            if close is not None:
                close()
        self._fh.close()
        if self._paths_fh is not None:
            self._paths_fh.close()
        return dict(self.last)


def read_rows(path: Path) -> list[dict]:
    """metrics.csv as a list of dicts with numeric values."""
    with path.open() as fh:
        out = []
        for r in csv.DictReader(fh):
            r["t_model_s"] = float(r["t_model_s"])
            r["value"] = float(r["value"])
            out.append(r)
        return out


def read_paths(path: Path) -> list[dict]:
    """paths.csv as a list of dicts (t_model_s and bps as floats); [] when absent."""
    if not path.is_file():
        return []
    with path.open() as fh:
        out = []
        for r in csv.DictReader(fh):
            r["t_model_s"] = float(r["t_model_s"])
            r["bps"] = float(r["bps"])
            out.append(r)
        return out
