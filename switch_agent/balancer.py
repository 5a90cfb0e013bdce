"""Load balancing in the switch agent: flow ECMP, flowlet adaptive routing, per-packet
spraying, and the per-flow path accounting they share (book ch.12 Figs 12-4..12-7,
ch.10 Fig 10-5; configuration and rules in `emucore.lbconfig`).

Pure: no sockets, no clock. A *member* is one equal-cost next hop as the agent resolved
it: an egress port object and the 14-byte Ethernet header to write. The port object
only needs `dre` (a `Dre` or None), `queues.bytes` and `name` — tests pass small fakes.

* `Path` — one flow's way out of one port, with the packets and bytes the flow sent
  there (the per-port per-flow accounting). In ECMP mode the agent's flow cache holds
  the flow's single `Path`; in flowlet and spray modes a `FlowLb`, which holds one
  `Path` per member the flow used and picks one per packet.
* `Route` — a flow's decision as the agent's flow cache holds it: one `Path`, a
  `FlowLb` or a drop reason, in its own slot each.
* `Group` — the members of one equal-cost group and what the flows over it share: the
  round-robin pointer, the random generator, the rule's thresholds in lab units. Each
  group draws from a stream of its own, named by the run's seed, the switch and the
  members (`group_seed`), so no two groups of a run, and no two seeds, share draws.
* `Dre` — CONGA's discounting rate estimator: bytes put on a port, decaying with time
  constant tau; `util` is that rate against the link rate.

All times are lab seconds (the agent's clock); `Group` converts the model-time knobs.
"""

from __future__ import annotations

import math
import random
import socket
import struct
from collections.abc import Callable

from emucore.lbconfig import LoadBalance

#: stop recording new flows' paths past this many (a fuzzer's random flows)
MAX_TRACKED_PATHS = 100_000
SPRAY_SAMPLE = 256  #: one `spray` event per this many packets of a sprayed flow


class Dre:
    """Discounting rate estimator: x decays as exp(-dt / tau); util = x / (rate x tau)."""

    __slots__ = ("x", "t", "tau", "cap")

    def __init__(self, lab_bytes_per_s: float, tau_lab_s: float) -> None:
        self.x = 0.0
        self.t = 0.0
        self.tau = tau_lab_s
        self.cap = lab_bytes_per_s * tau_lab_s

    def add(self, nbytes: int, now: float) -> None:
        """Count `nbytes` put on the port at `now`."""
        self.x = self.x * math.exp((self.t - now) / self.tau) + nbytes if now > self.t \
            else self.x + nbytes
        self.t = max(self.t, now)

    def util(self, now: float) -> float:
        """The estimated rate at `now` as a fraction of the link rate (may exceed 1
        when more is offered than the port sends)."""
        x = self.x * math.exp((self.t - now) / self.tau) if now > self.t else self.x
        return x / self.cap if self.cap > 0 else 0.0


class Path:
    """A flow's route out of one port: egress port, L2 header, what the flow sent there."""

    __slots__ = ("port", "l2", "packets", "bytes", "flow")

    def __init__(self, port, l2: bytes, flow: str = "") -> None:
        self.port = port
        self.l2 = l2
        self.packets = 0
        self.bytes = 0
        self.flow = flow


class Route:
    """A flow's decision, cached per flow: `path`, its one way out; else `balanced`, a
    `FlowLb` picking a Path per packet (flowlet, spray); else `drop`, why its frames are
    dropped (no route, no neighbour). The common case reads one slot: `path`."""

    __slots__ = ("path", "balanced", "drop")

    def __init__(self, path: Path | None = None, balanced: FlowLb | None = None,
                 drop: str | None = None) -> None:
        self.path = path
        self.balanced = balanced
        self.drop = drop


def flow_label(key5: bytes) -> str:
    """Human form of a flow key: ``10.0.1.11:49152>10.0.2.14:4791/udp``."""
    src, dst = socket.inet_ntoa(key5[:4]), socket.inet_ntoa(key5[4:8])
    proto = {6: "tcp", 17: "udp", 1: "icmp"}.get(key5[8], str(key5[8]))
    if len(key5) >= 13:
        sp, dp = struct.unpack("!HH", key5[9:13])
        return f"{src}:{sp}>{dst}:{dp}/{proto}"
    return f"{src}>{dst}/{proto}"


