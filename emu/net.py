"""Realise a `topologies.Fabric` with Mininet nodes, pyroute2 netlink and switch agents.

Mininet provides the nodes (a shell per namespace, `popen` inside it, the CLI); the
description/realisation split follows Mininet's Topo (STYLE.md). What differs from
stock Mininet, because this kernel has no Open vSwitch and the switches are ours:
* `AgentSwitch` is a namespace that runs `python -m switch_agent` (the data plane);
  its kernel holds addresses, static neighbours and (ECMP) routes, never forwarding.
* `FrontendSwitch` is a namespace with a plain Linux bridge (the frontend network is
  not the object of study, ARCHITECTURE.md).
* `NetlinkLink` creates each veth pair directly inside the two namespaces with
  pyroute2, so no interface ever appears in the root namespace.
* Every namespace is named ``emu-<tag>-<node>`` (emu.nsutil) so `emu clean` removes
  exactly what a run made.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import sys
import time
from pathlib import Path

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, Node, Switch
from mininet.topo import Topo
from pyroute2 import IPRoute
from pyroute2.ethtool import Ethtool

from emu import nsutil
from fabric.timedil import TimeDilation
from switch_agent import control
from switch_agent.config import AgentConfig, PortConfig
from topologies.model import FRONTEND, HOST, SWITCH, Fabric

log = logging.getLogger("emu.net")

NUD_PERMANENT = 0x80
HOST_TABLE_BASE = 100  # per-NIC routing table = 100 + rail
OFFLOADS_OFF = ("tx-checksum-ip-generic", "tx-checksumming", "tcp-segmentation-offload",
                "generic-segmentation-offload", "generic-receive-offload",
                "large-receive-offload", "scatter-gather", "tx-scatter-gather",
                "rx-gro-hw", "rx-checksum")


class EmuNodeMixin:
    """Names the node's namespace ``emu-<tag>-<node>`` once its shell runs."""

    tag = ""

    def startShell(self, *args, **kwargs):  # noqa: N802 (Mininet API)
        """Start the Mininet shell, then attach a name to its namespace."""
        super().startShell(*args, **kwargs)
        nsutil.attach(nsutil.ns_name(self.tag, self.name), self.pid)

    @property
    def netns(self) -> str:
        """This node's namespace name."""
        return nsutil.ns_name(self.tag, self.name)


class EmuHost(EmuNodeMixin, Host):
    """A GPU server: one namespace, one NIC per GPU, a frontend interface."""

    def configDefault(self, **_params):  # noqa: N802 (Mininet API)
        """Addresses are installed by `configure` with pyroute2, not ifconfig."""


class AgentSwitch(EmuNodeMixin, Switch):
    """A switch whose data plane is `switch_agent` running in its namespace."""

    agent_config: AgentConfig | None = None
    agent_log: str = os.devnull

    def __init__(self, name, **params):
        self.agent = None
        super().__init__(name, **params)

    def start(self, controllers):
        """Launch the agent process."""
        assert self.agent_config is not None
        cfg_path = Path(self.agent_config.control).with_suffix(".json")
        cfg_path.write_text(self.agent_config.to_json())
        argv = [sys.executable, "-m", "switch_agent", str(cfg_path), "--log", self.agent_log]
        self.agent = self.popen(argv, cwd=str(Path(__file__).resolve().parent.parent),
                                stdin=None, stdout=None, stderr=None)

    def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet API)
        """Stop the agent (SIGTERM, then SIGKILL)."""
        if self.agent and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(3)
            except Exception:
                self.agent.kill()
                self.agent.wait()
        super().stop(deleteIntfs)


class FrontendSwitch(EmuNodeMixin, Switch):
    """The frontend network: a Linux bridge in its own namespace."""

    def start(self, controllers):
        """Bridge all ports."""
        with nsutil.in_netns(self.netns), IPRoute() as ipr:
            ipr.link("add", ifname="br0", kind="bridge")
            br = ipr.link_lookup(ifname="br0")[0]
            for intf in self.intfList():
                if intf.name == "lo":
                    continue
                idx = ipr.link_lookup(ifname=intf.name)[0]
                ipr.link("set", index=idx, master=br, state="up")
            ipr.link("set", index=br, state="up")

    def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet API)
        """Nothing to stop: the bridge goes with the namespace."""
        super().stop(deleteIntfs)


