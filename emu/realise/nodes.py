"""Mininet node and link kinds of an emu fabric, and the Mininet network built from a
`topologies.model.Fabric` (the description/realisation split of Mininet's Topo,
docs/CONVENTIONS.md).

What differs from stock Mininet, because this kernel has no Open vSwitch and the
switches are ours:
* `AgentSwitch` is a namespace that runs `python -m switch_agent` (the data plane);
  its kernel holds addresses, static neighbours and (ECMP) routes, never forwarding.
* `FrontendSwitch` is a namespace with a plain Linux bridge (the frontend network is
  not the object of study, docs/ARCHITECTURE.md).
* `NetlinkLink` creates each veth pair directly inside the two namespaces with
  netlink (emu.realise.netlink), so no interface ever appears in the root namespace.
* Every namespace is named ``emu-<tag>-<node>`` (emu.realise.nsutil) and every process started
  for a node carries EMU_RUN=<tag> (emucore.runmark), so `emu clean` removes exactly
  what a run made, also after a `kill -9` of `emu run` mid-build.

The kinds are mixins; `mininet_classes(tag, ...)` joins them with Mininet's `Host`,
`Switch` and `Link` for one run. Mininet is imported there (pyroute2 by
emu.realise.netlink), when a fabric is built, so `python -m emu --help` does not pay
for them.
"""

from __future__ import annotations

import os
from pathlib import Path

from emu.realise import netlink, nsutil
from emu.realise.procs import run_module
from emucore.runmark import marked_env
from switch_agent.agentconfig import AgentConfig
from topologies.model import FRONTEND, HOST, SWITCH, Fabric


class EmuNode:
    """Names the node's namespace ``emu-<tag>-<node>`` once its shell runs, and marks
    every process started for the node (its shell, and all `popen`s: agents, NICs,
    LLDP speakers, captures, pings) with EMU_RUN=<tag> (emucore.runmark), so `emu clean`
    finds them even where the namespace has no name yet or any more."""

    tag = ""
    #: the fabric's fork server (emu.realise.spawner), which emu.realise.procs.run_module
    #: forks this node's product processes from; None: each its own `python -m`
    spawner = None

    def _popen(self, cmd, **params):
        """Mininet's one Popen of a node's processes, with the run's mark."""
        params["env"] = marked_env(self.tag, params.get("env"))
        return super()._popen(cmd, **params)

    def startShell(self, *args, **kwargs):  # noqa: N802 (Mininet API)
        """Start the Mininet shell, then attach a name to its namespace."""
        super().startShell(*args, **kwargs)
        nsutil.attach(nsutil.ns_name(self.tag, self.name), self.pid)

    @property
    def netns(self) -> str:
        """This node's namespace name."""
        return nsutil.ns_name(self.tag, self.name)


class EmuHost(EmuNode):
    """A GPU server: one namespace, one NIC per GPU, a frontend interface."""

    def configDefault(self, **_params):  # noqa: N802 (Mininet API)
        """Addresses are installed from the network plan with pyroute2, not ifconfig."""


class AgentSwitch(EmuNode):
    """A switch whose data plane is `switch_agent` running in its namespace."""

    agent_config: AgentConfig | None = None
    agent_log: str = os.devnull

    def __init__(self, name, **params):
        self.agent = None
        self.terminated = False  # SIGTERM sent (one only: a second would cut its close short)
        super().__init__(name, **params)

    def start(self, controllers):
        """Launch the agent process."""
        assert self.agent_config is not None
        cfg_path = Path(self.agent_config.control).with_suffix(".json")
        cfg_path.write_text(self.agent_config.to_json())
        self.agent = run_module(self, "switch_agent", [cfg_path, "--log", Path(self.agent_log)],
                                stdin=None, stdout=None, stderr=None)

    def terminate_agent(self) -> None:
        """SIGTERM the agent, not waiting (FabricNet.stop ends all agents side by side)."""
        if self.agent and not self.terminated and self.agent.poll() is None:
            self.agent.terminate()
            self.terminated = True

    def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet API)
        """Stop the agent (SIGTERM unless sent, then SIGKILL after 3 s)."""
        if self.agent and self.agent.poll() is None:
            self.terminate_agent()
            try:
                self.agent.wait(3)
            except Exception:
                self.agent.kill()
                self.agent.wait()
        super().stop(deleteIntfs)


class FrontendSwitch(EmuNode):
    """The frontend network: a Linux bridge in its own namespace."""

    def start(self, controllers):
        """Bridge all ports: the namespace's every interface but lo (also the tunnel
        ends of hosts on other servers, which Mininet does not know, emu.cluster.net)."""
        netlink.bridge_all(self.netns, "br0")

    def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet API)
        """Nothing to stop: the bridge goes with the namespace."""
        super().stop(deleteIntfs)


class NetlinkLink:
    """A veth pair created directly inside both namespaces (netlink, IFLA_NET_NS_PID)."""

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
        netlink.add_veth(**kwargs)


def mininet_classes(tag: str, switch_kind: str = "agent") -> dict[str, type]:
    """Node kind (HOST, SWITCH, FRONTEND, "link") -> the Mininet class of one run:
    the mixin above joined with Mininet's base class, the run tag set."""
    from mininet.link import Link
    from mininet.node import Host, Switch

    switch = AgentSwitch if switch_kind == "agent" else FrontendSwitch
    out = {kind: type(mixin.__name__, (mixin, base), {"tag": tag})
           for kind, mixin, base in ((HOST, EmuHost, Host), (SWITCH, switch, Switch),
                                     (FRONTEND, FrontendSwitch, Switch))}
    out["link"] = type(NetlinkLink.__name__, (NetlinkLink, Link), {})
    return out


def stop_mininet(net) -> None:
    """Stop a built Mininet network (its agents stopped already): every node's shell
    ended (Mininet's Node.terminate), the veths left to the namespaces. Mininet's own stop
    deletes each interface with `ip link del` through its node's shell, one link after
    another (~28 ms a veth on the 2-core VM, 0.46 s of rail2x4's 16 links, cProfile);
    removing the run's namespaces right after (emu.realise.nsutil.clean) takes every
    veth with them, in one batch of the kernel's."""
    for sw in net.switches:
        sw.stop(deleteIntfs=False)  # an agent's: ended; a bridge's: goes with the namespace
        sw.terminate()
    for h in net.hosts:
        h.terminate()


def build_mininet(fabric: Fabric, classes: dict[str, type], nodes=None):
    """A built (not started) Mininet network of the fabric: every namespace and veth;
    with `nodes`, only those nodes and the links between two of them (a server's part
    of a fabric spread over several, emu.cluster.net)."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.topo import Topo

    setLogLevel("warning")
    topo = Topo()
    here = set(fabric.nodes if nodes is None else nodes)
    for i, n in enumerate(fabric.nodes.values(), start=1):
        if n.name not in here:
            continue
        if n.kind == HOST:
            topo.addHost(n.name, cls=classes[HOST])
        else:
            topo.addSwitch(n.name, cls=classes[n.kind], dpid=f"{i:016x}", inNamespace=True)
    for lk in fabric.links:
        if lk.a.node not in here or lk.b.node not in here:
            continue
        topo.addLink(lk.a.node, lk.b.node, intfName1=lk.a.ifname, intfName2=lk.b.ifname,
                     addr1=lk.a.mac, addr2=lk.b.mac, cls=classes["link"])
    net = Mininet(topo=topo, controller=None, build=False, autoSetMacs=False,
                  autoStaticArp=False, link=classes["link"], waitConnected=False)
    net.build()
    return net
