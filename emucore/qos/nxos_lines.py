"""NX-OS configuration text as the parser sees it: logical lines of tokens (with the
book's PDF artefacts mended) and Ethernet interface names (book ch.11 Example 11-7:
``interface ethernet1/1-8``). Used by `emucore.qos.nxos` and `switch_agent.show`.
"""

from __future__ import annotations

import re

_IFACE = re.compile(r"^(?:ethernet|eth)(\d+)(?:/(\d+)(?:-(\d+))?)?$", re.I)
_SLOT = re.compile(r"^(\d+)/(\d+)(?:-(\d+))?$")
#: a CLI prompt printed with the commands (book Example 12-1: ``switch(config-dlb)#``)
_PROMPT = re.compile(r"^[\w.-]*\(config[\w-]*\)#$")


def interface_name(nxos: str) -> str:
    """``Ethernet1/5`` -> ``eth5`` (the emulator's port); other modules keep the NX-OS name."""
    m = _IFACE.match(nxos.replace(" ", ""))
    if not m:
        raise ValueError(f"not an Ethernet interface: {nxos!r}")
    if m.group(2) is None:
        return f"eth{int(m.group(1))}"
    return f"eth{int(m.group(2))}" if m.group(1) == "1" else f"Ethernet{m.group(1)}/{m.group(2)}"


class Line:
    """Tokens of one logical line with a cursor; errors name the line."""

    def __init__(self, num: int, text: str) -> None:
        self.num, self.text = num, text
        self.tok = [t for t in text.replace(", ", ",").split() if not _PROMPT.match(t)]
        self.i = 0

    def error(self, why: str) -> ValueError:
        """A ValueError naming this line."""
        return ValueError(f"line {self.num}: {self.text.strip()!r}: {why}")

    def more(self) -> bool:
        """True while tokens are left."""
        return self.i < len(self.tok)

    def peek(self, k: int = 0) -> str:
        """The k-th next token, lower case, without taking it ('' at the end)."""
        return self.tok[self.i + k].lower() if self.i + k < len(self.tok) else ""

    def take(self, what: str = "a value") -> str:
        """The next token; an error naming `what` at the end."""
        if not self.more():
            raise self.error(f"expected {what}")
        self.i += 1
        return self.tok[self.i - 1]

    def word(self, *choices: str) -> str:
        """The next token, lower case, which must be one of `choices`."""
        w = self.take(" or ".join(choices)).lower()
        if w not in choices:
            raise self.error(f"expected {' or '.join(choices)}, got {w!r}")
        return w

    def number(self, what: str, lo: int, hi: int) -> int:
        """The next token as an int in lo..hi."""
        t = self.take(what)
        if not t.isdigit() or not lo <= int(t) <= hi:
            raise self.error(f"{what}: must be {lo}..{hi}, got {t!r}")
        return int(t)

    def numlist(self, what: str, lo: int, hi: int) -> list[int]:
        """The next token as a list like 24,26,30-32 of ints in lo..hi."""
        t = self.take(what)
        out: list[int] = []
        for part in t.split(","):
            a, _, b = part.partition("-")
            if not a.isdigit() or (b and not b.isdigit()):
                raise self.error(f"{what}: not a number list, got {t!r}")
            a_, b_ = int(a), int(b or a)
            if not lo <= a_ <= b_ <= hi:
                raise self.error(f"{what}: must be {lo}..{hi}, got {t!r}")
            out.extend(range(a_, b_ + 1))
        return out


def logical_lines(text: str) -> list[Line]:
    """Non-blank, non-comment lines; a line ending in '-' joined with the next (PDF wrap)."""
    out: list[Line] = []
    pending: tuple[int, str] | None = None
    for num, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("!") or s.strip(". ") == "":
            continue
        if pending:
            num, s = pending[0], pending[1] + s
            pending = None
        if s.endswith("-"):
            pending = (num, s)
            continue
        out.append(Line(num, s))
    if pending:
        out.append(Line(*pending))
    return out


def interfaces(ln: Line) -> list[str]:
    """Emulator port names of an interface spec: ethernet1/1-8, eth3, lists with commas."""
    spec = ""
    while ln.more():
        nxt = ln.peek()
        if spec and not (_SLOT.match(nxt) or nxt.startswith(",") or spec.endswith(",")):
            break
        spec += ln.take()
    names: list[str] = []
    for part in filter(None, spec.split(",")):
        m = _IFACE.match(part)
        if not m:
            raise ln.error(f"not an Ethernet interface: {part!r}")
        if m.group(2) is None:
            names.append(f"eth{int(m.group(1))}")
            continue
        lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
        if hi < lo:
            raise ln.error(f"interface range {part!r}: end before start")
        names.extend(interface_name(f"ethernet{m.group(1)}/{n}") for n in range(lo, hi + 1))
    if not names:
        raise ln.error("expected an interface name, e.g. ethernet1/5")
    return names
