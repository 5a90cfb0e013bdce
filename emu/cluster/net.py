"""One fabric spread over several servers (issue 17): `ClusterNet` is an emu.realise.net.FabricNet
whose nodes are placed on the servers of a servers file (emu.cluster.servers, emu.cluster.placer);
this machine builds its own part, every other server runs `python -m emu.cluster.part` over
SSH (emu.cluster.part, driven from here by emu.cluster.partclient), and the links between
servers are VXLAN tunnels terminated in the node namespaces (emu.realise.tunnel,
emu.cluster.plan) - the shape of Mininet's cluster mode (`mininet.examples.cluster`: a
controller that reaches its servers with `ssh -o BatchMode=yes`, `RemoteGRELink` tunnels
moved into the nodes), with one long-lived process per server instead of one SSH shell
per node.

What stays as on one machine: every switch agent's control socket is forwarded by SSH
to the path it would have here (/run/emu/<tag>/<switch>.sock: `ssh -L local:remote`,
OpenSSH's Unix-socket forwarding), so counters, `emu show-switch`, the metrics sampler
and PFC negotiation checks need no change; a remote host's `popen` runs its command in
the node's namespace there (`ip netns exec`) through one multiplexed SSH connection per
server (ControlMaster). Teardown: stopping closes each part's stdin and it tears its
part down; if this process dies, sshd closes the session and the part does the same.

At start, each pair of servers that a link joins has its one-way latency measured (half
the smallest of 10 pings between their underlay addresses, from one of the two) and
every tunnel between them is compensated by it (emu.cluster.plan); each server's clock
offset is read over its part's session, and captures there stream here and are put on
this machine's clock (emu.observe.capture). The run's fidelity is judged per server and
combined (emu.observe.guard.by_server). NICs of hosts elsewhere are started by their part
(`start_nics`) and their workers spawned there (`RemoteNode.spawn`, emu.cluster.proxies,
used by collectives.launch); their results come back through the part, and its logs and
event files when it stops (the events moved onto this machine's monotonic clock,
`keep_files`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

from emu.cluster import plan as clusterplan, placer as placement, remote
from emu.cluster.partclient import RemotePart
from emu.cluster.proxies import RemoteNode, RemoteOps, RemoteShm
from emu.cluster.servers import Server, Servers
from emu.realise import netlink, nsutil
from emu.realise.net import FabricNet
from emu.realise.procs import start_timeout


def keep_files(run_dir: Path, files: dict[str, str], mono_ahead_s: float, tdf: float) -> None:
    """A part's files in this run's directory: logs as they are; event files
    (events/<node>.jsonl) with each event's model time "t" moved onto this machine's
    CLOCK_MONOTONIC axis (the server's ran `mono_ahead_s` ahead)."""
    shift_us = mono_ahead_s / tdf * 1e6
    for name, text in files.items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.startswith("events/"):
            out = []
            for line in text.splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec.get("t"), (int, float)):
                    rec["t"] = round(rec["t"] - shift_us, 2)
                out.append(json.dumps(rec, separators=(",", ":")))
            text = "\n".join(out) + ("\n" if out else "")
        path.write_text(text)