class NetlinkLink(Link):
    """A veth pair created directly inside both namespaces (pyroute2, IFLA_NET_NS_PID)."""

    @classmethod
    def makeIntfPair(cls, intfname1, intfname2, addr1=None, addr2=None,  # noqa: N802
                     node1=None, node2=None, deleteIntfs=True):
        """Create the pair; MACs set at creation."""
        assert node1 is not None and node2 is not None
        peer = {"ifname": intfname2, "net_ns_pid": node2.pid}
        if addr2:
            peer["address"] = addr2
        kwargs = {"ifname": intfname1, "kind": "veth", "peer": peer, "net_ns_pid": node1.pid}
        if addr1:
            kwargs["address"] = addr1
        with IPRoute() as ipr:
            ipr.link("add", **kwargs)


class FabricTopo(Topo):
    """Mininet Topo adapter of a Fabric description (built without root)."""

    def build(self, fabric: Fabric, classes: dict):  # noqa: D102
        for i, n in enumerate(fabric.nodes.values(), start=1):
            if n.kind == HOST:
                self.addHost(n.name, cls=classes[HOST])
            else:
                self.addSwitch(n.name, cls=classes[n.kind], dpid=f"{i:016x}",
                               inNamespace=True)
        for lk in fabric.links:
            self.addLink(lk.a.node, lk.b.node, intfName1=lk.a.ifname, intfName2=lk.b.ifname,
                         addr1=lk.a.mac, addr2=lk.b.mac, cls=NetlinkLink)


def new_tag() -> str:
    """A fresh 4-hex-digit run tag not used by a present namespace or run."""
    used = {nsutil.NS_PATTERN.match(n).group(1) for n in nsutil.emu_namespaces()}
    used |= set(nsutil.run_states())
    while True:
        t = secrets.token_hex(2)
        if t not in used:
            return t


