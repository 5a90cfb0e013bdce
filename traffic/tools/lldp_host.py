"""Host-side LLDP/DCBX speaker: advertises PFC (priority 3), ETS and application
priority on every GPU NIC of a host, as a RoCE NIC does (book ch.11, Capture 11-1), so
switch ports in `priority-flow-control mode auto` turn PFC on.

    python -m traffic.tools.lldp_host --host h1 --ifaces nic1,nic2 [--qos book] [--interval 1]

Runs until SIGTERM. One process per host, started by `emu run` when QoS is on.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import time

from emucore.qos.dcbx import build_lldp_frame
from emucore.qos.load import load_qos
from traffic.tools.rawgen import iface_mac


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    ap = argparse.ArgumentParser(prog="python -m traffic.tools.lldp_host", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", required=True, help="system name to advertise")
    ap.add_argument("--ifaces", required=True, help="comma-separated NIC interfaces")
    ap.add_argument("--qos", default="book", help="QoS config whose DCBX TLVs to advertise")
    ap.add_argument("--interval", type=float, default=1.0, help="lab seconds between frames")
    a = ap.parse_args(argv)
    cfg = load_qos(a.qos)
    socks = []
    for ifname in a.ifaces.split(","):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((ifname, 0))
        m = iface_mac(ifname)
        # the NIC emulator speaks PFC, not CBFC: its link keeps PFC (emucore.qos.cbfc)
        socks.append((s, build_lldp_frame(m, m, ifname, a.host, cfg, cbfc_capable=False)))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        for s, frame in socks:
            try:
                s.send(frame)
            except OSError:
                pass
        time.sleep(a.interval)


if __name__ == "__main__":
    sys.exit(main())
