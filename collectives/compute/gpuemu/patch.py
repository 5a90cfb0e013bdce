"""Replacing attributes of torch's modules and classes, and putting them back (the
emulated GPUs are installed for a script's run and removed after: `Patches.undo`)."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patches:
    """Every attribute replaced, with what was there, to undo in reverse order."""

    def __init__(self) -> None:
        self.done: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """Replace owner.name (owner: a module or a class) by value."""
        old = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else \
            getattr(owner, name, _MISSING)
        self.done.append((owner, name, old))
        setattr(owner, name, value)

    def set_all(self, owners: list[Any], table: dict[str, Any]) -> None:
        """Replace every name of `table` in each owner that has it (the first always)."""
        for i, owner in enumerate(owners):
            for name, value in table.items():
                if i == 0 or hasattr(owner, name):
                    self.set(owner, name, value)

    def undo(self) -> None:
        """Put everything back."""
        while self.done:
            owner, name, old = self.done.pop()
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