class FabricNet:
    """One realised fabric: build, configure, start agents, tear down.

    Use as a context manager; teardown runs on errors and Ctrl-C too.
    """

    def __init__(self, fabric: Fabric, run_dir: Path | None = None, tag: str | None = None,
                 shaping: bool = True, test_drop_rate: float = 0.0,
                 switch_kind: str = "agent", qos=None) -> None:
        if switch_kind not in ("agent", "bridge"):
            raise ValueError(f"switch_kind: 'agent' or 'bridge', got {switch_kind!r}")
        self.switch_kind = switch_kind
        self.fabric = fabric
        self.tag = tag or new_tag()
        self.td = TimeDilation(fabric.tdf)
        self.state_dir = nsutil.STATE_DIR / self.tag
        self.run_dir = run_dir
        self.shaping = shaping
        self.test_drop_rate = test_drop_rate
        self.net: Mininet | None = None
        #: switch QoS (a fabric.qos.config.QosConfig); None = plain forwarding
        self.qos = qos
        self.host_procs: list = []
        #: GPU name -> control socket of its NIC process (start_nics)
        self.nic_sockets: dict[str, str] = {}
        self._nic_procs: list = []

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self) -> "FabricNet":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Build namespaces and links, configure them, start the agents."""
        if os.geteuid() != 0:
            raise PermissionError("building a fabric needs root (namespaces, raw sockets): "
                                  "run with sudo")
        nsutil.write_state(self.tag, {"tag": self.tag, "pid": os.getpid(),
                                      "fabric": self.fabric.name, "created": time.time(),
                                      "namespaces": [nsutil.ns_name(self.tag, n)
                                                     for n in self.fabric.nodes]})
        setLogLevel("warning")
        classes = {}
        switch_cls = AgentSwitch if self.switch_kind == "agent" else FrontendSwitch
        for kind, base in ((HOST, EmuHost), (SWITCH, switch_cls), (FRONTEND, FrontendSwitch)):
            classes[kind] = type(base.__name__, (base,), {"tag": self.tag})
        topo = FabricTopo(fabric=self.fabric, classes=classes)
        self.net = Mininet(topo=topo, controller=None, build=False, autoSetMacs=False,
                           autoStaticArp=False, link=NetlinkLink, waitConnected=False)
        self.net.build()
        for n in self.fabric.nodes.values():
            self.configure(n.name)
        for sw in self.fabric.switches() if self.switch_kind == "agent" else ():
            node = self.net[sw.name]
            node.agent_config = self.agent_config(sw.name)
            if self.run_dir:
                node.agent_log = str(self.run_dir / f"agent-{sw.name}.log")
        self.net.start()
        if self.switch_kind == "agent":
            self.wait_agents()
        if self.qos is not None:
            self.start_host_lldp()

    def stop(self) -> None:
        """Tear everything down: agents, shells, namespaces, state. Idempotent."""
        for p in self.host_procs:
            if p.poll() is None:
                p.terminate()
                p.wait()
        self.host_procs.clear()
        if self.net is not None:
            for sw in self.net.switches:  # agents first, before their interfaces vanish
                if isinstance(sw, AgentSwitch):
                    sw.stop(deleteIntfs=False)
            try:
                self.net.stop()
            except Exception as exc:  # keep tearing down
                log.warning("mininet stop: %s", exc)
            self.net = None
        nsutil.clean(self.tag, include_live=True)

    # -- configuration (control plane) --------------------------------------
    def configure(self, node: str) -> None:
        """Addresses, routes, neighbours, MTU, offloads and sysctls of one node."""
        fab = self.fabric
        n = fab.nodes[node]
        name = nsutil.ns_name(self.tag, node)
        with nsutil.in_netns(name), IPRoute() as ipr:
            nsutil.sysctl("net.ipv4.ip_forward", 0)
            nsutil.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
            nsutil.sysctl("net.ipv6.conf.default.disable_ipv6", 1)
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            for p in fab.node_ports(node):
                idx = ipr.link_lookup(ifname=p.ifname)[0]
                link = fab.link_of(node, p.ifname)
                mtu = fab.mtu if link.kind != "frontend" else 1500
                ipr.link("set", index=idx, mtu=mtu, state="up")
                if n.kind != FRONTEND and link.kind != "frontend":
                    self._offloads_off(p.ifname)
                if p.ip:
                    addr, plen = p.ip.split("/")
                    ipr.addr("add", index=idx, address=addr, prefixlen=int(plen))
            if n.kind == SWITCH:
                self._configure_switch(ipr, node)
            elif n.kind == HOST:
                self._configure_host(ipr, node)
            for dev, ip, mac in fab.neighbours(node):
                ipr.neigh("add", dst=ip, lladdr=mac, ifindex=ipr.link_lookup(ifname=dev)[0],
                          state=NUD_PERMANENT)

    def _configure_switch(self, ipr: IPRoute, node: str) -> None:
        n = self.fabric.nodes[node]
        for key in ("all", "default"):
            nsutil.sysctl(f"net.ipv4.conf.{key}.rp_filter", 0)
            nsutil.sysctl(f"net.ipv4.conf.{key}.send_redirects", 0)
        for svi in n.svis:
            # the kernel has no dummy driver: a port-less bridge holds the SVI address
            ipr.link("add", ifname=svi.ifname, kind="bridge", address=n.router_mac)
            idx = ipr.link_lookup(ifname=svi.ifname)[0]
            ipr.link("set", index=idx, mtu=self.fabric.mtu, state="up")
            addr, plen = svi.ip.split("/")
            ipr.addr("add", index=idx, address=addr, prefixlen=int(plen))
        for r in self.fabric.routes(node):
            hops = [{"gateway": gw, "oif": ipr.link_lookup(ifname=dev)[0]} for gw, dev in r.nexthops]
            if len(hops) == 1:
                ipr.route("add", dst=r.prefix, **hops[0])
            else:
                ipr.route("add", dst=r.prefix, multipath=hops)

    def _configure_host(self, ipr: IPRoute, node: str) -> None:
        for key in ("all", "default"):
            nsutil.sysctl(f"net.ipv4.conf.{key}.arp_ignore", 1)
            nsutil.sysctl(f"net.ipv4.conf.{key}.arp_announce", 2)
            nsutil.sysctl(f"net.ipv4.conf.{key}.rp_filter", 0)
            # a GPU may reach a sibling NIC of its own host through the fabric
            nsutil.sysctl(f"net.ipv4.conf.{key}.accept_local", 1)
        # Per-NIC routing (ch.13 multi-rail hosts): locally generated packets sourced from
        # a NIC address use that NIC's table, *before* the local table, so even traffic
        # between two NICs of one host crosses the fabric (rail -> spine -> rail).
        ipr.rule("del", priority=0, table=255)
        ipr.rule("add", priority=2000, table=255)
        for g in self.fabric.gpus.values():
            if g.host != node:
                continue
            idx = ipr.link_lookup(ifname=g.nic)[0]
            table = HOST_TABLE_BASE + g.rail
            port = self.fabric.ports[(node, g.nic)]
            subnet = _network(port.ip)
            ipr.route("add", dst=subnet, oif=idx, table=table, prefsrc=g.ip, scope=253)
            ipr.route("add", dst="0.0.0.0/0", gateway=g.gateway, oif=idx, table=table)
            ipr.rule("add", src=g.ip, src_len=32, iifname="lo", table=table,
                     priority=1000 + g.rail)

    @staticmethod
    def _offloads_off(ifname: str) -> None:
        with Ethtool() as et:
            feats = et.get_features(ifname)
            for name in OFFLOADS_OFF:
                f = feats.features.get(name)
                if f is not None and f.enable:
                    f.enable = False
            et.set_features(ifname, feats)

    def agent_config(self, node: str) -> AgentConfig:
        """The start-up configuration of one switch agent."""
        fab = self.fabric
        n = fab.nodes[node]
        ports = []
        for local, remote, link in fab.node_links(node):
            lab = self.td.lab_rate(link.model_bps) if self.shaping else math.inf
            ports.append(PortConfig(local.ifname, local.mac, link.model_bps, lab,
                                    self.td.lab_time(link.delay_s), local.vlan,
                                    f"{remote.node}:{remote.ifname}"))
        svi = fab.l2_tables(node)
        return AgentConfig(name=node, tdf=fab.tdf, control=str(self.control_path(node)),
                           ports=tuple(ports), svi=svi, ecmp_seed=n.ecmp_seed, mtu=fab.mtu,
                           test_drop_rate=self.test_drop_rate,
                           qos=self.qos.to_dict() if self.qos is not None else None)

    def start_host_lldp(self) -> None:
        """One LLDP/DCBX speaker per host, advertising PFC on its GPU NICs (ch.11), so
        `priority-flow-control mode auto` ports turn PFC on."""
        qos_file = self.state_dir / "qos.json"
        qos_file.write_text(json.dumps(self.qos.to_dict()))
        for h in self.fabric.hosts():
            nics = [g.nic for g in self.fabric.gpus.values() if g.host == h.name]
            argv = [sys.executable, "-m", "traffic.lldp_host", "--host", h.name,
                    "--ifaces", ",".join(nics), "--qos", str(qos_file)]
            self.host_procs.append(self.net[h.name].popen(
                argv, cwd=str(Path(__file__).resolve().parent.parent),
                stdout=None, stderr=None))

    def start_nics(self, dcqcn: str = "paper", mtu: int = 4096, gpus=None,
                   timeout: float = 20.0, **options) -> dict[str, str]:
        """One RDMA NIC process (traffic.nic) per GPU in its host namespace (book ch.9);
        returns GPU -> control socket path. `options` are further NicConfig fields
        (e.g. timeout_s in model seconds, window). Stopped with the fabric."""
        from traffic.nic_config import NicConfig
        from traffic.nic_client import NicError, request

        procs = {}
        for gpu in gpus or self.fabric.gpus:
            sock = str(self.state_dir / f"nic-{gpu}.sock")
            cfg = NicConfig.for_gpu(self.fabric, gpu, sock, dcqcn=dcqcn, mtu=mtu, **options)
            cfg_path = self.state_dir / f"nic-{gpu}.json"
            cfg_path.write_text(cfg.to_json())
            argv = [sys.executable, "-m", "traffic.nic", str(cfg_path)]
            if self.run_dir:
                argv += ["--log", str(self.run_dir / f"nic-{gpu}.log")]
            p = self.net[self.fabric.gpus[gpu].host].popen(
                argv, cwd=str(Path(__file__).resolve().parent.parent), stdout=None, stderr=None)
            self.host_procs.append(p)
            self._nic_procs.append(p)
            procs[gpu] = (p, sock)
        deadline = time.monotonic() + timeout
        for gpu, (p, sock) in procs.items():
            while True:
                if p.poll() is not None:
                    raise RuntimeError(f"NIC {gpu} exited with {p.returncode}")
                try:
                    if request(sock, {"cmd": "ping"}, timeout=1.0).get("ok"):
                        break
                except (FileNotFoundError, ConnectionRefusedError, socket.timeout, NicError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"NIC {gpu} not ready after {timeout:.0f} s")
                time.sleep(0.05)
            self.nic_sockets[gpu] = sock
        return {g: s for g, (_, s) in procs.items()}

    def stop_nics(self) -> None:
        """Stop the NIC processes started by start_nics (SIGTERM, wait)."""
        for p in self._nic_procs:
            if p.poll() is None:
                p.terminate()
                p.wait()
            self.host_procs.remove(p)
        self._nic_procs.clear()
        self.nic_sockets.clear()

    def wait_pfc(self, timeout: float = 10.0) -> dict[str, list[str]]:
        """Wait until LLDP/DCBX turned PFC on for every fabric port (mode auto); returns
        ports still without PFC per switch (empty when all negotiated)."""
        deadline = time.monotonic() + timeout
        while True:
            missing = {}
            for sw in self.fabric.switches():
                ports = self.counters(sw.name)["ports"]
                off = [p for p, c in ports.items()
                       if c["pfc"]["mode"] == "auto" and not c["pfc"]["active"]]
                if off:
                    missing[sw.name] = off
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.2)

    def control_path(self, switch: str) -> Path:
        """Control socket of a switch agent."""
        return self.state_dir / f"{switch}.sock"

    def wait_agents(self, timeout: float = 20.0) -> None:
        """Block until every agent answers on its control socket."""
        deadline = time.monotonic() + timeout
        for sw in self.fabric.switches():
            path = self.control_path(sw.name)
            proc = self.net[sw.name].agent
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"switch agent {sw.name} exited with {proc.returncode}; "
                                       f"see its log {self.net[sw.name].agent_log}")
                try:
                    if control.request(str(path), {"cmd": "ping"}, timeout=1.0).get("ok"):
                        break
                except (FileNotFoundError, ConnectionRefusedError, socket.timeout):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"switch agent {sw.name} not ready after {timeout:.0f} s")
                time.sleep(0.05)

    # -- queries --------------------------------------------------------------
    def counters(self, switch: str) -> dict:
        """Live counters of one switch agent."""
        return control.request(str(self.control_path(switch)), {"cmd": "counters"})

    def agent_request(self, switch: str, payload: dict) -> dict:
        """Any control request to one agent."""
        return control.request(str(self.control_path(switch)), payload)

    def host(self, name: str):
        """The Mininet node of a host."""
        assert self.net is not None
        return self.net[name]


def _network(ip: str) -> str:
    import ipaddress

    return str(ipaddress.ip_interface(ip).network)
