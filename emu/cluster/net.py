"""One fabric spread over several servers (issue 17): `ClusterNet` is an emu.realise.net.FabricNet
whose nodes are placed on the servers of a servers file (emu.cluster.servers, emu.cluster.placer);
this machine builds its own part, every other server runs `python -m emu.cluster.part` over
SSH (emu.cluster.part), and the links between servers are VXLAN tunnels terminated in the node
namespaces (emu.realise.tunnel, emu.cluster.plan) - the shape of Mininet's cluster mode
(`mininet.examples.cluster`: a controller that reaches its servers with
`ssh -o BatchMode=yes`, `RemoteGRELink` tunnels moved into the nodes), with one
long-lived process per server instead of one SSH shell per node.

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
(`start_nics`) and their workers spawned there (`RemoteNode.spawn`, used by
collectives.launch); their results come back through the part, and its logs and event
files when it stops (the events moved onto this machine's monotonic clock,
`keep_files`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import queue
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from emu.cluster import plan as clusterplan, placer as placement, remote
from emu.realise import nsutil
from emu.realise.net import FabricNet
from emu.cluster.part import MARK, encode
from emu.cluster.servers import Server, Servers
from emu.realise.tunnel import underlay_to
from emucore.runmark import marked_env

log = logging.getLogger("emu.cluster.net")

PART_TIMEOUT_S = 180.0  #: a server's part must be up within this
FORWARD_TIMEOUT_S = 20.0
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _ssh_popen(argv: list[str], tag: str, **kw) -> subprocess.Popen:
    """An ssh client of run `tag`: marked EMU_RUN=<tag> (`emu clean --run` finds it)
    and sent SIGTERM when this process dies (PR_SET_PDEATHSIG), so a kill -9 of emu
    leaves no SSH session - and with it no part - on any server."""
    parent = os.getpid()

    def die_with_parent() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)

    return subprocess.Popen(argv, env=marked_env(tag), preexec_fn=die_with_parent, **kw)


class RemoteNode:
    """A node on another server: runs commands in its namespace there."""

    def __init__(self, name: str, netns: str, part: "RemotePart") -> None:
        self.name = name
        self.netns = netns
        self.part = part
        self._ssh = part.ssh()  # ssh ... user@host (multiplexed)

    def popen(self, argv, **kw) -> subprocess.Popen:
        """Start `argv` in the node's namespace on its server (Mininet's Node.popen)."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self._ssh + ["--", shlex.join(
            ["ip", "netns", "exec", self.netns, *argv])], **kw)

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, out) -> subprocess.Popen:
        """Start `argv` there with exactly `env`, in `cwd`, its output (both streams)
        into the local file `out` - a worker of a job (collectives.launch). The returned
        process ends with the command's exit status; closing its stdin ends the command
        (SIGTERM there, its exit status still comes back)."""
        cmd = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv])
        # (an asynchronous list reads /dev/null: the watcher reads our stdin as fd 3)
        script = (f"cd {shlex.quote(cwd)} || exit 125; exec 3<&0; "
                  f"{cmd} </dev/null 3<&- 2>&1 & p=$!; "
                  "(read _ <&3; kill -TERM $p 2>/dev/null) & w=$!; exec 3<&-; wait $p; "
                  "rc=$?; kill $w 2>/dev/null; exit $rc")
        return self.popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=out,
                          stderr=subprocess.STDOUT)

    def scratch(self, name: str) -> str:
        """A directory there for a job's files (in its part's state directory, removed
        with the part); created by `spawn`'s caller through `mkdir`."""
        return str(nsutil.STATE_DIR / self.part.tag / name)

    def files(self, directory: str, glob: str) -> dict[str, str]:
        """The text of the files of `directory` there whose names match `glob`."""
        return self.part.request({"cmd": "files", "dir": directory, "glob": glob})["files"]

    def stream(self, argv, out) -> subprocess.Popen:
        """Run `argv` there with its standard output into `out` (a local file) - a
        capture's `dumpcap -w -`. Closing the returned process's stdin stops it cleanly:
        the remote shell sends it SIGTERM and waits, so all it wrote arrives here."""
        script = f"{shlex.join(argv)} & p=$!; read _; kill -TERM $p; wait $p"
        return self.popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=out,
                          stderr=subprocess.PIPE)


