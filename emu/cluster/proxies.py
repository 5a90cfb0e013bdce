"""What stands here for the things of a node on another server (issue 17): `RemoteNode`
(its namespace there: Mininet's Node.popen over SSH, a job's worker spawned with exactly
its environment, a capture streamed here), `RemoteOps` (a fault's netlink and raw-socket
actions, emu.realise.nodeops.NodeOps, made there by its part) and `RemoteShm` (a
shared-memory block there that a NIC there registers for an RDMA workload). Each reaches
its server through that server's part (emu.cluster.partclient.RemotePart).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from emu.cluster.farzygote import FarForked
from emu.cluster.partclient import RemotePart
from emu.realise import nsutil

class RemoteNode:
    """A node on another server: runs commands in its namespace there."""

    def __init__(self, name: str, netns: str, part: RemotePart) -> None:
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

    def forked(self, fnet, envs: list[dict], out_dir: Path, far_dir: str):
        """The ranks of a job on this node's server, forked from one zygote there
        (emu.cluster.farzygote.FarForked; its log out_dir/zygote-<server>.log here),
        `envs` theirs, their logs and results written in `far_dir` there."""
        return FarForked(fnet, self.part, envs,
                         Path(out_dir) / f"zygote-{self.part.server.name}.log", far_dir)

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

    def __init__(self, part: RemotePart, node: str) -> None:
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

    def __init__(self, part: RemotePart, size: int) -> None:
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

