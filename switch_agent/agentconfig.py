"""The switch agent's start-up configuration: JSON written by the orchestrator.

The orchestrator (emu.realise.net) knows the fabric description; the agent only needs its own
ports (with model and lab rates from emucore.timedil), its SVI/VLAN layer-2 table, its ECMP
seed, the seed of its random draws and where to listen for control requests. Routes and
neighbours are NOT here: the agent reads them from its namespace's kernel, the control plane.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from emucore.qos.fields import QUEUE_LIMIT_BYTES


@dataclass(frozen=True)
class PortConfig:
    """One switch port."""

    ifname: str
    mac: str
    model_bps: float
    lab_bps: float  # math.inf = unshaped
    delay_lab_s: float = 0.0
    vlan: int | None = None
    peer: str = ""
    edge: bool = False  # the peer is a host: trimming here is at the last hop (UET)


@dataclass(frozen=True)
class AgentConfig:
    """Everything an agent process needs at start."""

    name: str
    tdf: float
    control: str  # path of the control Unix socket
    ports: tuple[PortConfig, ...]
    svi: dict[str, dict[str, str]] = field(default_factory=dict)  # svi dev -> {mac: port}
    ecmp_seed: int = 0
    queue_limit_bytes: int = QUEUE_LIMIT_BYTES  # per queue with QoS off (model = lab bytes)
    mtu: int = 9216
    test_drop_rate: float = 0.0  # test hook: drop this fraction of forwarded frames
    #: the seed of every random draw the agent makes (`emu run --seed`, default 1): each
    #: port's WRED dice `Random(f"{seed}:{ifname}")`, the test-drop die `Random(seed)`,
    #: the balancer's groups (spray, flowlet: `balancer.group_seed`), a degraded link's
    #: losses `Random(f"{seed}:{ifname}:impair")`. Named for its first use (the test
    #: hook, the control requests and the C pipeline's hand-over read it by this name)
    test_drop_seed: int = 1
    qos: dict | None = None  # QosConfig.to_dict(); None = plain forwarding (one FIFO)
    lldp_interval_lab_s: float = 1.0  # LLDP/DCBX advertisement period (lab seconds)
    #: ports that send no LLDPDU (NX-OS `no lldp transmit`; received ones are still read)
    lldp_off: tuple[str, ...] = ()
    #: the event log (docs/EVENTS.md, RUNDIR/events/<node>.jsonl); None = no events
    events_path: str | None = None
    #: load balancing (`emucore.lbconfig.LoadBalance.to_dict()`); None = the QoS config's
    #: (NX-OS `hardware profile dlb`), else flow ECMP on the 5-tuple
    lb: dict | None = None
    #: DLB virtual next-hop MACs to accept as our own (every switch of a run that
    #: balances with a DLB MAC, ch.12 Example 12-1)
    dlb_macs: tuple[str, ...] = ()
    #: SVI -> the agent's end of its CPU port (emu.realise.netplan `svi_cpu`): the frames
    #: the switch's kernel sends into that VLAN arrive there (`Agent.from_kernel`)
    svi_cpu: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if not self.ports:
            raise ValueError("ports: an agent needs at least one port")
        for p in self.ports:
            if not (p.lab_bps > 0):
                raise ValueError(f"ports[{p.ifname}].lab_bps: must be > 0, got {p.lab_bps!r}")
            if p.delay_lab_s < 0:
                raise ValueError(f"ports[{p.ifname}].delay_lab_s: must be >= 0")
        if isinstance(self.test_drop_seed, bool) or not isinstance(self.test_drop_seed, int) \
                or self.test_drop_seed < 0:
            raise ValueError(f"test_drop_seed: an integer >= 0, got {self.test_drop_seed!r}")
        if not 0.0 <= self.test_drop_rate < 1.0:
            raise ValueError(f"test_drop_rate: must be in [0, 1), got {self.test_drop_rate!r}")
        if not self.lldp_interval_lab_s > 0:
            raise ValueError(f"lldp_interval_lab_s: must be > 0, got {self.lldp_interval_lab_s!r}")
        names = {p.ifname for p in self.ports}
        for ifname in self.lldp_off:
            if ifname not in names:
                raise ValueError(f"lldp_off: {ifname!r} is not a port of {self.name}")
        for svi in self.svi_cpu:
            if svi not in self.svi:
                raise ValueError(f"svi_cpu: {svi!r} is not an SVI of {self.name}")
        if self.queue_limit_bytes <= 0:
            raise ValueError(f"queue_limit_bytes: must be > 0, got {self.queue_limit_bytes!r}")

    def to_json(self) -> str:
        """Serialise (infinite rates become null)."""
        d = asdict(self)
        for p in d["ports"]:
            if math.isinf(p["lab_bps"]):
                p["lab_bps"] = None
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "AgentConfig":
        """Parse what to_json wrote."""
        d = json.loads(text)
        ports = tuple(PortConfig(**{**p, "lab_bps": math.inf if p["lab_bps"] is None
                                    else p["lab_bps"]}) for p in d.pop("ports"))
        d["lldp_off"] = tuple(d.get("lldp_off", ()))
        d["dlb_macs"] = tuple(d.get("dlb_macs", ()))
        cfg = cls(ports=ports, **d)
        cfg.validate()
        return cfg