def group_seed(seed: int, switch: str, names: tuple[str, ...]) -> str:
    """The seed of one group's generator: ``"<seed>:<switch>:lb:<member,member,...>"``,
    as a switch port's WRED dice are ``Random(f"{seed}:{ifname}")`` (switch_agent.port).
    A str seed goes through SHA-512 in CPython's `random.Random.seed` (version 2,
    Lib/random.py), so the stream is the same in every process whatever its
    PYTHONHASHSEED, and seeds or groups that differ give unrelated streams (an int
    `seed + k` made seed 2's first group draw what seed 1's second drew)."""
    return f"{seed}:{switch}:lb:{','.join(names)}"


class Group:
    """The members of one equal-cost group under a flowlet or spray rule; `seed` seeds
    its generator (`group_seed` when a `Balancer` makes it)."""

    def __init__(self, members: list[tuple[object, bytes]], lb: LoadBalance, tdf: float,
                 seed: int | str = 1) -> None:
        self.members = members
        self.lb = lb
        self.n = len(members)
        self.spray = lb.mode == "spray"
        self.policy = lb.spray
        self.gap = lb.flowlet_gap_s * tdf  # lab seconds
        self.use_queue = lb.estimator == "queue"
        self.util_threshold = lb.util_threshold
        self.queue_threshold = lb.queue_threshold
        self.rr = 0
        self.rng = random.Random(seed).randrange
        #: on_path(flow, port name, previous flowlet's port name or "", load, now)
        self.on_path: Callable | None = None
        #: on_spray(flow, port name, n, now): the n-th packet of a sprayed flow, sampled
        #: (n = 1, 1 + SPRAY_SAMPLE, ...; issue 13 "sampled packets when spraying")
        self.on_spray: Callable | None = None

    def load(self, i: int, now: float) -> float:
        """Member i's load in units of its threshold (> 1: over the threshold)."""
        port = self.members[i][0]
        if self.use_queue:
            return port.queues.bytes / self.queue_threshold
        dre = port.dre
        return dre.util(now) / self.util_threshold if dre is not None else 0.0

    def least_loaded(self, now: float) -> int:
        """The member with the least load (the lowest index on a tie)."""
        loads = [self.load(i, now) for i in range(self.n)]
        return loads.index(min(loads))

    def spray_pick(self) -> int:
        """The member of the next sprayed packet."""
        if self.policy == "round-robin":
            i = self.rr
            self.rr = (i + 1) % self.n
            return i
        if self.policy == "random":
            return self.rng(self.n)
        qs = [m[0].queues.bytes for m in self.members]  # least-queue, round-robin on ties
        low = min(qs)
        for k in range(self.n):
            i = (self.rr + k) % self.n
            if qs[i] == low:
                self.rr = (i + 1) % self.n
                return i
        return 0  # unreachable


class FlowLb:
    """One flow over a `Group`: its current member, when it was last seen, its Paths."""

    __slots__ = ("group", "flow", "cur", "last", "paths", "flowlets", "moves", "track",
                 "sprayed")

    def __init__(self, group: Group, first: int, flow: str,
                 track: Callable[[Path], object] | None = None) -> None:
        self.group = group
        self.flow = flow
        self.cur = first  # the hash (or pinned) member: where a first flowlet starts
        self.last = -math.inf
        self.paths: list[Path | None] = [None] * group.n
        self.flowlets = 0
        self.moves = 0
        self.track = track
        self.sprayed = 0  # packets sprayed (spray mode)

    def path(self, i: int) -> Path:
        """The flow's Path through member i (made on first use)."""
        p = self.paths[i]
        if p is None:
            port, l2 = self.group.members[i]
            p = self.paths[i] = Path(port, l2, self.flow)
            if self.track is not None:
                self.track(p)
        return p

    def pick(self, now: float) -> Path:
        """The Path of this flow's next packet at lab time `now`."""
        g = self.group
        if g.spray:
            i = g.spray_pick()
            self.sprayed = n = self.sprayed + 1
            if n % SPRAY_SAMPLE == 1 and g.on_spray is not None:
                g.on_spray(self.flow, g.members[i][0].name, n, now)
            p = self.paths[i]
            return p if p is not None else self.path(i)
        if now - self.last > g.gap:  # a new flowlet
            prev = self.cur
            if g.load(prev, now) > 1.0:
                best = g.least_loaded(now)
                if g.load(best, now) < g.load(prev, now):
                    self.cur = best
            self.flowlets += 1
            if self.cur != prev:
                self.moves += 1
            if g.on_path is not None:
                g.on_path(self.flow, g.members[self.cur][0].name,
                          g.members[prev][0].name if self.flowlets > 1 else "",
                          g.load(self.cur, now), now)
        self.last = now
        p = self.paths[self.cur]
        return p if p is not None else self.path(self.cur)

    def all_paths(self) -> list[Path]:
        """The Paths this flow used."""
        return [p for p in self.paths if p is not None]


