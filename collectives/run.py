"""Run one worker of a job the way torchrun would, with the "emu" backend available.

    python -m collectives.run SCRIPT [ARGS...]
    python -m collectives.run --module PACKAGE.MODULE [ARGS...]

Registers the backend (book ch.14; `collectives.backend`) and makes it the default for
CPU tensors, so an unmodified script calling `dist.init_process_group()` (or
`init_process_group(backend="emu")`) talks over the emulated RoCEv2 fabric; then runs
the script or module as __main__ with the given arguments. The torchrun variables
(RANK, WORLD_SIZE, MASTER_ADDR, ...) come from the launcher (`collectives.launch`).
"""

from __future__ import annotations

import runpy
import sys

from collectives import backend


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    backend.register(default_for_cpu=True)
    if args[0] == "--module":
        if len(args) < 2:
            print("collectives.run: --module needs a module name", file=sys.stderr)
            return 2
        sys.argv = [args[1]] + args[2:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
