"""How fast this machine runs the switch agent's pipeline, in one process (no system
calls): `bench switch` prints the Python agent's per path and mode, `emu run --tdf auto`
measures the routed, book-QoS frame for a fraction of a second on the pipeline the run's
agents will use (`python -m emu.observe.calibrate --path python|c`, run as a child so
that `emu --help` never imports the pipeline) and sizes the TDF from it (emu.run.autotdf).

`--path python` times `switch_agent.agent.Agent.on_frame` / `service` (`time_frames`
below); `--path c` the C pipeline of the same agent (`switch_agent.fast.pipeline.
FastPipeline` over it, issue 30, docs/DATAPATH.md) with its loop inside C
(`pipeline.time_frames(..., in_c=True)`, `run_frames`), as the fast agent's own ring
poll loop drives it - docs/PERFORMANCE.md "The compiled data path" has both figures. A C
module that is not built is an error that says so (`main` prints it as "error"), never a
Python figure in its place.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

from emucore.qos.qosconfig import InterfaceQos, QosConfig
from emucore.wire.ether import mac_bytes
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig, PortConfig
from switch_agent.forward import FibRoute
from traffic.tools.rawgen import build_frame

PATHS = ("python", "c")
#: frames per timed batch (Python's as fitted, ~10-40 ms; C's ~2-3 ms, over a hundred
#: batches in 0.3 s: on 2026-11-27 beside other work, six runs read 0.455-0.465 us where
#: 20,000-frame batches read 0.47-0.83 us in eleven)
BATCH = {"python": 2000, "c": 5000}

ROCE_FRAME = 14 + 20 + 8 + 12 + 16 + 4096 + 4  # Eth/IPv4/UDP/BTH/RETH/4096 B/ICRC
ROUTER, H1, H2, SPINE = ("02:00:00:00:05:00", "02:00:00:00:01:01", "02:00:00:00:02:01",
                         "02:00:00:00:07:01")


class _NullSock:
    """Swallows frames: measures the pipeline, not the system calls."""

    def send(self, frame: bytes) -> int:
        return len(frame)


def frames() -> dict[str, bytes]:
    """A switched (intra-rail) and a routed (cross-rail) DSCP 24 ECT RoCE-sized frame."""
    return {
        "switched": bytes(build_frame(mac_bytes(H1), mac_bytes(H2), "10.0.1.11", "10.0.1.12",
                                      ROCE_FRAME, dport=4791, dscp=24, ecn=2)),
        "routed": bytes(build_frame(mac_bytes(H1), mac_bytes(ROUTER), "10.0.1.11", "10.0.2.14",
                                    ROCE_FRAME, dport=4791, dscp=24, ecn=2)),
    }


def pipeline_agent(qos: bool) -> Agent:
    """A rail switch agent (two hosts, one spine) without sockets: frames go nowhere."""
    ports = (PortConfig("eth1", ROUTER, 200e9, math.inf, 0.0, 101, "h1:nic1"),
             PortConfig("eth2", ROUTER, 200e9, math.inf, 0.0, 101, "h2:nic1"),
             PortConfig("eth5", "02:00:00:00:05:05", 400e9, math.inf, 0.0, None, "spine1:eth1"))
    q = QosConfig(default_interface=InterfaceQos(pfc_mode="on")).to_dict() if qos else None
    cfg = AgentConfig("rail1", 5000.0, "/nonexistent", ports,
                      svi={"vlan101": {H1: "eth1", H2: "eth2"}}, qos=q)
    a = Agent(cfg, open_sockets=False)
    for p in a.ports.values():
        p.sock = _NullSock()
    a.install_fib([FibRoute("10.0.1.0/24", ((None, "vlan101"),)),
                   FibRoute("10.0.2.0/24", (("172.16.1.1", "eth5"),))],
                  {("vlan101", "10.0.1.12"): H2, ("eth5", "172.16.1.1"): SPINE},
                  {"10.0.1.1": "vlan101"})
    a.next_lldp = math.inf
    return a


def time_frames(agent: Agent, frame: bytes, n: int, clock=time.perf_counter) -> float:
    """Seconds per frame through `agent` (rx -> classify -> PFC -> WRED -> queue ->
    schedule -> shape -> tx), `n` frames, on `clock` (wall time unless told)."""
    inp = agent.ports["eth1"]
    t0 = clock()
    for i in range(n):
        agent.on_frame(inp, frame, 0.0)
        if i & 15 == 15:
            agent.service(0.0)
    agent.service(0.0)
    return (clock() - t0) / n


def c_timer(agent: Agent) -> Callable[[bytes, int, Callable[[], float]], float]:
    """`time_frames` for the C pipeline over `agent`'s configuration and tables (ImportError,
    saying so, when switch_agent.fast._pipeline is not built from today's sources)."""
    from switch_agent.fast import pipeline  # only when the C path is asked for
    fast = pipeline.FastPipeline(agent.cfg, control=agent)
    return lambda frame, n, clock: pipeline.time_frames(fast, frame, n, clock=clock, in_c=True)


def measure(seconds: float = 0.3, kind: str = "routed", path: str = "python") -> float:
    """Seconds per frame of the book-QoS pipeline on `kind` frames on `path` (python or c),
    timed for about `seconds` (batches of `BATCH[path]` after a warm-up batch; the
    fastest batch).

    Timed in this thread's CPU time, not wall time: a process that shares the CPU
    while the calibration runs takes time slices away from it, which a wall clock
    would count as work (one busy process beside it on the same CPU reads ~2x) and
    `--tdf auto` would turn into a TDF several times larger on the same machine
    (issue 30). How busy the machine is during the run is the guard's to judge."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    agent, frame, n = pipeline_agent(qos=True), frames()[kind], BATCH[path]
    run = (c_timer(agent) if path == "c"
           else lambda f, k, clock: time_frames(agent, f, k, clock))
    run(frame, n // 4, time.thread_time)  # warm-up
    best, t_end = math.inf, time.monotonic() + seconds
    while time.monotonic() < t_end:
        best = min(best, run(frame, n, time.thread_time))
    return best


def main(argv: list[str] | None = None) -> int:
    """`python -m emu.observe.calibrate [--seconds S] [--path python|c]`: prints
    {"path", "s_per_frame", "frames_per_s"}, or {"path", "error"} and exits 1 when the
    C pipeline cannot be loaded (not built)."""
    ap = argparse.ArgumentParser(prog="python -m emu.observe.calibrate", description=__doc__)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--path", choices=PATHS, default="python")
    args = ap.parse_args(argv)
    try:
        s = measure(args.seconds, path=args.path)
    except ImportError as exc:
        print(json.dumps({"path": args.path, "error": str(exc)}))
        return 1
    print(json.dumps({"path": args.path, "s_per_frame": s, "frames_per_s": 1 / s}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
