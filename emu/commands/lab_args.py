"""The `emu lab` command line: argparse for `emu lab list | show | run | results` (what
they do: emu.lab.command, emu.lab.publish). Apart from them, so that building
`python -m emu`'s parser imports none of the labs' machinery (Scapy, matplotlib, rich;
docs/PERFORMANCE.md "CLI start").
"""

from __future__ import annotations

from emu.run.options import seed_arg
from emucore import datapath, rtsched


def add_parser(sub) -> None:
    """The `lab` subcommand and its own subcommands."""
    p = sub.add_parser("lab", help="the book's experiments as labs with a verdict",
                       description="Labs reproduce the book's experiments (ch.8-14) on the "
                                   "emulated fabric and judge them from measured evidence: "
                                   "an event log of every agent and NIC, sampled metrics, "
                                   "counters and captures. Lab files: labs/*.yaml "
                                   "(docs/LABS.md; write your own).")
    lsub = p.add_subparsers(dest="lab_command", metavar="ACTION", required=True)
    lsub.add_parser("list", help="the labs: id, title, book figure, topology, lab time")
    s = lsub.add_parser("show", help="a lab's story, the book's steps, variants and checks")
    s.add_argument("id", help="a lab id (L11.4, case-insensitive) or a lab file")
    r = lsub.add_parser("run", help="run a lab (needs root); exit 0 only if every check "
                                    "passed and the lab kept up")
    r.add_argument("id", nargs="?", help="a lab id (L11.4) or a lab file")
    r.add_argument("--all", action="store_true", help="every lab of the catalogue, then a "
                                                      "table lab x verdict x lab time")
    r.add_argument("--variant", default=None, help="only this variant (ratio checks that "
                                                   "need the others are then not measured)")
    r.add_argument("--tdf", type=float, default=None, help="time-dilation factor for every "
                                                           "variant (default: the lab file's)")
    r.add_argument("--seed", type=seed_arg, default=1, metavar="N",
                   help="seed of every switch's and NIC's random draws (as `emu run "
                        "--seed`: WRED dice, spray, QPNs, PSNs, UET entropy; default 1); "
                        "lab.json records it")
    r.add_argument("--datapath", choices=datapath.MODES, default=datapath.DEFAULT,
                   help="the per-frame code (as `emu run --datapath`): auto (default), "
                        "python or fast; lab.json records it per variant")
    r.add_argument("--sched", choices=rtsched.MODES, default=rtsched.DEFAULT,
                   help="how switch agents and NICs are scheduled (as `emu run --sched`): "
                        "auto (default: real-time round robin for flows, normal for a "
                        "variant with a PyTorch job), rr or normal")
    r.add_argument("--out", default=None, metavar="DIR",
                   help="run directory (default runs/lab-<id>-<time>; with --all the parent)")
    r.add_argument("--quiet", action="store_true", help="only the verdict")
    r.add_argument("--results", default=None, metavar="PATH",
                   help="with --all: write the results file here instead of "
                        "docs/LAB_RESULTS.md")
    r.add_argument("--no-results", action="store_true",
                   help="with --all: do not write the results file")
    r.add_argument("--judge", action="store_true",
                   help="do not run: judge the run in --out DIR again (after editing the "
                        "lab's checks; no root needed)")
    _results_parser(lsub)


def _results_parser(lsub) -> None:
    """The `emu lab results` subcommand."""
    r = lsub.add_parser(
        "results", help="write docs/LAB_RESULTS.md again from existing run directories",
        description="Write docs/LAB_RESULTS.md from run directories without rerunning: "
                    "each RUNDIR holds a lab.json (emu lab run ID) or is a parent of such "
                    "directories (runs/, after emu lab run --all), or is an earlier "
                    "results file whose entries of the current lab files are kept as they "
                    "are (emu lab results docs/LAB_RESULTS.md runs/L11.7 updates one lab). "
                    "Every lab of the catalogue gets a row; a lab without a result of its "
                    "current lab file says why. No root needed.")
    r.add_argument("rundirs", nargs="*", metavar="RUNDIR",
                   help="a lab's run directory, a directory of them, or an earlier results "
                        "file to keep entries from (none: every lab is listed as not run)")
    r.add_argument("--out", default=None, metavar="PATH",
                   help="write here instead of docs/LAB_RESULTS.md")
