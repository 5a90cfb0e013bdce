"""Switch QoS configuration for RoCEv2: typed, validated, frozen (book ch.11, Fig 11-8).

The book's DCQCN switch configuration (ch.11 "DCQCN Configuration", Examples 11-1..11-7)
as data, one type per pipeline stage, each beside its stage's model:
classification (`emucore.qos.classify.Classification`: DSCP -> qos-group; qos-group n
is egress queue n and PFC priority n, DSCP-based PFC), egress queuing
(`emucore.qos.queuing.Queuing`: strict queue 7, "bandwidth remaining percent", WRED + ECN
on queue 3 with `emucore.qos.wred.Wred`), network-qos and the PFC xOFF/xON/headroom
thresholds the book leaves implicit (`emucore.qos.pfc.Pfc`: no-drop priority 3), the PFC
watchdog and per-interface settings (`emucore.qos.interface`), MTU 9216 and the CNP
priority. `QosConfig` is the whole; its YAML form is `emucore.qos.dicts`, its warnings
`emucore.qos.advice`, its NX-OS form `emucore.qos.nxos` / `nxos_render`.

Default thresholds honour the book's rule of thumb **xON < WRED min < WRED max < xOFF**
(ECN acts before PFC): WRED 150 KB / 3000 KB (book) sits between xON = 100 KB and
xOFF = 3200 KB. xOFF is per ingress port and priority; 3.2 MB + 200 KB headroom per
lossless port-priority fits the ~100 MB shared buffer of a 64 x 400G switch, where a
port borrows from the shared pool. Headroom 200 KB covers 2 x one-way delay x rate +
2 MTU (`emucore.qos.pfc.headroom_needed`) at 400G up to ~1.8 us of cable. All sizes are
model bytes (identical in the lab, see emucore.timedil); durations are model seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from emucore.lbconfig import LoadBalance
from emucore.qos import advice as checks, dicts
from emucore.qos.classify import Classification
from emucore.qos.fields import NUM_QUEUES, int_in, prefixed
from emucore.qos.interface import InterfaceQos, Watchdog
from emucore.qos.pfc import Pfc
from emucore.qos.queuing import Queuing
from emucore.qos.cbfc import Cbfc
from emucore.qos.llr import Llr
from emucore.qos.trim import Trim
from emucore.yamlform import mapping

MTU_RANGE = (1500, 9216)  # NX-OS network-qos mtu range


@dataclass(frozen=True)
class QosConfig:
    """The whole switch QoS configuration; defaults = the book's (ch.11)."""

    name: str = "book"
    classification: Classification = field(default_factory=Classification)
    queuing: Queuing = field(default_factory=Queuing)
    pfc: Pfc = field(default_factory=Pfc)
    watchdog: Watchdog = field(default_factory=Watchdog)
    mtu: int = 9216
    cnp_dscp: int = 48
    cnp_priority: int = 7  # book: strict queue 7; NVIDIA NICs use 6
    default_interface: InterfaceQos = field(default_factory=InterfaceQos)
    interfaces: tuple[tuple[str, InterfaceQos], ...] = ()
    #: load balancing over equal-cost next hops (NX-OS `hardware profile dlb`, ch.12
    #: Example 12-1); None = flow ECMP (`emucore.lbconfig`)
    load_balance: LoadBalance | None = None
    #: packet trimming of UET frames (issue 16, `emucore.qos.trim`); None = never trim
    trim: Trim | None = None
    #: link-level retry, modelled (issue 16, `emucore.qos.llr`); None = off
    llr: Llr | None = None
    #: credit-based flow control on switch links, modelled (issue 16, `emucore.qos.cbfc`)
    cbfc: Cbfc | None = None

    def __post_init__(self) -> None:
        int_in("mtu", self.mtu, *MTU_RANGE)
        int_in("cnp_dscp", self.cnp_dscp, 0, 63)
        int_in("cnp_priority", self.cnp_priority, 0, NUM_QUEUES - 1)
        names = [n for n, _ in self.interfaces]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"interfaces: duplicate interface {sorted(dup)[0]!r}")

    # -- look-ups used by the agent ----------------------------------------------------
    def port(self, ifname: str) -> InterfaceQos:
        """Settings of one port: its own block, else the default."""
        for name, iq in self.interfaces:
            if name == ifname:
                return iq
        return self.default_interface

    def port_pfc(self, ifname: str) -> Pfc:
        """The PFC settings of one port: no no-drop priority with `mode off`."""
        if self.port(ifname).pfc_mode == "off":
            return replace(self.pfc, no_drop=frozenset())
        return self.pfc

    def watchdog_on(self, ifname: str) -> bool:
        """Is the PFC watchdog active on this port (global and per interface)?"""
        return self.watchdog.enabled and self.port(ifname).watchdog

    # -- validation ---------------------------------------------------------------------
    def validate(self, ports: Iterable[str] | None = None,
                 links: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
        """Warnings about legal but dubious settings (errors were raised at construction);
        `ports` names the switch's ports, `links` maps a port to (model bit/s, one-way
        cable delay in model s) for the headroom check."""
        c, q = self.classification, self.queuing
        return (checks.overlapping_classes(c) + checks.ecn_before_pfc(self.pfc, q)
                + checks.limits_below_wred_max(q) + checks.bandwidth(c, q)
                + checks.cnp_path(c, q, self.cnp_dscp, self.cnp_priority)
                + checks.interfaces(c, self.default_interface, self.interfaces, ports)
                + checks.headroom(self.pfc, self.mtu, links or {}))

    # -- (de)serialisation --------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain JSON-able dict in the YAML schema (sizes in bytes, durations in s)."""
        return {
            "name": self.name,
            "classification": dicts.classification_dict(self.classification),
            "queuing": dicts.queuing_dict(self.queuing),
            "pfc": dicts.pfc_dict(self.pfc),
            "watchdog": dicts.watchdog_dict(self.watchdog),
            "mtu": self.mtu,
            "cnp": {"dscp": self.cnp_dscp, "priority": self.cnp_priority},
            "interfaces": {"default": dicts.interface_dict(self.default_interface),
                           **{n: dicts.interface_dict(iq) for n, iq in self.interfaces}},
            **({"load_balance": self.load_balance.to_dict()} if self.load_balance else {}),
            **({"trim": self.trim.to_dict()} if self.trim else {}),
            **({"llr": self.llr.to_dict()} if self.llr else {}),
            **({"cbfc": self.cbfc.to_dict()} if self.cbfc else {}),
        }

    @classmethod
    def from_dict(cls, data: dict, source: str = "qos") -> "QosConfig":
        """Build from the YAML schema; unknown keys and bad values name the field."""
        d = mapping(source, data, dicts.TOP_KEYS)
        kw: dict = {k: d[k] for k in ("name", "mtu") if k in d}
        parts = {"classification": dicts.classification_from, "queuing": dicts.queuing_from,
                 "pfc": dicts.pfc_from, "watchdog": dicts.watchdog_from}
        for key, build in parts.items():
            if key in d:
                kw[key] = build(f"{source}.{key}", d[key])
        if "cnp" in d:
            kw.update(dicts.cnp_from(f"{source}.cnp", d["cnp"]))
        if "interfaces" in d:
            built = dicts.interfaces_from(f"{source}.interfaces", d["interfaces"])
            if "default" in built:
                kw["default_interface"] = built.pop("default")
            kw["interfaces"] = tuple(built.items())
        for key, part in (("load_balance", LoadBalance), ("trim", Trim), ("llr", Llr),
                          ("cbfc", Cbfc)):
            if d.get(key) not in (None, False):
                kw[key] = part.from_dict(d[key], f"{source}.{key}")
        return prefixed(source, cls, **kw)
