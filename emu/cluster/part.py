"""`python -m emu.cluster.part`: one server's part of a fabric spread over several (issue 17),
started by emu.cluster.net over SSH on every server but the one `emu run` runs on - the
role of Mininet cluster mode's remote node shells, one process per server.

Protocol, over the SSH session's pipes: the first line on stdin is the spec (base64 of
a pickle: the Fabric, the emu.cluster.plan.ServerPart, FabricNet's options - the same
emu on both ends, `emu.cluster.remote.check`). The part builds its namespaces, tunnel ends and
agents with emu.realise.net.FabricNet under a tag of this server's (so `emu clean` here finds
them), then prints one line `emu-part {"tag", "sockets": switch -> control socket}` -
or `emu-part {"error": ...}` and exits 1. It stays up until stdin closes (the
controller stopped, or died: sshd closes the session) or SIGTERM/SIGHUP, and then
tears everything down - its last line, once its processes are gone, `emu-part {"files":
name -> text}` with their logs and event files (events/<node>.jsonl), which live in
its state directory until then. Meanwhile a line `clock` is answered with `emu-part {"clock":
<time.time()>, "mono": <time.monotonic()>}` (the controller measures this server's clock
offsets over the session),
and any other line is a request encoded as the spec (`answer`), answered with one
`emu-part {...}` line.
"""

from __future__ import annotations

import base64
import json
import pickle
import signal
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

from emu.realise import nsutil
from emu.realise.net import FabricNet
from emu.realise.nodeops import CALLS
from traffic.nic.client import digest, fill_random, is_zero, new_shm

MARK = "emu-part "


def encode(spec: dict) -> bytes:
    """The spec line the controller writes."""
    return base64.b64encode(pickle.dumps(spec)) + b"\n"


def files(d: Path, glob: str) -> dict[str, str]:
    """Name -> text of the files of `d` whose names match `glob`."""
    return {p.name: p.read_text(errors="replace") for p in sorted(d.glob(glob)) if p.is_file()}


class Blocks:
    """Shared-memory blocks this part made for the controller's RDMA workloads (its
    NICs register them: traffic.workloads.rdma `memory`, emu.cluster.proxies.RemoteShm)."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.made: dict[str, shared_memory.SharedMemory] = {}

    def answer(self, req: dict) -> dict:
        """create (size -> name), fill (random bytes), digest (SHA-256), zero (no byte
        written), drop - the last four on `length` bytes of block `name`."""
        op = req["op"]
        if op == "create":
            shm = new_shm(self.run, int(req["size"]))
            self.made[shm.name] = shm
            return {"name": shm.name}
        shm = self.made.get(req["name"])
        if shm is None:
            return {"error": f"no block {req['name']!r}"}
        view = shm.buf[:req.get("length", shm.size)]
        try:
            if op == "fill":
                fill_random(view)
                return {"ok": True}
            if op == "digest":
                return {"digest": digest(view)}
            if op == "zero":
                return {"zero": is_zero(view)}
            if op == "drop":
                view.release()
                self.drop(req["name"])
                return {"ok": True}
            return {"error": f"unknown block op {op!r}"}
        finally:
            view.release()

    def drop(self, name: str) -> None:
        shm = self.made.pop(name)
        shm.close()
        try:
            shm.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        for name in list(self.made):
            self.drop(name)


def answer(fnet: FabricNet, line: bytes, blocks: Blocks | None = None) -> dict:
    """One request of the controller (a spec-encoded dict with "cmd"): start_nics
    (FabricNet.start_nics: GPU -> its NIC's control socket here), stop_nics, files (the
    text of a directory's files whose names match a glob, for results workers wrote
    here), ops (a fault's action in a node's namespace: emu.realise.nodeops.NodeOps `fn` with
    `args`), shm (memory blocks for the NICs here: `Blocks`); {"error": ...} when it
    fails."""
    try:
        req = pickle.loads(base64.b64decode(line))
        cmd = req["cmd"]
        if cmd == "start_nics":
            return {"sockets": fnet.start_nics(req["dcqcn"], req["mtu"], req["gpus"],
                                               req["timeout"], **req["options"])}
        if cmd == "stop_nics":
            fnet.stop_nics()
            return {"ok": True}
        if cmd == "files":
            return {"files": files(Path(req["dir"]), req["glob"])}
        if cmd == "shm" and blocks is not None:
            return blocks.answer(req)
        if cmd == "ops":  # a fault's action in one of our namespaces (emu.realise.nodeops)
            if req["fn"] not in CALLS:
                return {"error": f"unknown call {req['fn']!r}"}
            getattr(fnet.node_ops(req["node"]), req["fn"])(*req["args"])
            return {"ok": True}
        return {"error": f"unknown request {cmd!r}"}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _stop(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    """Build the part, report, wait for stdin to close, tear down."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    line = sys.stdin.buffer.readline()
    fnet = None
    blocks = None
    try:
        spec = pickle.loads(base64.b64decode(line))
        tag = nsutil.new_tag()
        run_dir = nsutil.STATE_DIR / tag / "run"  # logs and events, sent back at the end
        (run_dir / "events").mkdir(parents=True)
        fnet = FabricNet(spec["fabric"], part=spec["part"], tag=tag, run_dir=run_dir,
                         **spec.get("options", {}))
        fnet.before_clean = lambda: print(MARK + json.dumps({"files": {
            **files(run_dir, "*.log"), **{f"events/{k}": v for k, v in
                                          files(run_dir / "events", "*.jsonl").items()}}}),
            flush=True)
        blocks = Blocks(tag)
        fnet.start()
        socks = {sw.name: str(fnet.control_path(sw.name)) for sw in fnet.local_switches()}
        print(MARK + json.dumps({"tag": fnet.tag, "sockets": socks}), flush=True)
        for line in iter(sys.stdin.buffer.readline, b""):
            if line.strip() == b"clock":  # the controller reads our clocks (emu.cluster.partclient)
                print(MARK + json.dumps({"clock": time.time(), "mono": time.monotonic()}),
                      flush=True)
            elif line.strip():
                print(MARK + json.dumps(answer(fnet, line, blocks)), flush=True)
        return 0
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        print(MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    finally:
        if blocks is not None:
            blocks.close()
        if fnet is not None:
            fnet.stop()


if __name__ == "__main__":
    sys.exit(main())
