"""The agent's test hook: drop a fraction of the frames it enqueues, before WRED, as if
lost at the egress (`AgentConfig.test_drop_rate`, the control request
{"cmd": "set", "test_drop_rate": r}); the tests of loss recovery use it.

`Agent.drop_rate` is a `DropRate`: setting it above 0 puts a `DropHook` in front of that
agent's `enqueue` (an instance attribute, so every enqueue of the pipeline goes through
it); setting 0 takes it away. The pipeline pays nothing while no hook is set. The dice are
`random.Random(test_drop_seed)`, drawn only while the rate is above 0, one per frame.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from switch_agent.events import EventSink
from switch_agent.ingress import IngressBuffers
from switch_agent.port import Port


class DropHook:
    """`enqueue` with a die in front: a frame it drops is counted, logged and released."""

    def __init__(self, enqueue: Callable, buffers: IngressBuffers, sink: EventSink,
                 seed: int) -> None:
        self.enqueue = enqueue  # the agent's own
        self.buffers = buffers
        self.sink = sink
        self.rate = 0.0
        self.random = random.Random(seed).random

    def __call__(self, out: Port, q: int, frame: bytes, ingress: Port | None, tos: int,
                 now: float, prio: int) -> None:
        """The agent's `enqueue`, but a fraction `rate` of the frames is dropped."""
        if self.random() < self.rate:
            out.drop("test_hook")
            self.sink.drop(out, q, "test_hook", now)
            if ingress is not None:
                self.buffers.release(ingress, prio, len(frame), now)
            return
        self.enqueue(out, q, frame, ingress, tos, now, prio)


class DropRate:
    """The `drop_rate` attribute of an agent class: the fraction its hook drops."""

    def __get__(self, agent, owner=None):
        if agent is None:
            return self
        hook = agent.__dict__.get("drop_hook")
        return hook.rate if hook is not None else 0.0

    def __set__(self, agent, rate: float) -> None:
        hook = agent.__dict__.get("drop_hook")
        if hook is None:
            if not rate:
                return
            hook = agent.__dict__["drop_hook"] = DropHook(
                type(agent).enqueue.__get__(agent), agent.buffers, agent.sink,
                agent.cfg.test_drop_seed)
        hook.rate = rate
        if rate:
            agent.__dict__["enqueue"] = hook
        else:
            agent.__dict__.pop("enqueue", None)
