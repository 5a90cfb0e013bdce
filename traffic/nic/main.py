"""The emulated RDMA NIC (RNIC): one process per GPU NIC, in the host namespace.

    python -m traffic.nic CONFIG.json [--log FILE]

Book ch.9 (Figures 9-5/9-6: the NIC turns a work request into BTH/RETH frames, the
receiving NIC checks P_Key and R_Key and places the payload in registered memory, then
completes on the CQ), ch.11 (Figure 11-3: ECN-marked data makes the receiving NIC send a
CNP with DSCP 48; the sending NIC lowers its rate, DCQCN; PFC pauses stop the RoCE
priority, 3 by default) and ch.12 (Figures 12-1..12-3 WRITE FIRST/MIDDLE/LAST, 12-7
WRITE ONLY for spraying).

The process is three pieces:
* configuration: traffic.nic.nicconfig (a JSON file written by the orchestrator);
* the device and its data path: traffic.nic.nicverbs (verbs objects, QPs with their RC
  transport, frame template and DCQCN reaction point) and traffic.nic.datapath (raw
  socket, pacing, PFC, CNPs; retransmission timeouts are model seconds converted to
  lab time with emucore.timedil);
* events: docs/EVENTS.md's NIC events, appended to NicConfig.events_path
  (emucore.eventlog), flushed on every counters request, closed when the process stops;
* control: JSON lines on a Unix socket (traffic.nic.client is the client), one thread
  per client, and CM (traffic.nic.cm REQ/REP/RTU) over TCP on the NIC's IP, port 18515 by
  default; both in traffic.nic.ctl. One lock guards all NIC state; the data path holds
  it for one loop iteration at a time.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

from emucore import rtsched
from traffic.nic.nicconfig import NicConfig
from traffic.nic.ctl import NicControl
from traffic.nic.datapath import Nic

log = logging.getLogger("traffic.nic")


def main(argv: list[str] | None = None) -> int:
    """Entry point: read the config, serve the control socket and CM, run the data path."""
    ap = argparse.ArgumentParser(prog="python -m traffic.nic", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", help="NicConfig JSON file")
    ap.add_argument("--log", default=None, help="log file (default stderr)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(filename=a.log, level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = NicConfig.from_json(Path(a.config).read_text())
    try:  # EMU_SCHED (emucore.rtsched), before any thread: the NIC's threads inherit it
        sched = rtsched.apply()
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    nic = Nic(cfg)
    server = NicControl(nic)

    def on_term(*_: object) -> None:
        nic.running = False
        nic.wake()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    server.start()
    cc = (f"UET ({cfg.uet_config().mode}, NSCC)" if cfg.transport == "uet"
          else f"RoCEv2 RC, DCQCN {cfg.dcqcn}")
    log.info("NIC %s up on %s (%s), link %g bit/s model, TDF %g, %s, scheduling %s", cfg.gpu,
             cfg.ifname, cfg.ip, cfg.model_bps, cfg.tdf, cc, sched)
    try:
        nic.run()
    finally:
        server.close()
        with nic.lock:  # control threads may still be emitting
            nic.ev.close(time.monotonic())
        log.info("NIC %s: %s", cfg.gpu, json.dumps(nic.c))
        nic.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
