"""The start-up configuration of one emulated RDMA NIC process (`traffic.nic.main`).

Written as JSON by the orchestrator (`NicConfig.for_gpu` from a topologies.Fabric),
read and validated by the NIC before it opens a socket: addresses (book ch.12, the GPU
NIC's IP and MAC, its rail switch as gateway), the link's model rate and the
time-dilation factor (docs/ARCHITECTURE.md "Time: model world and lab world"), the
path MTU and RC knobs (book ch.9), the DCQCN profile and the PFC priority of RoCE data
(book ch.11: RoCE data in qos-group 3, paused by `pause pfc-cos 3`, Example 11-4), the
DSCP of the CNPs it sends (48, Example 11-1), where its event log goes
(docs/EVENTS.md), the run it belongs to (its tag names the shared memory registered
with it, emucore.runmark) and the run's seed (`emu run --seed`), from which `rng` makes
this NIC's own generators (docs/RUNNING.md "--seed").
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import random
import socket
from dataclasses import dataclass, field
from typing import Any

from emucore.qos.classify import ROCE_PRIORITY
from emucore.runmark import is_tag
from emucore.wire.dscp import DSCP_CNP
from emucore.wire.ib import PATH_MTUS
from traffic.nic.client import CM_PORT
from traffic.rc.rcconfig import DEFAULT_WINDOW, RcConfig
from traffic.uet.uetconfig import UetConfig
from traffic.uet.nscc import NsccConfig

__all__ = ["NicConfig", "TRANSPORTS"]

TRANSPORTS = ("roce", "uet")  #: the NIC's transports (issue 16: UET the second)


@dataclass(frozen=True)
class NicConfig:
    """Start-up configuration of one NIC process (written as JSON by FabricNet.start_nics)."""

    gpu: str
    ifname: str
    ip: str
    mac: str
    gateway_mac: str
    control: str                              #: Unix socket path
    model_bps: float = 200e9                  #: the NIC's link, model bit/s
    tdf: float = 5000.0
    neighbours: dict = field(default_factory=dict)  #: same-subnet ip -> mac
    prefix_len: int = 24
    mtu: int = 4096                           #: path MTU (payload bytes per packet)
    dcqcn: str = "paper"                      #: paper, nvidia or off
    timeout_s: float = 4.096e-6 * 2 ** 8      #: local ACK timeout, model s (IB exp. 8)
    retry_cnt: int = 7
    window: int = DEFAULT_WINDOW              #: packets in flight per QP (rc_config)
    ackreq_every: int = 16
    cm_port: int = CM_PORT
    seed: int | None = None                   #: the run's seed (`emu run --seed`): the
    #: NIC's draws come from `rng(...)`, Random(f"{seed}:{gpu}..."); None: the OS's entropy
    pfc_priority: int = ROCE_PRIORITY         #: the priority PFC pauses stop data on
    cnp_dscp: int = DSCP_CNP                  #: DSCP of the CNPs this NIC sends
    events_path: str | None = None            #: event log file (RUNDIR/events/<gpu>.jsonl)
    run: str = ""                             #: the emu run's tag ("" outside a run): it
    #: names the shared memory registered with this NIC (emucore.runmark), for `emu clean`
    transport: str = "roce"                   #: roce (RC over RoCEv2) or uet (issue 16)
    uet: dict = field(default_factory=dict)   #: UET knobs (traffic.uet.uetconfig.UetConfig:
    #: mode, ev, ack_every, reps_slots, trimming, base_rtt_s)
    trimmed_dscps: tuple = (-1, -1)           #: UET: the trimmed and trimmed-at-last-hop
    #: DSCPs a switch rewrites a trimmed packet to (-1: no trimming)
    job_id: int = 0                           #: UET: the SES job ID of this NIC's traffic
    cable_s: float = 0.0                      #: the NIC link's cable delay, model s (the
    #: fidelity guard's bound, for the data-path loop's wake-up grid: traffic.nic.datapath)

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        for name in ("gpu", "ifname", "ip", "mac", "gateway_mac", "control"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name}: must be a non-empty string, got {getattr(self, name)!r}")
        try:
            ipaddress.IPv4Address(self.ip)
        except ValueError as e:
            raise ValueError(f"ip: not an IPv4 address: {self.ip!r}") from e
        if self.mtu not in PATH_MTUS:
            raise ValueError(f"mtu: must be one of {PATH_MTUS}, got {self.mtu!r}")
        if self.dcqcn not in ("paper", "nvidia", "off"):
            raise ValueError(f"dcqcn: paper, nvidia or off, got {self.dcqcn!r}")
        for name in ("model_bps", "tdf", "timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name}: must be a positive number, got {v!r}")
        if not 0 <= self.retry_cnt <= 7:
            raise ValueError(f"retry_cnt: must be 0..7, got {self.retry_cnt!r}")
        if not 0 < self.cm_port < 65536:
            raise ValueError(f"cm_port: must be 1..65535, got {self.cm_port!r}")
        if not 0 <= self.pfc_priority <= 7:
            raise ValueError(f"pfc_priority: must be 0..7, got {self.pfc_priority!r}")
        if not (isinstance(self.cnp_dscp, int) and 0 <= self.cnp_dscp <= 63):
            raise ValueError(f"cnp_dscp: must be 0..63, got {self.cnp_dscp!r}")
        if self.events_path is not None and (not isinstance(self.events_path, str)
                                             or not self.events_path):
            raise ValueError(f"events_path: must be a non-empty string or None, "
                             f"got {self.events_path!r}")
        if self.run != "" and not is_tag(self.run):
            raise ValueError(f"run: a run tag (4 hex digits) or empty, got {self.run!r}")
        if not 0 <= self.prefix_len <= 32:
            raise ValueError(f"prefix_len: must be 0..32, got {self.prefix_len!r}")
        RcConfig(window=self.window, ackreq_every=self.ackreq_every)  # validates both
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport: {' or '.join(TRANSPORTS)}, got {self.transport!r}")
        self.uet_config()  # validates the UET knobs (names them)
        if len(self.trimmed_dscps) != 2 or not all(isinstance(d, int) and -1 <= d <= 63
                                                   for d in self.trimmed_dscps):
            raise ValueError(f"trimmed_dscps: two DSCPs 0..63 or -1, got {self.trimmed_dscps!r}")
        if not (isinstance(self.cable_s, (int, float)) and 0 <= self.cable_s < math.inf):
            raise ValueError(f"cable_s: model seconds >= 0, got {self.cable_s!r}")
        if not 0 <= self.job_id <= 0xFFFFFF:
            raise ValueError(f"job_id: must be 0..2^24-1, got {self.job_id!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or self.seed < 0):
            raise ValueError(f"seed: an integer >= 0 or None, got {self.seed!r}")

    def rng(self, stream: str = "") -> random.Random:
        """A generator of this NIC's for one `stream` of draws (e.g. "cm"), seeded by the
        run's seed, the GPU and the stream: `Random(f"{seed}:{gpu}")`, as a switch port's
        dice are `Random(f"{seed}:{ifname}")` (switch_agent/port.py), so two NICs of one run
        draw different QPNs and PSNs (hence UDP source ports and ECMP paths). A str seed is
        hashed with SHA-512 in CPython's `random.Random.seed` (version 2, Lib/random.py),
        not with `hash()`: the same in every process whatever PYTHONHASHSEED. Without a
        seed, the OS's entropy (a new draw every run)."""
        if self.seed is None:
            return random.Random()
        return random.Random(f"{self.seed}:{self.gpu}" + (f":{stream}" if stream else ""))

    def uet_config(self) -> UetConfig:
        """The UET transport's config: the NIC's MTU, RTO and retries, the knobs of `uet`."""
        u = dict(self.uet)
        nscc = {k: u.pop(k) for k in ("trimming", "base_rtt_s") if k in u}
        known = {"mode", "ev", "ack_every", "reps_slots", "ev_range", "rnr_s", "rnr_retries"}
        bad = sorted(set(u) - known)
        if bad:
            raise ValueError(f"uet: unknown knob(s) {bad} (known: "
                             f"{', '.join(sorted(known | {'trimming', 'base_rtt_s'}))})")
        if "rnr_s" in u:
            try:
                u["rnr_s"] = float(u["rnr_s"])
            except (TypeError, ValueError):
                raise ValueError(f"uet: rnr_s: model seconds, got {u['rnr_s']!r}") from None
        if "ev_range" in u:
            u["ev_range"] = tuple(u["ev_range"])
        return UetConfig(mtu=self.mtu, rto_s=self.timeout_s, retries=self.retry_cnt,
                         nscc=NsccConfig(**nscc), **u)

    @classmethod
    def from_json(cls, text: str) -> "NicConfig":
        """Parse and validate; unknown keys are errors naming them."""
        d = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"config: unknown field(s) {bad}")
        if "trimmed_dscps" in d:
            d["trimmed_dscps"] = tuple(d["trimmed_dscps"])
        return cls(**d)

    def to_json(self) -> str:
        """JSON text (the file the NIC process reads)."""
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def for_gpu(cls, fabric: Any, gpu: str, control: str, **kw: Any) -> "NicConfig":
        """The configuration of one GPU's NIC in a topologies.Fabric."""
        g = fabric.gpus[gpu]
        port = fabric.ports[(g.host, g.nic)]
        link = fabric.link_of(g.host, g.nic)
        nbrs = {p.ip: p.mac for p in fabric.gpus.values() if p.rail == g.rail and p.name != gpu}
        return cls(gpu=gpu, ifname=g.nic, ip=g.ip, mac=g.mac, gateway_mac=g.gateway_mac,
                   control=control, model_bps=link.model_bps, cable_s=link.delay_s,
                   tdf=fabric.tdf, neighbours=nbrs, prefix_len=int(port.ip.split("/")[1]), **kw)

    def next_hop_mac(self, ip: str) -> str:
        """Destination MAC towards `ip`: the peer's on the same subnet, else the gateway's."""
        mask = (0xFFFFFFFF << (32 - self.prefix_len)) & 0xFFFFFFFF
        a, b = (int.from_bytes(socket.inet_aton(x), "big") for x in (self.ip, ip))
        if (a ^ b) & mask == 0 and ip in self.neighbours:
            return self.neighbours[ip]
        return self.gateway_mac
