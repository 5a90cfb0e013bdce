"""`emu clean`: remove what emu runs left behind - their namespaces, processes, shared
memory and sockets, found by their recorded run state (emu.realise.nsutil), and the parts
of a run spread over servers (emu.cluster.net); never anything emu did not create.
"""

from __future__ import annotations

import argparse
import os
import sys

from emu.cluster.net import ClusterNet
from emu.realise import nsutil
from emucore.runmark import is_tag


def tag_arg(text: str) -> str:
    """`--run` value: a run tag (4 hex digits, printed by `emu run`)."""
    if not is_tag(text):
        raise argparse.ArgumentTypeError(f"a run tag is 4 hex digits, got {text!r}")
    return text



def add_parser(sub) -> None:
    """The `clean` subcommand and its options."""
    p = sub.add_parser("clean", help="remove what emu runs left behind: their namespaces, "
                                      "processes, shared memory and sockets (only emu's)")
    p.add_argument("--run", default=None, metavar="TAG", type=tag_arg,
                   help="only this run (4 hex digits)")
    p.add_argument("--all", action="store_true",
                   help="also runs whose emu process is still alive")


def clean_counts(counts: dict[str, int]) -> str:
    """One run's removals as `emu clean` prints them."""
    return (f"{counts['namespaces']} namespaces, {counts['processes']} processes, "
            f"{counts['shm']} shared-memory segments, {counts['sockets']} sockets")


def main(args: argparse.Namespace) -> int:
    """`emu clean`."""
    if os.geteuid() != 0:
        print("emu clean needs root to remove namespaces: try `sudo python -m emu clean`",
              file=sys.stderr)
        return 2
    states = nsutil.run_states()  # (read before the clean removes them)
    removed = nsutil.clean(args.run, include_live=args.all)
    for t in removed["runs"]:  # a run spread over servers: its parts there (emu.cluster.net)
        for line in ClusterNet.clean_parts(states.get(t, {})):
            print(line)
    if not removed["runs"] and not removed["skipped"]:
        print("Nothing to clean: no emu namespaces, processes, shared memory or run state.")
    for t in removed["runs"]:
        print(f"Removed run {t}: {clean_counts(removed['by_run'][t])}.")
    if len(removed["runs"]) > 1:
        total = {k: sum(c[k] for c in removed["by_run"].values()) for k in nsutil.KINDS}
        print(f"  in all: {clean_counts(total)}.")
    for t in removed["skipped"]:
        print(f"Skipped run {t}: its emu process is still running (use --all to remove it).")
    return 0
