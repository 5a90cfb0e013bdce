"""The YAML/JSON form of a typed configuration part: one reader and one writer for every
part of the switch configuration (book ch.11-13) - the QoS stages of `emucore.qos.dicts`
(classification, queuing, WRED, PFC, watchdog, interfaces, CNP), `emucore.qos.trim`,
`emucore.qos.llr`, `emucore.qos.cbfc` and the load balancing of `emucore.lbconfig`.

A part is a frozen dataclass that validates itself (its errors name the field); its
`Form` says how YAML spells it: each YAML key's field, the keys whose YAML value is read
first (sizes "150KB", durations "200ms", lists) and how a field is written back. Unknown
keys and bad values raise ValueError naming the field as the YAML spells it
(``qos.queuing.queues[3].wred.min``, ``--trim.threshold``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: reads one YAML value: (the field's YAML path, the value) -> the field's value
Reader = Callable[[str, Any], Any]


def mapping(path: str, value: Any, known: tuple[str, ...],
            aliases: Mapping[str, str] | None = None, switch: bool = False) -> dict:
    """`value` as a dict with only `known` keys (or `aliases`); None -> {}, and with
    `switch` also `true` -> {} (the defaults)."""
    if value is None or (switch and value is True):
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a mapping{' or true' if switch else ''}, "
                         f"got {value!r}")
    for k in value:
        if k not in known and k not in (aliases or ()):
            raise ValueError(f"{path}.{k}: unknown field (known: {', '.join(known)})")
    return value


def parsed(parse: Callable[[Any], Any]) -> Reader:
    """A Reader from a one-argument parser; its errors are prefixed with the path."""
    def read(path: str, value: Any) -> Any:
        try:
            return parse(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None
    return read


def optional(read: Reader) -> Reader:
    """`read`, except that None stays None (the field's "not set")."""
    return lambda path, value: None if value is None else read(path, value)


@dataclass(frozen=True)
class Form:
    """How YAML spells one configuration part."""

    #: YAML key -> dataclass field, in the order an unknown key's error lists them
    keys: Mapping[str, str]
    #: YAML key -> the Reader of its value (the others are passed as they are)
    read: Mapping[str, Reader] = field(default_factory=dict)
    #: YAML key -> the JSON-able form of its field's value (the others as they are)
    write: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: YAML keys that must be given
    required: tuple[str, ...] = ()
    #: further accepted spellings -> YAML key (e.g. the field names an older to_dict wrote)
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: `true` means the defaults (a part one just turns on: ``trim: true``)
    switch: bool = False

    def build(self, path: str, cls: Any, raw: Any, **fixed: Any) -> Any:
        """cls(**raw) with YAML keys renamed to fields and their values read; `fixed`
        fields are given (already built); errors name ``path.key``."""
        d = mapping(path, raw, tuple(self.keys), self.aliases, self.switch)
        for k in self.required:
            if k not in d:
                raise ValueError(f"{path}.{k}: required")
        kw: dict[str, Any] = {}
        for k, v in d.items():
            k = self.aliases.get(k, k)
            if self.keys[k] not in fixed:
                kw[self.keys[k]] = self.read[k](f"{path}.{k}", v) if k in self.read else v
        try:
            return cls(**kw, **fixed)
        except ValueError as exc:  # name the field as the YAML spells it
            name, sep, rest = str(exc).partition(":")
            inv = {f: k for k, f in self.keys.items()}
            raise ValueError(f"{path}.{inv.get(name, name)}{sep}{rest}") from None

    def field_of(self, key: str) -> str:
        """The dataclass field a YAML key (or alias) sets."""
        return self.keys[self.aliases.get(key, key)]

    def dict_of(self, obj: Any) -> dict:
        """The YAML form of `obj` (what build reads back)."""
        return {k: self.write[k](getattr(obj, f)) if k in self.write else getattr(obj, f)
                for k, f in self.keys.items()}