class Balancer:
    """A switch's load-balancing decisions and the paths they made.

    `decide` is called once per flow (the agent caches the answer per flow): a `Route`
    with a `Path` when the flow has one way out (one next hop, ECMP mode, or a group
    outside the DLB interfaces), with a `FlowLb` when the group is balanced per flowlet
    or per packet. Every Path made is remembered (up to MAX_TRACKED_PATHS) for `paths`.
    """

    def __init__(self, lb: LoadBalance, ports: dict, tdf: float, seed: int = 1,
                 switch: str = "") -> None:
        self.lb = lb
        self.ports = ports
        self.tdf = tdf
        self.seed = seed
        self.switch = switch  #: names the groups' streams (`group_seed`)
        self.dlb_l2 = None if lb.dlb_mac is None else bytes.fromhex(lb.dlb_mac.replace(":", ""))
        self.groups: dict[tuple[str, ...], Group] = {}
        self.tracked: list[Path] = []
        self.flows: list[FlowLb] = []
        self.untracked = 0
        self.on_path: Callable | None = None  # given to every Group (flowlet events)
        self.on_spray: Callable | None = None  # given to every Group (sampled sprays)
        self.pins = {(socket.inet_aton(p.src), socket.inet_aton(p.dst)): p.port for p in lb.pins}

    def _path(self, port, l2: bytes, flow: str) -> Path:
        p = Path(port, l2, flow)
        self._track(p)
        return p

    def decide(self, members: list, key5: bytes, index: int) -> Route:
        """The decision for a flow with key `key5` over resolved `members` (NextHops in
        member order); `index` is the ECMP hash's member. Pins override the hash."""
        eth = b"\x08\x00"
        flow = flow_label(key5)
        pin = self.pins.get((key5[:4], key5[4:8])) if self.pins else None
        if pin is not None:
            for i, nh in enumerate(members):
                if nh.ifname == pin:
                    index = i
                    break
        names = tuple(nh.ifname for nh in members)
        lb = self.lb
        if len(members) == 1:  # no choice: not tracked
            nh = members[0]
            return Route(Path(self.ports[nh.ifname], nh.header + eth, flow))
        if lb.mode == "ecmp" or not lb.applies_to(names):
            nh = members[index]
            return Route(self._path(self.ports[nh.ifname], nh.header + eth, flow))
        g = self.groups.get(names)
        if g is None:
            dmac = self.dlb_l2
            ms = [(self.ports[nh.ifname], (dmac or nh.dst_mac) + nh.src_mac + eth) for nh in members]
            g = self.groups[names] = Group(ms, lb, self.tdf,
                                           group_seed(self.seed, self.switch, names))
            g.on_path = self.on_path
            g.on_spray = self.on_spray
        f = FlowLb(g, index, flow, self._track)
        if len(self.flows) < MAX_TRACKED_PATHS:
            self.flows.append(f)
        return Route(balanced=f)

    def _track(self, p: Path) -> None:
        if len(self.tracked) < MAX_TRACKED_PATHS:
            self.tracked.append(p)
        else:
            self.untracked += 1

    def paths(self) -> list[dict]:
        """Per flow and egress port, for flows that had a choice of next hops: packets
        and bytes (the path accounting; a flow cached twice, across a FIB change, is
        summed)."""
        acc: dict[tuple[str, str], list[int]] = {}
        for p in self.tracked:
            if p.packets:
                a = acc.setdefault((p.flow, p.port.name), [0, 0])
                a[0] += p.packets
                a[1] += p.bytes
        return [{"flow": f, "port": port, "packets": n, "bytes": b}
                for (f, port), (n, b) in acc.items()]

    def flowlet_counts(self) -> list[dict]:
        """Flowlets and moves per balanced flow."""
        return [{"flow": f.flow, "flowlets": f.flowlets, "moves": f.moves}
                for f in self.flows if f.flowlets]
