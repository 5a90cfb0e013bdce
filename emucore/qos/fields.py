"""What every QoS type shares: the eight queues/priorities, the default queue limit, and
the validators of their fields (errors name the field and the bad value, as
docs/CONVENTIONS.md asks).

Sizes accept the units of `emucore.timedil.parse_size` ("150KB"), durations those of
`parse_duration` ("200ms"); both are model values (byte counts are equal in the lab).
"""

from __future__ import annotations

from typing import Any, Callable

from emucore.timedil import parse_duration, parse_size

#: egress queues per port = qos-groups = PFC priorities (book ch.11: qos-group n -> queue n)
NUM_QUEUES = 8
#: default tail-drop limit of one egress queue, bytes (model bytes = lab bytes)
QUEUE_LIMIT_BYTES = 10_000_000


def int_in(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` if it is an int in lo..hi, else ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}: must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _parsed(name: str, value: Any, parse: Callable[[Any], Any], what: str) -> Any:
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not {what}, got {value!r}") from None


def size(name: str, value: Any) -> int:
    """Bytes >= 0 from an int or a size string ("150KB")."""
    n = _parsed(name, value, parse_size, "a size (e.g. 150KB)")
    if n < 0:
        raise ValueError(f"{name}: must be >= 0 bytes, got {value!r}")
    return n


def duration(name: str, value: Any) -> float:
    """Seconds > 0 from a number or a duration string ("200ms")."""
    s = _parsed(name, value, parse_duration, "a duration (e.g. 200ms)")
    if not s > 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return s


def percent(name: str, value: Any) -> float:
    """A percentage 0..100 from a number or "7%"."""
    p = _parsed(name, value.strip().rstrip("%") if isinstance(value, str) else value, float,
                "a percentage")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"{name}: must be in 0..100 %, got {value!r}")
    return p


def flag(name: str, value: Any) -> bool:
    """`value` if it is a bool (YAML true/false), else ValueError."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: must be true or false, got {value!r}")
    return value


def one_of(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name}: must be one of {'|'.join(choices)}, got {value!r}")
    return value


def normalise(obj: Any, name: str, value: Any) -> None:
    """Store the normalised value of a field of a frozen dataclass (in __post_init__)."""
    object.__setattr__(obj, name, value)


def prefixed(path: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call fn; re-raise its ValueError with `path.` in front of the field name."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise ValueError(f"{path}.{exc}") from None
