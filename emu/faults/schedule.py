"""A fault schedule: what fails, when, in model time (issue 14; book ch.10 "single points
of failure", ch.11 "PFC storm" and the PFC watchdog).

A schedule is `;`-separated events, each ``TIME KIND TARGET [ACTION] [key=value ...]``,
TIME in model units after the workload starts (``1ms``, ``250us``, ``0``):

============================================  =========================================
``1ms link rail1:eth5 down`` / ``up``          carrier off / on at both ends of the link
                                               (named by either end, or ``rail1-spine2``)
``2ms link rail1-spine1 degrade rate=100G``    the link's agents' egress: a slower rate,
``loss=1% delay=2us corrupt=0.1%``             random loss, extra one-way delay,
                                               corrupted payload bytes (any subset)
``3ms link rail1-spine1 restore``              back to the link's nominal rate and delay
``1ms switch spine1 down`` / ``up``            the agent stops forwarding, its links go
                                               down (and come back)
``1ms nic h1g1 down`` / ``up``                 the GPU's NIC port: carrier off / on
``1ms storm h1g1 prio=3 for=5ms``              the NIC keeps sending XOFF on a priority
                                               (default 3) for a time, or until
``9ms storm h1g1 stop``                        (a malfunctioning NIC, ch.11)
``1ms pause h1g1 prio=3 quanta=65535``         one PFC frame from the NIC
============================================  =========================================

`parse_schedule` checks the syntax only and raises ValueError naming the bad token;
which nodes, ports and GPUs exist is checked against the fabric by `emu.faults.plan`.
Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from emucore.timedil import parse_duration, parse_rate

KINDS = {
    "link": ("down", "up", "degrade", "restore"),
    "switch": ("down", "up"),
    "nic": ("down", "up"),
    "storm": ("start", "stop"),
    "pause": ("once",),
}
#: the keys each (kind, action) takes, with their defaults
PARAMS = {
    ("link", "degrade"): {"rate": None, "loss": 0.0, "delay": 0.0, "corrupt": 0.0},
    ("storm", "start"): {"prio": 3, "for": None},
    ("pause", "once"): {"prio": 3, "quanta": 0xFFFF},
}
#: the action taken when none is written
DEFAULT_ACTION = {"storm": "start", "pause": "once"}


@dataclass(frozen=True)
class Fault:
    """One scheduled event."""

    at_s: float  # model seconds after the workload starts
    kind: str  # link | switch | nic | storm | pause
    target: str  # as written: "rail1:eth5", "rail1-spine1", "spine1", "h1g1"
    action: str  # see KINDS
    params: tuple[tuple[str, float | None], ...] = ()  # rate (bit/s), loss, corrupt
    # (fractions), delay, for (model s), prio, quanta
    text: str = ""  # the event as written

    def param(self, key: str) -> float | None:
        """A parameter's value (its default when not written)."""
        return dict(self.params).get(key, PARAMS.get((self.kind, self.action), {}).get(key))

    def to_dict(self) -> dict:
        """JSON form (summary.json, the event log)."""
        return {"at_s": self.at_s, "kind": self.kind, "target": self.target,
                "action": self.action, "params": dict(self.params), "text": self.text}


def _fraction(text: str, what: str) -> float:
    """``1%`` or ``0.01`` -> 0.01, in [0, 1)."""
    t = text.strip()
    v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    if not 0.0 <= v < 1.0:
        raise ValueError(f"{what}: must be in [0, 100%), got {text!r}")
    return v


def _param(kind: str, action: str, token: str) -> tuple[str, float | None]:
    if "=" not in token:
        raise ValueError(f"{token!r}: expected key=value")
    key, val = token.split("=", 1)
    allowed = PARAMS.get((kind, action), {})
    if key not in allowed:
        keys = ", ".join(allowed) or "none"
        raise ValueError(f"{token!r}: {kind} {action} takes {keys}")
    try:
        if key == "rate":
            v: float | None = parse_rate(val)
            if not v > 0:
                raise ValueError("must be > 0")
        elif key in ("loss", "corrupt"):
            v = _fraction(val, key)
        elif key in ("delay", "for"):
            v = parse_duration(val)
            if v < 0 or key == "for" and v == 0:
                raise ValueError("must be > 0" if key == "for" else "must be >= 0")
        elif key == "prio":
            v = int(val)
            if not 0 <= v <= 7:
                raise ValueError("a priority is 0..7")
        else:  # quanta
            v = int(val, 0)
            if not 0 <= v <= 0xFFFF:
                raise ValueError("quanta are 0..65535")
    except ValueError as exc:
        raise ValueError(f"{token!r}: {exc}") from None
    return key, v


def parse_event(text: str) -> Fault:
    """One event, ``TIME KIND TARGET [ACTION] [key=value ...]``."""
    tokens = text.split()
    if len(tokens) < 3:
        raise ValueError(f"{text.strip()!r}: expected TIME KIND TARGET [ACTION] [key=value ...]")
    when, kind, target, *rest = tokens
    try:
        at = parse_duration(when)
    except ValueError:
        raise ValueError(f"{when!r}: not a time (e.g. 1ms, 250us)") from None
    if at < 0:
        raise ValueError(f"{when!r}: a time is >= 0")
    if kind not in KINDS:
        raise ValueError(f"{kind!r}: a fault is one of {', '.join(KINDS)}")
    if "=" in target:
        raise ValueError(f"{target!r}: expected the {kind}'s name before its parameters")
    if rest and "=" not in rest[0]:
        action, params = rest[0], rest[1:]
    elif kind in DEFAULT_ACTION:
        action, params = DEFAULT_ACTION[kind], rest
    else:
        raise ValueError(f"{text.strip()!r}: {kind} needs an action: {', '.join(KINDS[kind])}")
    if action not in KINDS[kind]:
        raise ValueError(f"{action!r}: {kind} takes {', '.join(KINDS[kind])}")
    pairs = dict(_param(kind, action, t) for t in params)
    if (kind, action) == ("link", "degrade") and not any(
            pairs.get(k) for k in ("rate", "loss", "delay", "corrupt")):
        raise ValueError(f"{text.strip()!r}: degrade needs rate=, loss=, delay= or corrupt=")
    return Fault(at, kind, target, action, tuple(sorted(pairs.items())), " ".join(tokens))


def parse_schedule(text: str | list[str] | tuple[str, ...]) -> tuple[Fault, ...]:
    """`;`-separated events (or a list of such strings, e.g. repeated ``--fault``), in
    time order (stable for equal times)."""
    parts = [text] if isinstance(text, str) else list(text)
    events = [parse_event(e) for p in parts for e in str(p).split(";") if e.strip()]
    return tuple(sorted(events, key=lambda f: f.at_s))
