"""Run one worker of a job the way torchrun would, with the "emu" backend available.

    python -m collectives.run SCRIPT [ARGS...]
    python -m collectives.run --module PACKAGE.MODULE [ARGS...]

Registers the backend (book ch.14; `collectives.backend`) and makes it the default for
CPU tensors; translates whatever backend the script names for its CPU tensors ("gloo",
"nccl", "cpu:gloo,cuda:nccl", none) into the one that runs (`collectives.aliases`:
EMU_BACKEND, "emu" by default - the emulated RoCEv2 fabric - or "gloo" for torch's own);
then runs the script or module as __main__ with the given arguments, as `python
SCRIPT` under torchrun does: `sys.argv[0]` is the script, `sys.path[0]` its directory
(a module beside it imports), `__file__` set; for `--module`, `sys.path[0]` is the
working directory, as for `python -m`. The working directory is the launcher's choice
(`emu run --cwd`, default where emu was started). The torchrun variables (RANK,
WORLD_SIZE, MASTER_ADDR, ...) come from the launcher (`collectives.launch`).
"""

from __future__ import annotations

import os
import runpy
import sys

from collectives import aliases, backend


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    target = os.environ.get("EMU_BACKEND", "emu")
    if target not in aliases.TARGETS:
        print(f"collectives.run: EMU_BACKEND must be {' or '.join(aliases.TARGETS)}, "
              f"got {target!r}", file=sys.stderr)
        return 2
    backend.register(default_for_cpu=target == "emu")
    aliases.install(target)
    if args[0] == "--module":
        if len(args) < 2:
            print("collectives.run: --module needs a module name", file=sys.stderr)
            return 2
        sys.argv = [args[1]] + args[2:]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(args[0])
        sys.argv = [args[0]] + args[1:]
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
