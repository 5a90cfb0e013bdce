"""The frames a switch originates into its own queues: ICMP Time Exceeded for an expired
packet (`AgentOrigins.time_exceeded`, so traceroute shows the hops), and what its kernel
sends into a rail's VLAN through the SVI's CPU port (book ch.13: the rail's gateway
address lives on the switch's SVI; docs/ARCHITECTURE.md "Control plane vs data plane in
a switch").

The SVI is a bridge in the switch's namespace whose one port is a veth pair
(emu.realise.netplan `svi_cpu`); what the kernel sends through the SVI - its reply to a
host's ping of the gateway - arrives at the pair's other end, where the agent reads it
(`CpuPorts.read`) and queues it like a frame of the VLAN (`Agent.from_kernel`): at the
access port of the host it is addressed to, else (broadcast, multicast, unknown) at every
access port of that VLAN (`CpuPorts.targets`).
"""

from __future__ import annotations

import logging

from emucore import rawsock
from switch_agent.forward import Fib, time_exceeded_reply

log = logging.getLogger("switch_agent")

RX_BUDGET = 64  #: frames read from one CPU port per wake-up


class CpuPorts:
    """Each SVI's access ports, and (with sockets) the agent's end of its CPU port."""

    def __init__(self, cfg, ports: dict, l2: dict, open_sockets: bool) -> None:
        #: SVI -> its access ports, in config order (the VLAN's flood set)
        self.members = {svi: list(dict.fromkeys(ports[i] for i in table.values()))
                        for svi, table in cfg.svi.items()}
        self.l2 = l2  # the agent's MAC -> access port table
        #: fd -> (SVI, the socket on its CPU port's agent end)
        self.socks: dict[int, tuple[str, object]] = {}
        if open_sockets:
            for svi, end in cfg.svi_cpu.items():
                sock = rawsock.open_port(end, bypass_qdisc=False)
                self.socks[sock.fileno()] = (svi, sock)

    def targets(self, svi: str, frame: bytes) -> list:
        """The ports a frame the kernel sent through `svi` is queued at."""
        out = self.l2.get(frame[:6])
        return [out] if out is not None and out in self.members[svi] else self.members[svi]

    def read(self, fd: int, handle, now: float) -> None:
        """Up to RX_BUDGET frames from CPU port `fd`, each to handle(svi, frame, now)."""
        svi, sock = self.socks[fd]
        for _ in range(RX_BUDGET):
            try:
                frame = sock.recv(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # the CPU port gone (teardown)
                log.warning("%s: %s", svi, exc)
                return
            handle(svi, frame, now)

    def close(self) -> None:
        for _, sock in self.socks.values():
            sock.close()


class AgentOrigins:
    """The switch's own frames, queued as a frame of queue 0 without an ingress port
    (mixed into `switch_agent.agent.Agent`; the compiled path's are
    switch_agent.fast.pipeline `FastPipeline.time_exceeded` and `from_kernel`)."""

    # what the host class (switch_agent.agent.Agent) provides
    fib: Fib
    port_ip: dict[str, bytes]
    ports: dict
    cpu: CpuPorts
    admin_up: bool
    enqueue: object  # Agent.enqueue(out, q, frame, ingress, tos, now, prio)
    prio_of: object  # Agent.prio_of(frame) -> the PFC priority

    def time_exceeded(self, port, frame: bytes, now: float) -> None:
        """Answer an expired packet with ICMP Time Exceeded (so traceroute shows hops)."""
        reply = time_exceeded_reply(self.fib, self.port_ip.get(port.name), frame)
        if reply is not None:
            out = reply[1]
            self.enqueue(self.ports[reply[0]], 0, out, None, 0, now, self.prio_of(out))

    def from_kernel(self, svi: str, frame: bytes, now: float) -> None:
        """A frame the switch's kernel sent into SVI `svi`'s VLAN (`CpuPorts.read`):
        queued at `CpuPorts.targets`; nothing while the switch is down."""
        if len(frame) >= 16 and self.admin_up:
            for out in self.cpu.targets(svi, frame):
                self.enqueue(out, 0, frame, None, 0, now, self.prio_of(frame))
