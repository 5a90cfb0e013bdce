"""Load balancing over equal-cost next hops: the configuration (book ch.10, ch.12, ch.13).

Three modes, per switch and per group of equal-cost ports (`interfaces`):

* ``ecmp`` — flow-based (ch.12 "Flow-Based Load Balancing with Layer 3 ECMP", Fig 12-4):
  every packet of a flow takes the member chosen by a seeded hash of the flow's fields.
  `hash` picks the fields: ``5-tuple`` (src, dst IP, protocol, src, dst port),
  ``no-sport`` (without the UDP/TCP source port, which is where RoCEv2 puts its
  entropy), ``3-tuple`` (src, dst IP, protocol) or ``dst-ip`` (the "low entropy" of
  ch.13 "Hash Polarization"). Equal seeds on every switch polarize (Fig 10-5).
* ``flowlet`` — flowlet-based adaptive routing (Fig 12-5; Cisco DLB flowlet mode): a flow
  keeps its member while packets keep coming; after `flowlet_gap_s` of silence the next
  packet starts a new flowlet, which stays on the flow's member unless that member's
  load is over the threshold — then it takes the least-loaded member. A new flow starts
  on its hash member, under the same rule. Load is an EWMA of the bytes put on the port
  (`estimator: bytes`, a discounting rate estimator as in CONGA, time constant
  `ewma_tau_s`, compared with `util_threshold` × link rate) or the bytes queued on it
  (`estimator: queue`, against `queue_threshold`).
* ``spray`` — per packet (Figs 12-6, 12-7; DLB ``mode per-packet``): ``round-robin``,
  ``random`` or ``least-queue`` over the members. Safe only with WRITE ONLY (ch.12).

`interfaces` is Cisco's ``dlb-interface`` list: a group of equal-cost ports uses the mode
when every member is listed (empty: every group). `dlb_mac` is the DLB virtual next-hop
MAC (Example 12-1, default 00:CC:CC:CC:CC:CC): frames a switch balances are rewritten to
it, and every switch that has it accepts it as its own router MAC (the book: "the same
DLB MAC address must be configured on all participating switches"). `order` fixes what
"member k" means — the route's order (the kernel keeps the order routes were installed
in: the local port order of `topologies`), sorted by port name, or by next-hop
address — ch.13's partially connected leaf–spine depends on it. `pins` force the first
choice of the flows between two addresses onto one port (collide flows on purpose,
L10.4); flowlet mode may still move a pinned flow's later flowlets.

Defaults not in the book: flowlet gap 256 µs (Juniper DLB), EWMA time constant 100 µs,
threshold 0.7 of the link rate or 150 KB queued (the book's WRED min).
Durations are model seconds; sizes model bytes. Pure data; the agent's logic is
`switch_agent.balancer`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from emucore.timedil import parse_duration, parse_size
from emucore.wire.ether import mac_bytes
from emucore.yamlform import Form, parsed

MODES = ("ecmp", "flowlet", "spray")
HASH_FIELDS = ("5-tuple", "no-sport", "3-tuple", "dst-ip")
SPRAY = ("round-robin", "random", "least-queue")
ESTIMATORS = ("bytes", "queue")
ORDERS = ("route", "port", "nexthop")
DEFAULT_DLB_MAC = "00:cc:cc:cc:cc:cc"
#: keys of a spec (so ``hash=dst-ip`` is a setting and ``rail1=spray`` one switch's)
LB_KEYS = {"mode", "hash", "order", "flowlet_gap", "ewma_tau", "estimator", "util_threshold",
           "queue_threshold", "spray", "interfaces", "dlb_mac"}


@dataclass(frozen=True)
class Pin:
    """Flows from `src` to `dst` (IPv4 addresses) start on egress port `port`."""

    src: str
    dst: str
    port: str


@dataclass(frozen=True)
class LoadBalance:
    """One switch's load balancing; defaults are today's flow ECMP on the 5-tuple."""

    mode: str = "ecmp"
    hash: str = "5-tuple"
    order: str = "route"
    flowlet_gap_s: float = 256e-6
    estimator: str = "bytes"
    ewma_tau_s: float = 100e-6
    util_threshold: float = 0.7
    queue_threshold: int = 150_000
    spray: str = "round-robin"
    interfaces: tuple[str, ...] = ()
    dlb_mac: str | None = None
    pins: tuple[Pin, ...] = ()

    def __post_init__(self) -> None:
        for name, allowed in (("mode", MODES), ("hash", HASH_FIELDS), ("spray", SPRAY),
                              ("estimator", ESTIMATORS), ("order", ORDERS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if not 0 < self.flowlet_gap_s <= 1.0:
            raise ValueError(f"flowlet_gap: must be in (0, 1 s], got {self.flowlet_gap_s!r}")
        if not 0 < self.ewma_tau_s <= 1.0:
            raise ValueError(f"ewma_tau: must be in (0, 1 s], got {self.ewma_tau_s!r}")
        if not 0 < self.util_threshold <= 10:
            raise ValueError(f"util_threshold: must be in (0, 10], got {self.util_threshold!r}")
        if not 0 < self.queue_threshold:
            raise ValueError(f"queue_threshold: must be > 0 bytes, got {self.queue_threshold!r}")
        if self.dlb_mac is not None:
            try:
                mac_bytes(self.dlb_mac)
            except ValueError:
                raise ValueError(f"dlb_mac: not a MAC address, got {self.dlb_mac!r}") from None

    def applies_to(self, ports: list[str] | tuple[str, ...]) -> bool:
        """Does this group of equal-cost ports use `mode` (all members are DLB ports)?"""
        return not self.interfaces or all(p in self.interfaces for p in ports)

    # -- text forms ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-able form (the agent's start-up config; what from_dict reads)."""
        return LB.dict_of(self)

    @classmethod
    def from_dict(cls, data: dict, source: str = "lb") -> "LoadBalance":
        """Build from a mapping. Accepts the YAML spellings (`flowlet_gap: 256us`,
        `ewma_tau: 100us`, `queue_threshold: 150KB`) and the field names; unknown keys
        and bad values raise ValueError naming ``source.field``."""
        return LB.build(source, cls, data)

    def describe(self) -> str:
        """One line for `show` and the summary."""
        if self.mode == "ecmp":
            text = f"ecmp (hash {self.hash})"
        elif self.mode == "flowlet":
            thr = (f"{self.util_threshold:g} x rate" if self.estimator == "bytes"
                   else f"{self.queue_threshold} B queued")
            text = (f"flowlet (gap {self.flowlet_gap_s * 1e6:g} us, {self.estimator} "
                    f"estimator, threshold {thr})")
        else:
            text = f"spray ({self.spray})"
        if self.interfaces:
            text += f" on {', '.join(self.interfaces)}"
        if self.dlb_mac:
            text += f", DLB MAC {self.dlb_mac}"
        return text


