"""Egress queuing configuration: `policy-map type queuing` (book ch.11, Example 11-3).

Eight queues, index = queue number = qos-group: ``c-out-8q-q7 priority level 1``
(strict, for CNPs), ``c-out-8q-q3 bandwidth remaining percent 50`` + WRED/ECN
(`emucore.qos.wred.Wred`), queue 0 (class-default) 50 % of what the strict queue leaves,
the others 0 % - the NX-OS RoCE template the book's example abbreviates with "...".
The stage that runs it is `switch_agent.queues.PortQueues` (strict + DWRR).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emucore.qos.fields import NUM_QUEUES, QUEUE_LIMIT_BYTES, flag, int_in, normalise, size
from emucore.qos.wred import Wred


@dataclass(frozen=True)
class QueueConfig:
    """One egress queue (`class type queuing c-out-8q-qN`, Example 11-3)."""

    strict: bool = False  # priority level 1
    bandwidth_percent: int = 0  # bandwidth remaining percent (a DWRR weight)
    wred: Wred | None = None  # random-detect; None = tail drop only
    limit_bytes: int = QUEUE_LIMIT_BYTES  # tail-drop threshold of the queue

    def __post_init__(self) -> None:
        flag("strict", self.strict)
        int_in("bandwidth_percent", self.bandwidth_percent, 0, 100)
        normalise(self, "limit_bytes", size("limit_bytes", self.limit_bytes))
        if self.limit_bytes == 0:
            raise ValueError(f"limit_bytes: must be > 0, got {self.limit_bytes!r}")


def book_queues() -> tuple[QueueConfig, ...]:
    """Example 11-3: queue 7 strict, queues 0 and 3 50 % each, queue 3 WRED-ECN."""
    q = [QueueConfig() for _ in range(NUM_QUEUES)]
    q[0] = QueueConfig(bandwidth_percent=50)
    # the no-drop queue must hold N ingress ports x (xOFF + headroom) without tail drop:
    # 24 MB covers a 6:1 incast at the default 3.2 MB + 0.2 MB per ingress port
    q[3] = QueueConfig(bandwidth_percent=50, wred=Wred.book(), limit_bytes=24_000_000)
    q[7] = QueueConfig(strict=True)
    return tuple(q)


@dataclass(frozen=True)
class Queuing:
    """`policy-map type queuing`: 8 queues, index = queue number = qos-group."""

    policy: str = "QOS_EGRESS_PORT"
    queues: tuple[QueueConfig, ...] = field(default_factory=book_queues)

    def __post_init__(self) -> None:
        normalise(self, "queues", tuple(self.queues))
        if len(self.queues) != NUM_QUEUES:
            raise ValueError(f"queues: need exactly {NUM_QUEUES}, got {len(self.queues)}")
        total = sum(q.bandwidth_percent for q in self.queues if not q.strict)
        if total > 100:
            raise ValueError(f"queues.bandwidth_percent: non-strict queues sum to "
                             f"{total} %, more than 100 %")

    @classmethod
    def plain(cls, limit_bytes: int = QUEUE_LIMIT_BYTES) -> "Queuing":
        """QoS off (plain forwarding): everything in queue 0, tail drop only."""
        return cls("plain", tuple(QueueConfig(bandwidth_percent=100 if i == 0 else 0,
                                              limit_bytes=limit_bytes)
                                  for i in range(NUM_QUEUES)))

    @property
    def strict(self) -> frozenset[int]:
        """Strict-priority queues."""
        return frozenset(i for i, q in enumerate(self.queues) if q.strict)
