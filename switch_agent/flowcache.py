"""The agent's flow cache: every routed flow's decision (`switch_agent.balancer.Route`),
made once from the FIB's equal-cost next hops, the ECMP hash member and the
load-balancing mode (book ch.12 Figs 12-4..12-7), then found per frame by one lookup.

Two kinds of key: the common case, an IPv4 header without options (IHL 5) of a TCP or
UDP frame, is keyed by one slice of the frame (source and destination address and both
ports) in the dict of its protocol (`fast`), so it needs no `forward.flow_key` (~1 us);
everything else by its flow key (`flows`). The agent looks the key up itself (the hot
path) and asks `add` on a miss. A cache holds at most FLOW_CACHE_MAX flows and is
emptied when full (a UET flow sprays one flow per entropy value); a new FIB empties all.
"""

from __future__ import annotations

from switch_agent.balancer import Balancer, Route
from switch_agent.events import EventSink
from switch_agent.forward import Fib, ecmp_index, flow_key

#: flows remembered per cache before it is emptied (UET sprays: one flow per entropy value)
FLOW_CACHE_MAX = 65536


class FlowCache:
    """The decisions of the flows a switch routed, keyed as the module says."""

    def __init__(self, balancer: Balancer, sink: EventSink) -> None:
        self.balancer = balancer
        self.sink = sink
        self.flows: dict[bytes, Route] = {}  # flow_key -> decision
        #: IP protocol -> (frame[26:38] -> decision), for IHL 5 TCP/UDP frames
        self.fast: dict[int, dict[bytes, Route]] = {6: {}, 17: {}}
        self.flushes = 0  # a cache reached FLOW_CACHE_MAX and was emptied

    def add(self, cache: dict[bytes, Route], key: bytes, fib: Fib, frame: bytes,
            now: float) -> Route:
        """A missed flow: decide it with `fib` and remember it under `key` in `cache`."""
        if len(cache) >= FLOW_CACHE_MAX:  # bounded: UET sprays a flow per EV
            cache.clear()
            self.flushes += 1
        route = cache[key] = self.decide(fib, frame, now)
        return route

    def decide(self, fib: Fib, frame: bytes, now: float) -> Route:
        """A new flow's decision: the FIB's equal-cost next hops, the ECMP hash member,
        then the load-balancing mode (`switch_agent.balancer.Balancer`)."""
        members = fib.members(frame[30:34])
        if members.__class__ is str:  # the FIB's drop reason
            return Route(drop=members)
        key5 = flow_key(frame)
        n = len(members)
        idx = ecmp_index(key5, fib.seed, n, fib.hash_fields) if n > 1 else 0
        route = self.balancer.decide(members, key5, idx)
        path = route.path
        if n > 1 and path is not None and self.sink.enabled:
            self.sink.path(path.flow, path.port.name, now)
        return route

    def clear(self) -> None:
        """Forget every flow (a new FIB)."""
        self.flows.clear()
        for c in self.fast.values():
            c.clear()

    def __len__(self) -> int:
        return len(self.flows) + sum(map(len, self.fast.values()))
