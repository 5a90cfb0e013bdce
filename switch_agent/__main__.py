"""`python -m switch_agent CONFIG.json`: run one switch agent in the current namespace."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from emucore import rtsched
from switch_agent import fastagent
from switch_agent.agentconfig import AgentConfig
from switch_agent.serve import serve

log = logging.getLogger("switch_agent")


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(prog="python -m switch_agent",
                                 description="emu switch agent: forwards every transit frame "
                                             "of one switch namespace (started by `emu run`).")
    ap.add_argument("config", help="agent configuration JSON written by emu")
    ap.add_argument("--log", default=None, help="log file (default: stderr)")
    args = ap.parse_args(argv)
    logging.basicConfig(filename=args.log, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = AgentConfig.from_json(Path(args.config).read_text())
    try:  # EMU_SCHED (emucore.rtsched): real-time round robin where emu resolved it to rr
        log.info("%s: scheduling %s", cfg.name, rtsched.apply())
    except ValueError as exc:
        print(f"switch agent {cfg.name}: {exc}", file=sys.stderr)
        return 2
    try:  # EMU_DATAPATH (emucore.datapath): the Python agent, or its frames in C
        agent = fastagent.build(cfg)
    except (ValueError, ImportError) as exc:  # fast: Unsupported (naming the field), unbuilt
        log.error("%s: refused: %s", cfg.name, exc)
        print(f"switch agent {cfg.name}: {exc}", file=sys.stderr)
        return 2

    def stop(signum, _frame):
        # epoll.poll() is retried after EINTR (PEP 475): leave the loop by raising
        agent.running = False
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        serve(agent)
    finally:  # SIGTERM too: the event log's last events and its suppressed count
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