class ClusterNet(FabricNet):
    """A FabricNet over the servers of a servers file (this machine among them)."""

    def __init__(self, fabric, servers: Servers, **kw) -> None:
        super().__init__(fabric, **kw)
        local = [s for s in servers.servers if s.local]
        if not local:
            raise ValueError("servers: one server must be this machine (address localhost): "
                             "emu runs its part of the fabric and the frontend here")
        self.servers = servers
        self.here = local[0]
        self.placement = placement.place(fabric, servers.names(), servers.placement)
        self.local = set(self.placement.nodes_on(self.here.name))
        self.parts: dict[str, RemotePart] = {}
        self.plan: dict[str, clusterplan.ServerPart] = {}
        self.latency: dict[str, float] = {}  #: server -> one-way lab seconds from here
        self.part_tags: dict[str, str] = {}  #: server -> the run tag of its part there
        #: server -> (its clock ahead of ours, s; the uncertainty, s), at start
        self.clocks: dict[str, tuple[float, float]] = {}
        self.mono: dict[str, float] = {}  #: server -> its CLOCK_MONOTONIC ahead of ours, s
        #: GPU -> its NIC's control socket where its worker runs (the other servers'
        #: own paths; emu.realise.nics' `nic_sockets` are the paths here, forwarded)
        self.worker_sockets: dict[str, str] = {}
        self._remote_nics: dict[str, tuple[str, str, str]] = {}  # gpu -> (server, here, there)

    def start(self) -> None:
        """Check every server (emu.cluster.remote.check: SSH, root, the same emu, VXLAN; a
        RuntimeError naming each server's problem before anything is built), place,
        start every other server's part, build ours, forward their sockets."""
        problems = remote.check_all(self.servers.servers)
        if problems:
            raise RuntimeError("servers not ready:\n  " + "\n  ".join(problems))
        self.state_extra = {"servers": [dataclasses.asdict(s) for s in self.servers.servers],
                            "parts": self.part_tags}  # emu clean reaches the parts by it
        nsutil.write_state(self.tag, {"tag": self.tag, "pid": os.getpid(),
                                      "fabric": self.fabric.name, "created": time.time(),
                                      "namespaces": [], **self.state_extra})
        others = [s for s in self.servers.servers if not s.local]
        address = {s.name: socket.gethostbyname(s.address) for s in others}
        if others:
            address[self.here.name] = netlink.source_address_to(address[others[0].name])
        self.latency = self.measure(address)
        self.plan = clusterplan.plan(self.fabric, self.placement, self.servers.names(),
                                     address, self.latency, self.tag, frontend=self.here.name)
        self.part = self.plan[self.here.name]
        self.local = set(self.part.nodes)
        options = {"shaping": self.shaping, "test_drop_rate": self.test_drop_rate,
                   "seed": self.seed, "switch_kind": self.switch_kind, "qos": self.qos,
                   "lldp_off": {k: list(v) for k, v in self.lldp_off.items()}, "lb": self.lb}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for s in others:
            if not self.plan[s.name].nodes:
                continue
            part = RemotePart(s, self.tag, self.state_dir,
                              self.run_dir / f"part-{s.name}.log" if self.run_dir else None)
            self.parts[s.name] = part
            part.start({"fabric": self.fabric, "part": self.plan[s.name], "options": options})
        for part in self.parts.values():
            part.ready()
            self.part_tags[part.server.name] = part.tag
            nsutil.write_state(self.tag, {"tag": self.tag, "pid": os.getpid(),
                                          "fabric": self.fabric.name, "created": time.time(),
                                          "namespaces": [], **self.state_extra})
            part.forward(self.state_dir)
            off, unc, mono = part.clock_offset()
            self.clocks[part.server.name] = (off, unc)
            self.mono[part.server.name] = mono
        super().start()

    @staticmethod
    def clean_parts(state: dict) -> list[str]:
        """`emu clean` of a run whose state names parts on other servers: `emu clean
        --run PART` on each over SSH (a part tears itself down when its session closes;
        this is for what a crash there left). Lines saying what each server did."""
        out = []
        for d in state.get("servers") or []:
            s = Server(**d)
            tag = (state.get("parts") or {}).get(s.name)
            if s.local or not tag:
                continue
            r = remote.Remote(s).run(["env", "-C", str(remote.REPO),
                                      str(remote.REPO / ".venv" / "bin" / "python"), "-m",
                                      "emu", "clean", "--run", tag, "--all"], timeout=120)
            said = " ".join((r.stdout or r.stderr).split()) or f"exit status {r.returncode}"
            out.append(f"server {s.name}: {said}" if r.returncode == 0 else
                       f"server {s.name}: emu clean --run {tag} failed: {said}")
        return out

    def measure(self, address: dict[str, str]) -> dict[tuple[str, str], float]:
        """One-way latency of every pair of servers a link joins: 10 pings from the
        first of the two (over SSH when that is not this machine) to the other's
        underlay address; RuntimeError naming the pair when there is no answer."""
        by_name = {s.name: s for s in self.servers.servers}
        out = {}
        for a, b in clusterplan.server_pairs(self.fabric, self.placement, self.here.name):
            src, dst = (a, b) if by_name[a].local or not by_name[b].local else (b, a)
            lat = remote.latency_from(remote.Remote(by_name[src]), address[dst])
            if lat is None:
                raise RuntimeError(f"server {dst} ({address[dst]}) does not answer ping "
                                   f"from server {src}")
            out[clusterplan.pair(a, b)] = lat
        return out

    def stop(self) -> None:
        """Every server's part (its logs and event files brought here), then ours."""
        for name, part in self.parts.items():
            part.stop()
            if self.run_dir is not None and part.files:
                keep_files(self.run_dir, part.files, self.mono.get(name, 0.0), self.fabric.tdf)
        self.parts.clear()
        super().stop()

    def describe_servers(self) -> dict:
        """For summary.json: where each node ran, the crossing links and their delays."""
        return {"placement": {s: list(p.nodes) for s, p in self.plan.items()},
                "crossing": sorted({t.link for p in self.plan.values() for t in p.tunnels}),
                "latency_us": {f"{a}-{b}": round(v * 1e6, 1)
                               for (a, b), v in self.latency.items()},
                "agent_delay_lab_ms": {k: round(v * 1e3, 4) for p in self.plan.values()
                                       for k, v in p.delays.items()},
                "part_tags": dict(self.part_tags),
                "clock_offset_ms": {s: {"offset": round(o * 1e3, 3), "uncertainty":
                                        round(u * 1e3, 3)} for s, (o, u) in self.clocks.items()}}

    def node_servers(self) -> dict[str, str]:
        """Node -> the server that runs it (the frontend bridge too)."""
        return {n: s for s, p in self.plan.items() for n in p.nodes}

    def server_of(self, node: str) -> str:
        """The server that runs `node`."""
        for s, p in self.plan.items():
            if node in p.nodes:
                return s
        return self.placement.server_of[node]

    def node(self, name: str):
        """The Mininet node of a node here, a RemoteNode of one elsewhere."""
        if name in self.local:
            return super().node(name)
        part = self.parts[self.server_of(name)]
        return RemoteNode(name, nsutil.ns_name(part.tag, name), part)

    def host(self, name: str):
        """The Mininet node of a host here, a RemoteNode of one elsewhere."""
        return self.node(name)

    def node_ops(self, node: str):
        """A fault's actions in `node`'s namespace: here, or through its server's part."""
        if node in self.local:
            return super().node_ops(node)
        return RemoteOps(self.parts[self.server_of(node)], node)

    def start_nics(self, dcqcn: str = "paper", mtu: int = 4096, gpus=None,
                   timeout: float | None = None, **options) -> dict[str, str]:
        """FabricNet.start_nics over the servers: each server starts its hosts' NICs;
        the other servers' control sockets are forwarded to the paths they would have
        here (counters, the sampler, a job's watch work unchanged), while their workers
        use the servers' own (`worker_sockets`)."""
        gpus = list(gpus or self.fabric.gpus)
        timeout = timeout or start_timeout()
        options = self.nic_defaults(options)
        where = {g: self.server_of(self.fabric.gpus[g].host) for g in gpus}
        here = [g for g in gpus if where[g] == self.here.name]
        out = super().start_nics(dcqcn, mtu, here, timeout, **options) if here else {}
        self.worker_sockets.update(out)
        for name, part in self.parts.items():
            theirs = [g for g in gpus if where[g] == name]
            if not theirs:
                continue
            far = part.request({"cmd": "start_nics", "gpus": theirs, "dcqcn": dcqcn,
                                "mtu": mtu, "timeout": timeout, "options": options},
                               timeout=timeout + 60)["sockets"]
            pairs = [(str(self.state_dir / f"nic-{g}.sock"), far[g]) for g in theirs]
            part.forwards("forward", pairs)
            for g, (local, there) in zip(theirs, pairs):
                self._remote_nics[g] = (name, local, there)
                self.worker_sockets[g] = there
                out[g] = local
        return out

    def memory(self) -> dict:
        """GPU -> a maker of memory blocks on its server, for the GPUs elsewhere
        (traffic.workloads.rdma `memory`: their NICs register memory there)."""
        out = {}
        for g, gpu in self.fabric.gpus.items():
            if gpu.host not in self.local:
                part = self.parts[self.server_of(gpu.host)]
                out[g] = lambda size, part=part: RemoteShm(part, size)
        return out

    @property
    def nic_sockets(self) -> dict[str, str]:
        """GPU -> control socket here of its running NIC (forwarded when elsewhere)."""
        return {**super().nic_sockets, **{g: v[1] for g, v in self._remote_nics.items()}}

    def stop_nics(self) -> None:
        """Every server's NICs."""
        super().stop_nics()
        for name, part in self.parts.items():
            pairs = [(local, there) for s, local, there in self._remote_nics.values()
                     if s == name]
            if pairs and part.proc is not None and part.proc.poll() is None:
                part.forwards("cancel", pairs)
                part.request({"cmd": "stop_nics"})
        self._remote_nics.clear()
        self.worker_sockets.clear()

    def clock_shift(self, node: str) -> float:
        """Seconds to subtract from the timestamps taken on `node`'s server to put them
        on this machine's clock: its measured offset where that exceeds the
        measurement's uncertainty, else 0 (one lab-time axis for every pcap)."""
        off, unc = self.clocks.get(self.server_of(node), (0.0, 0.0))
        return off if abs(off) > unc else 0.0
