"""Processes in the host namespaces: one emulated RDMA NIC per GPU (`traffic.nic.main`, book
ch.9) and one LLDP/DCBX speaker per host (`traffic.tools.lldp_host`, ch.11), started and
stopped by pid (never by name). Every path they are given is absolute. `uet_nic_options`:
the NicConfig fields of a UET NIC under a QoS configuration (emu run, labs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from emu.realise.procs import run_module, stop_procs, wait_ready
from emucore.qos.qosconfig import QosConfig
from topologies.model import Fabric
from traffic.nic.nicconfig import NicConfig
from traffic.nic.client import NicError, request


def start_host_lldp(net, fabric: Fabric, qos_dict: dict, state_dir: Path,
                    hosts=None) -> list:
    """One LLDP/DCBX speaker per host (of `hosts`, default all), advertising PFC on its
    GPU NICs (ch.11), so `priority-flow-control mode auto` ports turn PFC on; returns
    the processes."""
    qos_file = Path(state_dir).resolve() / "qos.json"
    qos_file.write_text(json.dumps(qos_dict))
    procs = []
    for h in fabric.hosts():
        if hosts is not None and h.name not in hosts:
            continue
        nics = [g.nic for g in fabric.gpus.values() if g.host == h.name]
        procs.append(run_module(net[h.name], "traffic.tools.lldp_host",
                                ["--host", h.name, "--ifaces", ",".join(nics),
                                 "--qos", qos_file], stdout=None, stderr=None))
    return procs


class NicProcesses:
    """The RDMA NIC processes of one fabric: GPU -> control socket, and their pids."""

    def __init__(self, net, fabric: Fabric, state_dir: Path, log_dir: Path | None,
                 run: str = "") -> None:
        self.net = net
        self.fabric = fabric
        self.run = run  #: the run's tag: names the memory registered with these NICs
        self.state_dir = Path(state_dir).resolve()
        self.log_dir = Path(log_dir).resolve() if log_dir is not None else None
        #: GPU name -> control socket of its NIC process
        self.sockets: dict[str, str] = {}
        self.procs: list = []

    def start(self, gpus, dcqcn: str, mtu: int, timeout: float, **options) -> dict[str, str]:
        """Start one NIC per GPU (NicConfig `options`), wait until each answers; returns
        GPU -> control socket path."""
        started = {}
        for gpu in gpus:
            sock = str(self.state_dir / f"nic-{gpu}.sock")
            mine = dict(options)  # this GPU's own event file (docs/EVENTS.md)
            mine.setdefault("run", self.run)
            if self.log_dir is not None and "events_path" not in options:
                mine["events_path"] = str(self.log_dir / "events" / f"{gpu}.jsonl")
            cfg = NicConfig.for_gpu(self.fabric, gpu, sock, dcqcn=dcqcn, mtu=mtu, **mine)
            cfg_path = self.state_dir / f"nic-{gpu}.json"
            cfg_path.write_text(cfg.to_json())
            args = [cfg_path]
            if self.log_dir is not None:
                args += ["--log", self.log_dir / f"nic-{gpu}.log"]
            p = run_module(self.net[self.fabric.gpus[gpu].host], "traffic.nic", args,
                           stdout=None, stderr=None)
            self.procs.append(p)
            started[gpu] = (p, sock)
        deadline = time.monotonic() + timeout
        for gpu, (p, sock) in started.items():
            wait_ready(f"NIC {gpu}", p, lambda s=sock: request(s, {"cmd": "ping"}, timeout=1.0),
                       deadline, timeout, (NicError,))
            self.sockets[gpu] = sock
        return {g: s for g, (_, s) in started.items()}

    def stop(self) -> None:
        """Stop every NIC process (SIGTERM, wait)."""
        stop_procs(self.procs)
        self.procs.clear()
        self.sockets.clear()


def uet_nic_options(knobs: dict, qos: QosConfig | None, where: str = "uet") -> dict:
    """NicConfig fields of a UET NIC with these knobs under this QoS: the switches'
    trimmed DSCPs and, when they trim, NSCC's lower target (unless the knobs say)."""
    knobs = dict(knobs)
    trim = qos.trim if qos is not None else None
    if trim is not None:
        knobs.setdefault("trimming", True)
    opts = {"transport": "uet", "uet": knobs,
            "trimmed_dscps": (trim.trimmed_dscp, trim.lasthop_dscp) if trim else (-1, -1)}
    try:
        NicConfig(gpu="g", ifname="i", ip="10.0.0.1", mac="02:00:00:00:00:01",
                  gateway_mac="02:00:00:00:00:02", control="/c", **opts)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return opts
