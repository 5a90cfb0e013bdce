"""What `emu run` shows while it works: one plain line per phase (none with --quiet)
and, on a terminal, a rich spinner for the long phases (CI logs keep the plain lines)."""

from __future__ import annotations

import contextlib
import sys

from rich.console import Console


class Terminal:
    """The run's phase output."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def say(self, *args, **kwargs) -> None:
        """Print a phase line unless quiet."""
        if not self.quiet:
            print(*args, **kwargs)

    def phase(self, text: str):
        """A spinner for a long phase on a terminal; nothing when quiet or not a TTY (the
        phase's own plain line was printed already)."""
        if self.quiet or not sys.stdout.isatty():
            return contextlib.nullcontext()
        return Console().status(text)