class RemoteOps:
    """emu.realise.nodeops.NodeOps of the nodes on another server: each call is a request to
    that server's part (emu.cluster.part `ops`), which makes it in its own namespaces."""

    def __init__(self, part: "RemotePart", node: str) -> None:
        self.part = part
        self.node = node

    def _call(self, fn: str, *args) -> None:
        self.part.request({"cmd": "ops", "fn": fn, "node": self.node, "args": args},
                          timeout=30)

    def set_link(self, node: str, ifname: str, up: bool) -> None:
        self._call("set_link", node, ifname, up)

    def restore_port(self, node: str, ifname: str) -> None:
        self._call("restore_port", node, ifname)

    def set_routes(self, switch: str, routes: list, withdraw: list[str]) -> None:
        self._call("set_routes", switch, routes, withdraw)

    def send_frame(self, gpu: str, frame: bytes) -> None:
        self._call("send_frame", gpu, frame)


class RemoteShm:
    """A shared-memory block on another server, made and held by its part
    (emu.cluster.part.Blocks): what a NIC there registers for an RDMA workload, filled and
    checked there (traffic.nic.client.MemoryRegion)."""

    def __init__(self, part: "RemotePart", size: int) -> None:
        self.part = part
        self.size = size
        self.name = part.request({"cmd": "shm", "op": "create", "size": size})["name"]

    def _op(self, op: str, length: int | None = None) -> dict:
        return self.part.request({"cmd": "shm", "op": op, "name": self.name,
                                  "length": self.size if length is None else length})

    def fill_random(self, length: int) -> None:
        self._op("fill", length)

    def digest(self, length: int) -> str:
        return self._op("digest", length)["digest"]

    def is_zero(self, length: int) -> bool:
        return self._op("zero", length)["zero"]

    def close(self) -> None:
        """(Nothing is mapped here.)"""

    def unlink(self) -> None:
        self._op("drop")


