"""The Mininet CLI with the fabric's vocabulary (`emu run TOPO --cli`).

GPU names are aliases: ``h1g1 ping h4g2`` runs ``ping -I 10.0.1.11 10.0.2.14`` on
Host-1, so the packets leave through GPU-1's NIC (its own routing table, ch.13) and
cross Rail-1 -> spine -> Rail-2. Other commands on a GPU alias run on its host with
GPU names replaced by NIC addresses (iperf3 gets ``-B``, traceroute ``-s``).
Switch names followed by an NX-OS ``show`` command are answered live by that switch's
agent: ``rail1 show queuing interface eth3``, ``spine1 show interface
priority-flow-control``, ``rail2 show lldp neighbors``, ``rail1 show policy-map``.
Extra commands: ``fabric`` (the wiring plan), ``counters SWITCH`` (live agent counters).
Spread over servers (``--servers``), a node elsewhere runs its commands in its namespace
there (over SSH), agents elsewhere answer on their forwarded sockets; Mininet's own
commands (``nodes``, ``net``, ``pingall``, ``xterm``) know this server's nodes only.
"""

from __future__ import annotations

import subprocess

from mininet.cli import CLI
from mininet.log import error, output, setLogLevel

SOURCE_FLAGS = {"ping": "-I", "traceroute": "-s", "iperf3": "-B", "iperf": "-B"}


class EmuCLI(CLI):
    """Mininet CLI aware of GPU aliases and switch agents."""

    prompt = "emu> "

    def __init__(self, fabric_net, *args, **kwargs):
        self.fnet = fabric_net
        super().__init__(fabric_net.net, *args, **kwargs)

    def expand(self, first: str, args: str) -> tuple[str, str] | None:
        """Translate a GPU-alias command into (host node, command); None if not an alias."""
        gpus = self.fnet.fabric.gpus
        if first not in gpus:
            return None
        gpu = gpus[first]
        words = [gpus[w].ip if w in gpus else (self.mn[w].IP() if w in self.mn else w)
                 for w in args.split()]
        if words and words[0] in SOURCE_FLAGS:
            words[1:1] = [SOURCE_FLAGS[words[0]], gpu.ip]
        return gpu.host, " ".join(words)

    def default(self, line):
        """GPU aliases first, then Mininet's node commands."""
        first, args, line = self.parseline(line)
        switches = {s.name for s in self.fnet.fabric.switches()}
        if first in switches and (args or "").split()[:1] == ["show"]:
            reply = self.fnet.agent_request(first, {"cmd": "show", "text": args})
            if reply.get("ok"):
                output(reply["text"].rstrip() + "\n")
            else:
                error(f"% {reply.get('error')}\n")
            return
        expanded = self.expand(first or "", args or "")
        if expanded is None and first in self.fnet.fabric.nodes and first not in self.mn:
            expanded = (first, args or "")  # a node on another server (emu run --servers)
        if expanded is None:
            return super().default(line)
        if not args:
            error(f"*** Please enter a command for {first} <cmd>\n")
            return
        self.run_on(*expanded)

    def run_on(self, name: str, cmd: str) -> None:
        """`cmd` in node `name`'s shell here, or (emu run --servers) in its namespace on
        the server that runs it, its output printed as it comes."""
        if name in self.mn:
            node = self.mn[name]
            node.sendCmd(cmd)
            self.waitForNode(node)
            return
        p = self.fnet.node(name).popen(["sh", "-c", cmd], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT)
        try:
            for line in p.stdout:
                output(line.decode(errors="replace"))
        except KeyboardInterrupt:  # as Mininet: Ctrl-C ends the command, not the CLI
            p.terminate()
        p.wait()

    def do_fabric(self, _line):
        """Print the fabric's wiring and addressing plan."""
        output(self.fnet.fabric.describe() + "\n")

    def do_counters(self, line):
        """counters SWITCH: live per-port counters of a switch agent."""
        name = line.strip()
        if name not in {s.name for s in self.fnet.fabric.switches()}:
            error(f"*** counters: unknown switch {name!r}\n")
            return
        snap = self.fnet.counters(name)
        output(f"{'port':<6} {'peer':<12} {'rx pkts':>9} {'rx bytes':>12} {'tx pkts':>9} "
               f"{'tx bytes':>12}  drops\n")
        for port, c in snap["ports"].items():
            output(f"{port:<6} {c['peer']:<12} {c['rx_packets']:>9} {c['rx_bytes']:>12} "
                   f"{c['tx_packets']:>9} {c['tx_bytes']:>12}  {c['drops'] or ''}\n")


def open_cli(fabric_net, say=print) -> None:
    """Run the CLI on a live fabric until `exit` (Mininet prints at its 'output' level)."""
    setLogLevel("output")
    say("\nMininet CLI: try `h1g1 ping h4g2`, `counters rail1`, `fabric`, `exit`.")
    EmuCLI(fabric_net)
