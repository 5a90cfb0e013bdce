"""Which torch.distributed backend a script's collectives really use (issue 15).

On a GPU cluster a training script names "nccl" (or "gloo" for CPU tensors, or
"cpu:gloo,cuda:nccl", or nothing) and NCCL drives the GPUs' NICs. In emu the emulated NICs
are driven by the backend "emu" (`collectives.backend`), so whatever a script names for
its CPU tensors stands for emu, as NCCL stands for the NICs on the real cluster; `emu run
--backend gloo` keeps torch's own gloo (over the frontend network's kernel TCP) for
comparison, and then every name stands for gloo.

`install(target)` wraps `init_process_group` and `new_group` of torch.distributed (both
the package's names and distributed_c10d's, which the package re-exports) so that the
`backend` argument is translated before torch sees it; `dist.get_backend()` then answers
the backend that runs ("emu"), not the one the script wrote. A backend emu does not know
(a custom plugin, "fake") passes through unchanged.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

log = logging.getLogger("collectives.aliases")

#: backend names that stand for the fabric's collective library
STANDS_FOR_NICS = ("gloo", "nccl", "mpi", "ucc", "xccl", "undefined", "emu")
TARGETS = ("emu", "gloo")


def translate(backend: Any, target: str = "emu") -> Any:
    """The backend to create for what a script named: `target` for None, a name of
    STANDS_FOR_NICS or a device map of them ("cpu:gloo,cuda:nccl"); anything else as is."""
    if target not in TARGETS:
        raise ValueError(f"target: one of {', '.join(TARGETS)}, got {target!r}")
    if backend is None:
        return target
    text = str(backend).lower()
    names = [part.split(":", 1)[-1].strip() for part in text.split(",")]
    if names and all(n in STANDS_FOR_NICS for n in names):
        return target
    return backend


def _wrap(fn: Callable, target: str, said: list) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        name = "backend"
        if name in kwargs:
            given = kwargs[name]
            kwargs[name] = translate(given, target)
        elif fn.__name__ == "init_process_group" and args:
            given = args[0]
            args = (translate(given, target),) + args[1:]
        elif fn.__name__ == "new_group" and len(args) > 2:
            given = args[2]
            args = args[:2] + (translate(given, target),) + args[3:]
        else:
            given = None
            if fn.__name__ == "init_process_group":
                kwargs[name] = target
        if given is not None and str(given).lower() != target and not said:
            said.append(True)
            print(f"emu: the script's backend {str(given)!r} runs as {target!r}"
                  + (" (the emulated fabric's NICs; emu run --backend gloo keeps torch's "
                     "gloo)" if target == "emu" else " (emu run --backend gloo)"),
                  file=sys.stderr, flush=True)
        return fn(*args, **kwargs)
    wrapper.__emu_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def install(target: str = "emu") -> None:
    """Translate the backend names of every later init_process_group / new_group call
    (idempotent)."""
    translate(None, target)  # checks target
    said: list = []
    for name in ("init_process_group", "new_group"):
        fn = getattr(c10d, name)
        fn = getattr(fn, "__emu_wrapped__", fn)
        w = _wrap(fn, target, said)
        setattr(c10d, name, w)
        setattr(dist, name, w)