class RemotePart:
    """The emu.cluster.part process of one server, reached over SSH."""

    def __init__(self, server: Server, tag: str, state_dir: Path, log_path: Path | None):
        self.run = tag  #: the run's tag here (marks our ssh clients)
        self.server = server
        self.remote = remote.Remote(server)
        self.control = state_dir / f"ssh-{server.name}"  # the multiplexed connection
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.forwarder: subprocess.Popen | None = None
        self.tag = ""  # the part's tag on its server
        self.sockets: dict[str, str] = {}
        self.files: dict[str, str] = {}  # its logs and event files, sent when it stopped
        self._lines: queue.Queue = queue.Queue()
        self._talk = threading.Lock()  # one request at a time over the session

    def ssh(self, options: tuple[str, ...] = ()) -> list[str]:
        """ssh through this server's master connection (once `forward` started it)."""
        return self.remote.ssh_argv([], ("-S", str(self.control), *options))

    def start(self, spec: dict) -> None:
        """Start the part (it builds while we go on); `ready` waits for it."""
        cmd = ["env", "-C", str(remote.REPO), str(remote.REPO / ".venv" / "bin" / "python"),
               "-m", "emu.cluster.part"]
        err = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = _ssh_popen(self.remote.argv(cmd), self.run, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=err)
        if self.log_path:
            err.close()
        self.proc.stdin.write(encode(spec))
        self.proc.stdin.flush()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.decode(errors="replace"))
        self._lines.put(None)

    def ready(self, timeout: float = PART_TIMEOUT_S) -> None:
        """Wait for the part's report; RuntimeError naming the server otherwise."""
        deadline = time.monotonic() + timeout
        where = f"server {self.server.name} ({self.server.address})"
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{where}: its part of the fabric was not up in "
                                   f"{timeout:g} s" + self._see()) from None
            if line is None:
                raise RuntimeError(f"{where}: its part ended before it was up "
                                   f"(exit {self.proc.wait()})" + self._see())
            if line.startswith(MARK):
                msg = json.loads(line[len(MARK):])
                if "error" in msg:
                    raise RuntimeError(f"{where}: {msg['error']}")
                self.tag, self.sockets = msg["tag"], msg["sockets"]
                return

    def request(self, req: dict, timeout: float = 120.0) -> dict:
        """One request to the part (emu.cluster.part.answer); RuntimeError naming the server
        when it fails."""
        with self._talk:
            self.proc.stdin.write(encode(req))
            self.proc.stdin.flush()
            line = self._lines.get(timeout=timeout)
        if line is None or not line.startswith(MARK):
            raise RuntimeError(f"server {self.server.name}: its part stopped answering"
                               + self._see())
        reply = json.loads(line[len(MARK):])
        if "error" in reply:
            raise RuntimeError(f"server {self.server.name}: {req['cmd']}: {reply['error']}")
        return reply

    def forwards(self, op: str, pairs: list[tuple[str, str]]) -> None:
        """Add (`op` "forward") or remove ("cancel") socket forwardings local <- remote
        on the master connection."""
        if not pairs:
            return
        fwd = [x for local, far in pairs for x in ("-L", f"{local}:{far}")]
        r = subprocess.run(self.remote.ssh_argv([], ("-S", str(self.control), "-O", op, *fwd)),
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if r.returncode != 0 and op == "forward":
            raise RuntimeError(f"server {self.server.name}: forwarding sockets failed: "
                               f"{r.stderr.strip()}")

    def clock_offset(self, samples: int = 20) -> tuple[float, float, float]:
        """(seconds the server's clock is ahead of ours, the uncertainty, the same for
        CLOCK_MONOTONIC - the event logs' axis): the part's clocks asked over its
        session `samples` times (as NTP: of the sample with the shortest round trip, the
        middle is taken as the moment the server read its clocks; the uncertainty is
        half that trip)."""
        best = None
        for _ in range(samples):
            with self._talk:
                t0, m0 = time.time(), time.monotonic()
                self.proc.stdin.write(b"clock\n")
                self.proc.stdin.flush()
                line = self._lines.get(timeout=10)
                t1, m1 = time.time(), time.monotonic()
            if line is None or not line.startswith(MARK):
                raise RuntimeError(f"server {self.server.name}: its part did not tell its "
                                   "clock" + self._see())
            theirs = json.loads(line[len(MARK):])
            if best is None or t1 - t0 < best[1]:
                best = (theirs["clock"] - (t0 + t1) / 2, t1 - t0,
                        theirs["mono"] - (m0 + m1) / 2)
        assert best is not None
        return best[0], best[1] / 2, best[2]

    def _see(self) -> str:
        return f"; see {self.log_path}" if self.log_path else ""

    def forward(self, local_dir: Path) -> None:
        """The master SSH connection, forwarding each agent socket to `local_dir`."""
        fwd = []
        for sw, path in self.sockets.items():
            fwd += ["-L", f"{local_dir / (sw + '.sock')}:{path}"]
        self.forwarder = _ssh_popen(
            self.remote.ssh_argv(["-N"], ("-M", "-S", str(self.control), "-o",
                                          "ExitOnForwardFailure=yes", "-o",
                                          "StreamLocalBindUnlink=yes", *fwd)),
            self.run, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        deadline = time.monotonic() + FORWARD_TIMEOUT_S
        want = [local_dir / f"{sw}.sock" for sw in self.sockets] + [self.control]
        while not all(p.exists() for p in want):
            if self.forwarder.poll() is not None or time.monotonic() > deadline:
                why = (self.forwarder.stderr.read().decode(errors="replace").strip()
                       if self.forwarder.poll() is not None else "timed out")
                raise RuntimeError(f"server {self.server.name}: forwarding its agents' "
                                   f"control sockets failed: {why}")
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        """Close the part's stdin (it tears down), wait; then the master connection."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("server %s: its part did not stop in %g s", self.server.name,
                            timeout)
                self.proc.terminate()
                self.proc.wait(10)
            while True:  # its last words: the files it kept (emu.cluster.part)
                try:
                    line = self._lines.get(timeout=5)
                except queue.Empty:
                    break
                if line is None:
                    break
                if line.startswith(MARK) and '"files"' in line[:30]:
                    self.files = json.loads(line[len(MARK):])["files"]
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.terminate()
            try:
                self.forwarder.wait(10)
            except subprocess.TimeoutExpired:
                self.forwarder.kill()
                self.forwarder.wait()


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
            from pyroute2 import IPRoute
            with IPRoute() as ipr:
                address[self.here.name] = underlay_to(ipr, address[others[0].name])[1]
        self.latency = self.measure(address)
        self.plan = clusterplan.plan(self.fabric, self.placement, self.servers.names(),
                                     address, self.latency, self.tag, frontend=self.here.name)
        self.part = self.plan[self.here.name]
        self.local = set(self.part.nodes)
        options = {"shaping": self.shaping, "test_drop_rate": self.test_drop_rate,
                   "switch_kind": self.switch_kind, "qos": self.qos,
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
                   timeout: float = 20.0, **options) -> dict[str, str]:
        """FabricNet.start_nics over the servers: each server starts its hosts' NICs;
        the other servers' control sockets are forwarded to the paths they would have
        here (counters, the sampler, a job's watch work unchanged), while their workers
        use the servers' own (`worker_sockets`)."""
        gpus = list(gpus or self.fabric.gpus)
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
