"""`python -m emu` starts without the heavy libraries (issue 30: the tests and the fabric
runs call the CLI hundreds of times): importing emu.cli, building its parser and
rendering every (sub)command's help load no Scapy, PyTorch, matplotlib, NumPy, rich or
Mininet; the command that needs them imports them when it runs (emu.cli's handlers,
tests/unit/test_layers.py DEFERRED). Checked in a fresh interpreter, whose sys.modules
holds only what that import did."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("scapy", "torch", "matplotlib", "numpy", "rich", "mininet")

PROBE = """
import sys
import argparse
from emu.cli import build_parser

def helps(parser):
    yield parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from helps(sub)

texts = list(helps(build_parser()))
print(len(texts))
print(" ".join(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))))
"""


def _probe(code: str) -> tuple[int, set[str]]:
    r = subprocess.run([sys.executable, "-c", code, *HEAVY], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    count, loaded = r.stdout.splitlines()
    return int(count), set(loaded.split())


def test_parser_and_every_help_import_no_heavy_library():
    count, loaded = _probe(PROBE)
    # the top level, its 8 commands, lab's 4 actions (list, show, run, results)
    assert count == 1 + 8 + 4
    assert loaded == set(), f"building emu's parser imported {sorted(loaded)}"


def test_the_lab_commands_draw_no_plot_on_import():
    """`emu lab list|show` import emu.lab.command (rich, for its tables) but not matplotlib:
    the page imports it when it draws (emu.observe.plots.pyplot); nor Scapy since the lab
    schema's flow keys take RoCEv2's port and `udp_sport` from emucore.wire.roce_codes."""
    _, loaded = _probe(PROBE.replace("from emu.cli import build_parser",
                                     "from emu.cli import build_parser\nimport emu.lab.command"))
    assert loaded == {"rich"}


def test_a_nic_process_starts_without_scapy():
    """Every NIC of a fabric is a `python -m traffic.nic` process: it builds and parses
    frames with emucore.wire.templates / the C framing and takes RoCEv2's and UET's
    constants from emucore.wire.roce_codes / uet_codes, so it does not pay Scapy's
    import (~0.5 s of CPU a process, python -X importtime)."""
    _, loaded = _probe("import sys\nimport traffic.nic.main\nprint(0)\n"
                       "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} "
                       "& set(sys.argv[1:]))))")
    assert loaded == set(), f"a NIC process imported {sorted(loaded)}"
