"""One realised fabric (`FabricNet`): build the namespaces and links of a
`topologies.Fabric` with Mininet (emu.realise.nodes), configure every kernel from the network
plan (emu.realise.netplan, installed by emu.realise.netlink), start the switch agents, and tear it all
down — on errors and Ctrl-C too. Host processes (NICs, LLDP) are emu.realise.nics.

Every namespace is named ``emu-<tag>-<node>`` (emu.realise.nsutil) so `emu clean` removes
exactly what a run made; the run's state (agent configs, control sockets) lives in
/run/emu/<tag>/ and its files in the run directory, both absolute paths.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

from emu.realise import lbplan, netlink, nsutil, spawner
from emu.realise.netplan import FRONTEND_MTU, plan_node, svi_cpu
from emu.realise.nics import NicProcesses, start_host_lldp
from emu.realise.nodeops import NodeOps
from emu.realise.nodes import AgentSwitch, build_mininet, mininet_classes, stop_mininet
from emu.realise.procs import REPO, StartFailed, start_timeout, stop_procs, wait_ready
from emucore.qos.classify import Classifier
from emucore.runmark import marked_env
from emucore.timedil import TimeDilation
from emucore.wire.dscp import DSCP_ROCEV2
from switch_agent import control
from switch_agent.agentconfig import AgentConfig, PortConfig
from topologies.model import HOST, Fabric

log = logging.getLogger("emu.realise.net")


def refusal(log_path: str) -> str:
    """The reason an agent gave for refusing to start (its log's last "refused:" line,
    e.g. the compiled data path's `Unsupported`), or ""."""
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((ln.split("refused: ", 1)[1] for ln in reversed(lines) if "refused: " in ln), "")


def pfc_unsettled(ports: dict) -> tuple[list[str], list[str]]:
    """(ports whose PFC is negotiated (mode auto) and not on, those of them that have not
    yet heard their neighbour) from a switch's counters' "ports". A port's lossless
    priorities are its own ANDed with those its neighbour's LLDPDU advertises
    (emucore.qos.dcbx.pfc_active), so after that neighbour's first LLDPDU a port still off
    stays off: a configuration that leaves PFC off (lab L11.12's unbound policies) is
    settled at once instead of waiting out the timeout."""
    off = [p for p, c in ports.items() if c["pfc"]["mode"] == "auto" and not c["pfc"]["active"]]
    return off, [p for p in off if not ports[p]["pfc"].get("lldp_rx")]


class FabricNet:
    """One realised fabric: build, configure, start agents, tear down.

    Use as a context manager; teardown runs on errors and Ctrl-C too.
    """

    def __init__(self, fabric: Fabric, run_dir: Path | None = None, tag: str | None = None,
                 shaping: bool = True, test_drop_rate: float = 0.0,
                 switch_kind: str = "agent", qos=None,
                 lldp_off: dict[str, list[str]] | None = None,
                 lb: dict | None = None, part=None, seed: int = 1) -> None:
        if switch_kind not in ("agent", "bridge"):
            raise ValueError(f"switch_kind: 'agent' or 'bridge', got {switch_kind!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed: an integer >= 0, got {seed!r}")
        #: every agent's and NIC's random draws (AgentConfig.test_drop_seed, NicConfig.seed;
        #: `emu run --seed`)
        self.seed = seed
        self.switch_kind = switch_kind
        self.fabric = fabric
        self.tag = tag or nsutil.new_tag()
        self.td = TimeDilation(fabric.tdf)
        self.state_dir = nsutil.STATE_DIR / self.tag
        #: where logs go; absolute, as every path handed to a child process
        self.run_dir = Path(run_dir).resolve() if run_dir is not None else None
        self.shaping = shaping
        self.test_drop_rate = test_drop_rate
        self.net = None  # the built mininet.net.Mininet, while up
        #: switch QoS (a emucore.qos.qosconfig.QosConfig); None = plain forwarding
        self.qos = qos
        #: switch -> its ports that send no LLDP (`no lldp transmit`; a lab's lldp_off)
        self.lldp_off = {node: tuple(ports) for node, ports in (lldp_off or {}).items()}
        for node, ports in self.lldp_off.items():
            if node not in fabric.nodes:
                raise ValueError(f"lldp_off: no node {node!r} in {fabric.name}")
            names = {local.ifname for local, _, _ in fabric.node_links(node)}
            for ifname in ports:
                if ifname not in names:
                    raise ValueError(f"lldp_off[{node}]: no port {ifname!r}")
        #: switch -> its emucore.lbconfig.LoadBalance (emu.realise.lbplan.resolve); None = the QoS
        #: config's, else flow ECMP
        self.lb = dict(lb or {})
        self.host_procs: list = []  # LLDP speakers
        self.nics: NicProcesses | None = None
        #: this server's part of a fabric spread over several (an emu.cluster.plan.
        #: ServerPart: its nodes, tunnel ends, agent delays); None = the whole fabric
        self.part = part
        self.local = set(part.nodes) if part is not None else set(fabric.nodes)
        #: more of the run's state.json (emu.cluster.net: the servers and their parts' tags)
        self.state_extra: dict = {}
        #: called by stop() once every process is gone, before the state is removed
        #: (emu.cluster.part sends its logs and event files then)
        self.before_clean = None
        self._ops: NodeOps | None = None
        #: the fork server of this fabric's agents, LLDP speakers and NICs (None: each its
        #: own `python -m`, EMU_FORKSERVER=0)
        self.spawner: spawner.Spawner | None = None
        #: lab seconds of each step of start() and stop() ("namespaces", "configure",
        #: "agents", "lldp_speakers"; "stop_nics", "stop_agents", "mininet_stop", "clean")
        self.steps_s: dict[str, float] = {}

    def _step(self, name: str, t0: float) -> float:
        """Record step `name` as lasting from `t0` until now; returns now."""
        now = time.monotonic()
        self.steps_s[name] = self.steps_s.get(name, 0.0) + now - t0
        return now

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
                                                     for n in self.fabric.nodes
                                                     if n in self.local],
                                      **self.state_extra})
        t = time.monotonic()
        if spawner.enabled():  # it imports the children's code while the namespaces are built
            self.spawner = spawner.Spawner(REPO, env=marked_env(self.tag, os.environ),
                                           timeout=start_timeout())
        self.net = build_mininet(self.fabric, mininet_classes(self.tag, self.switch_kind),
                                 nodes=self.local)
        for node in self.net.hosts + self.net.switches:
            node.spawner = self.spawner
        self.nics = NicProcesses(self.net, self.fabric, self.state_dir, self.run_dir,
                                 run=self.tag)
        if self.part is not None:
            self.open_tunnels()
        t = self._step("namespaces", t)
        for n in self.fabric.nodes.values():
            if n.name in self.local:
                self.configure(n.name)
        t = self._step("configure", t)
        for sw in self.local_switches() if self.switch_kind == "agent" else ():
            node = self.net[sw.name]
            node.agent_config = self.agent_config(sw.name)
            if self.run_dir is not None:
                node.agent_log = str(self.run_dir / f"agent-{sw.name}.log")
        self.net.start()
        if self.switch_kind == "agent":
            self.wait_agents()
        t = self._step("agents", t)
        if self.qos is not None:
            self.host_procs += start_host_lldp(self.net, self.fabric, self.qos.to_dict(),
                                               self.state_dir, hosts=self.local)
            self._step("lldp_speakers", t)

    def local_switches(self) -> list:
        """The switches this machine runs (all of them unless the fabric is spread)."""
        return [sw for sw in self.fabric.switches() if sw.name in self.local]

    def open_tunnels(self) -> None:
        """The ends of this part's crossing links: VXLAN devices from this namespace into
        the node namespaces (emu.realise.netlink.open_end), before the kernels are configured."""
        netlink.open_ends([(end, nsutil.ns_name(self.tag, end.node), f"emu{self.tag}v{i}",
                            FRONTEND_MTU if end.frontend else self.fabric.mtu)
                           for i, end in enumerate(self.part.tunnels)])

    def stop(self) -> None:
        """Tear everything down: agents, shells, namespaces, state. Idempotent."""
        t = time.monotonic()
        # the LLDP speakers and the NICs end side by side (emu.realise.procs.stop_procs)
        stop_procs(self.host_procs + (self.nics.procs if self.nics is not None else []))
        self.host_procs.clear()
        if self._ops is not None:
            self._ops.close()
        if self.nics is not None:
            self.nics.stop()
        t = self._step("stop_nics", t)  # (and the LLDP speakers)
        if self.net is not None:
            agents = [sw for sw in self.net.switches if isinstance(sw, AgentSwitch)]
            for sw in agents:  # all signalled, then each awaited: they end side by side
                sw.terminate_agent()
            for sw in agents:  # agents first, before their interfaces vanish
                sw.stop(deleteIntfs=False)
            t = self._step("stop_agents", t)
            try:  # the veths go with the namespaces (nsutil.clean, below)
                stop_mininet(self.net)
            except Exception as exc:  # keep tearing down
                log.warning("mininet stop: %s", exc)
            self.net = None
            t = self._step("mininet_stop", t)
        if self.spawner is not None:  # its children are stopped
            self.spawner.close()
            self.spawner = None
        if self.before_clean is not None:
            try:
                self.before_clean()
            except Exception as exc:  # keep tearing down
                log.warning("before clean: %s", exc)
        nsutil.clean(self.tag, include_live=True)
        self._step("clean", t)

    # -- configuration (control plane) --------------------------------------
    def configure(self, node: str) -> None:
        """Sysctls, interfaces, addresses, routes, rules and neighbours of one node, as
        the network plan says (emu.realise.netplan)."""
        netlink.apply(plan_node(self.fabric, node, bridged=self.switch_kind == "bridge"),
                      nsutil.ns_name(self.tag, node))

    def agent_config(self, node: str) -> AgentConfig:
        """The start-up configuration of one switch agent."""
        fab = self.fabric
        n = fab.nodes[node]
        ports = []
        delays = self.part.delays if self.part is not None else {}
        for local, remote, link in fab.node_links(node):
            lab = self.td.lab_rate(link.model_bps) if self.shaping else math.inf
            delay = delays.get(f"{node}:{local.ifname}", self.td.lab_time(link.delay_s))
            ports.append(PortConfig(local.ifname, local.mac, link.model_bps, lab, delay,
                                    local.vlan,
                                    f"{remote.node}:{remote.ifname}",
                                    fab.nodes[remote.node].kind == HOST))
        svi = fab.l2_tables(node)
        svi_cpu_ends = {} if self.switch_kind == "bridge" else {v: svi_cpu(v)[1] for v in svi}
        return AgentConfig(name=node, tdf=fab.tdf, control=str(self.control_path(node)),
                           ports=tuple(ports), svi=svi, svi_cpu=svi_cpu_ends,
                           ecmp_seed=n.ecmp_seed, mtu=fab.mtu,
                           test_drop_rate=self.test_drop_rate, test_drop_seed=self.seed,
                           qos=self.qos.to_dict() if self.qos is not None else None,
                           lldp_off=self.lldp_off.get(node, ()),
                           lb=self.lb[node].to_dict() if node in self.lb else None,
                           dlb_macs=lbplan.dlb_macs(self.lb),
                           events_path=str(self.run_dir / "events" / f"{node}.jsonl")
                           if self.run_dir is not None else None)

    @property
    def nic_sockets(self) -> dict[str, str]:
        """GPU name -> control socket of its running NIC process (start_nics)."""
        return self.nics.sockets if self.nics is not None else {}

    def start_nics(self, dcqcn: str = "paper", mtu: int = 4096, gpus=None,
                   timeout: float | None = None, **options) -> dict[str, str]:
        """One RDMA NIC process (traffic.nic.main) per GPU in its host namespace (book ch.9);
        returns GPU -> control socket path. `options` are further NicConfig fields
        (e.g. timeout_s in model seconds, window). Stopped with the fabric."""
        assert self.nics is not None, "start the fabric first"
        return self.nics.start(gpus or list(self.fabric.gpus), dcqcn, mtu,
                               timeout or start_timeout(),
                               **self.nic_defaults(options))

    def nic_defaults(self, options: dict) -> dict:
        """NicConfig fields every NIC of this fabric gets unless `options` say: the run's
        seed (each NIC's draws, NicConfig.rng); with QoS, the NIC pauses the priority its
        RoCE DSCP maps to."""
        out = dict(options)
        out.setdefault("seed", self.seed)
        if self.qos is not None:
            out.setdefault("pfc_priority", Classifier(
                self.qos.classification).priority_of_dscp(DSCP_ROCEV2))
        return out

    def stop_nics(self) -> None:
        """Stop the NIC processes started by start_nics (SIGTERM, wait)."""
        if self.nics is not None:
            self.nics.stop()

    def wait_pfc(self, timeout: float = 10.0) -> dict[str, list[str]]:
        """Wait until LLDP/DCBX has settled PFC on every fabric port (mode auto): on, or
        off for good (`pfc_unsettled`); returns ports without PFC per switch (empty when
        all negotiated it)."""
        deadline = time.monotonic() + timeout
        while True:
            missing, waiting = {}, False
            for sw in self.fabric.switches():
                off, unheard = pfc_unsettled(self.counters(sw.name)["ports"])
                if off:
                    missing[sw.name] = off
                waiting = waiting or bool(unheard)
            if not waiting or time.monotonic() > deadline:
                return missing
            time.sleep(0.05)  # LLDP answers a new neighbour at once (switch_agent.dcbx)

    def control_path(self, switch: str) -> Path:
        """Control socket of a switch agent."""
        return self.state_dir / f"{switch}.sock"

    def wait_agents(self, timeout: float | None = None) -> None:
        """Block until every agent answers on its control socket (within `timeout`
        seconds, by default emu.realise.procs.start_timeout())."""
        timeout = timeout or start_timeout()
        deadline = time.monotonic() + timeout
        for sw in self.local_switches():
            node = self.net[sw.name]
            try:
                wait_ready(f"switch agent {sw.name}", node.agent,
                           lambda p=str(self.control_path(sw.name)): control.request(
                               p, {"cmd": "ping"}, timeout=1.0),
                           deadline, timeout, hint=f"; see its log {node.agent_log}")
            except StartFailed as exc:  # it refused its configuration: say why
                why = refusal(node.agent_log)
                raise StartFailed(f"{exc}{': ' + why if why else ''}") from None

    # -- queries --------------------------------------------------------------
    def counters(self, switch: str, brief: bool = False) -> dict:
        """Live counters of one switch agent (`brief`: what the metrics sampler reads)."""
        return control.request(str(self.control_path(switch)),
                               {"cmd": "counters", "brief": True} if brief else {"cmd": "counters"})

    def memory(self) -> dict:
        """GPU -> a maker of its RDMA memory where it is not here (emu.cluster.net): none."""
        return {}

    def node_ops(self, node: str) -> NodeOps:
        """The actions of a fault in `node`'s namespace (emu.realise.nodeops)."""
        if self._ops is None:
            self._ops = NodeOps(self.fabric, self.tag)
        return self._ops

    def agent_request(self, switch: str, payload: dict) -> dict:
        """Any control request to one agent."""
        return control.request(str(self.control_path(switch)), payload)

    def host(self, name: str):
        """The Mininet node of a host."""
        return self.node(name)

    def node(self, name: str):
        """The Mininet node of any node (its `popen` runs a command in its namespace)."""
        assert self.net is not None
        return self.net[name]

    def clock_shift(self, node: str) -> float:
        """Seconds to subtract from timestamps taken on `node`'s machine: 0 here (emu.
        cluster measures the other servers' clocks)."""
        return 0.0