def _number(val) -> float:
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise ValueError(f"a number, got {val!r}")
    return float(val)


def _ports(val) -> tuple[str, ...]:
    if isinstance(val, str):
        val = [v.strip() for v in val.split(",") if v.strip()]
    if not isinstance(val, (list, tuple)) or not all(isinstance(v, str) for v in val):
        raise ValueError(f"a list of port names, got {val!r}")
    return tuple(val)


def _pins(val) -> tuple[Pin, ...]:
    if not isinstance(val, (list, tuple)):
        raise ValueError(f"a list of {{src, dst, port}}, got {val!r}")
    out = []
    for i, p in enumerate(val):
        if not isinstance(p, dict) or set(p) != {"src", "dst", "port"}:
            raise ValueError(f"[{i}]: needs exactly src, dst, port, got {p!r}")
        out.append(Pin(str(p["src"]), str(p["dst"]), str(p["port"])))
    return tuple(out)


def _text(val) -> str:
    if not isinstance(val, str):
        raise ValueError(f"a string, got {val!r}")
    return val


_TEXT = parsed(_text)
#: the YAML form (`emucore.yamlform`); the field names flowlet_gap_s, ewma_tau_s are
#: accepted too (what to_dict wrote before)
LB = Form({"mode": "mode", "hash": "hash", "order": "order", "flowlet_gap": "flowlet_gap_s",
           "estimator": "estimator", "ewma_tau": "ewma_tau_s",
           "util_threshold": "util_threshold", "queue_threshold": "queue_threshold",
           "spray": "spray", "interfaces": "interfaces", "dlb_mac": "dlb_mac", "pins": "pins"},
          read={"mode": _TEXT, "hash": _TEXT, "order": _TEXT, "estimator": _TEXT,
                "spray": _TEXT, "flowlet_gap": parsed(parse_duration),
                "ewma_tau": parsed(parse_duration),
                "queue_threshold": parsed(lambda v: int(parse_size(v))),
                "util_threshold": parsed(_number), "interfaces": parsed(_ports),
                "pins": parsed(_pins), "dlb_mac": parsed(lambda v: v if v is None else _text(v))},
          write={"interfaces": list, "pins": lambda pins: [asdict(p) for p in pins]},
          aliases={"flowlet_gap_s": "flowlet_gap", "ewma_tau_s": "ewma_tau"})


def parse_lb(text: str, base: LoadBalance | None = None, source: str = "--lb") -> LoadBalance:
    """The command-line form: ``MODE[,key=value...]``, e.g. ``flowlet,flowlet_gap=100us``,
    ``spray,spray=least-queue``, ``ecmp,hash=dst-ip``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{source}: empty; give ecmp, flowlet or spray")
    d: dict = {}
    if "=" not in parts[0]:
        d["mode"] = parts.pop(0)
    for p in parts:
        key, sep, val = p.partition("=")
        if not sep:
            raise ValueError(f"{source}: {p!r} is not key=value")
        d[key.strip()] = val.strip()
    for num in ("util_threshold",):
        if num in d:
            try:
                d[num] = float(d[num])
            except ValueError:
                raise ValueError(f"{source}.{num}: a number, got {d[num]!r}") from None
    if "interfaces" in d:
        d["interfaces"] = d["interfaces"].replace("+", ",")
    over = LoadBalance.from_dict(d, source)
    if base is None:
        return over
    return replace(base, **{LB.field_of(k): getattr(over, LB.field_of(k)) for k in d})
