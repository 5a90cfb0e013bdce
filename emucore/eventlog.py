"""The event log: what agents and NICs did, written as it happens, in model time.

Book ch.11 tells congestion as a sequence of events - a queue crosses the WRED minimum,
the first CE mark, the receiver's first CNP, the sender's rate cut, xOFF reached, a PFC
XOFF sent upstream, the queue drains, XON (Figure 11-7, t1..t8; Figures 11-4..11-6,
steps 1..14). Sampled metrics (every 50 us model) cannot order those; each process
therefore appends one JSON object per event, the moment it handles it, to its own file
(RUNDIR/events/<node>.jsonl)::

    {"t": 1234.56, "node": "rail1", "ev": "pfc_tx", "port": "eth5", "prio": 3, "quanta": 65535}

`t` is model microseconds on the machine's CLOCK_MONOTONIC (lab seconds / TDF x 1e6,
rounded to 0.01 us): every process of a run shares that clock, so events of different
switches and NICs are on one axis; a reader subtracts the model time of its own start
(`model_us`). The event names and their fields are documented in docs/EVENTS.md.

Writes are buffered; the owner flushes on its counters request (the metrics sampler asks
every interval) and on exit, so a reader asks for counters (or stops the run) first.
A run of thousands of threshold crossings must not fill the disk: at most `cap` events
per event name are written, and `close` appends one "suppressed" event counting the rest.
"""

from __future__ import annotations

import json
import os
from collections import Counter

from emucore.timedil import TimeDilation

__all__ = ["EventLog", "model_us", "read_events", "DEFAULT_CAP"]

DEFAULT_CAP = 20000  #: events written per event name and process


def model_us(t_lab: float, td: TimeDilation) -> float:
    """Model microseconds of a lab CLOCK_MONOTONIC reading (the log's time axis)."""
    return round(td.model_time(t_lab) * 1e6, 2)


class EventLog:
    """One process's event file; a no-op when `path` is None (no run directory)."""

    def __init__(self, path: str | None, node: str, td: TimeDilation,
                 cap: int = DEFAULT_CAP) -> None:
        self.node = node
        self.td = td
        self.cap = cap
        self.counts: Counter[str] = Counter()
        self.f = None
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self.f = open(path, "a", buffering=1 << 16)

    @property
    def enabled(self) -> bool:
        """Whether events are written (callers may skip computing their fields)."""
        return self.f is not None

    def emit(self, ev: str, t_lab: float, **fields) -> None:
        """Append one event that happened at lab time `t_lab` (time.monotonic())."""
        if self.f is None:
            return
        n = self.counts[ev] = self.counts[ev] + 1
        if n > self.cap:
            return
        rec = {"t": model_us(t_lab, self.td), "node": self.node, "ev": ev}
        rec.update(fields)
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        """Make what was written visible to readers."""
        if self.f is not None:
            self.f.flush()

    def close(self, t_lab: float) -> None:
        """Record what the cap left out, then close."""
        if self.f is None:
            return
        over = {ev: n - self.cap for ev, n in sorted(self.counts.items()) if n > self.cap}
        if over:
            self.cap += 1  # this record itself is always written
            self.emit("suppressed", t_lab, counts=over)
        self.f.close()
        self.f = None


def read_events(paths) -> list[dict]:
    """Every event of these files, in time order (a torn last line is skipped)."""
    out = []
    for p in paths:
        with open(p) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    out.sort(key=lambda e: e["t"])
    return out
