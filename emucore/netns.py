"""Entering a network namespace: the one setns(2) of the project (stdlib only).

Issue 11, "Memory": the worker zygote (collectives.zygote) forks every PyTorch worker
from one process that imported torch and moves each child into its host's namespace,
so the call lives in the bottom layer; emu.realise.nsutil's `in_netns` uses it as well. It
moves only the calling thread (a forked child has just that one).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CLONE_NEWNET = 0x40000000  #: sched.h; os.CLONE_NEWNET from Python 3.12
NETNS_DIR = Path("/run/netns")  #: named namespaces (`ip netns`; /var/run is /run)

_libc = None if hasattr(os, "setns") else ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at `fd`; OSError if not
    (EPERM without CAP_SYS_ADMIN, EINVAL if `fd` is not a network namespace)."""
    if _libc is None:
        os.setns(fd, CLONE_NEWNET)
    elif _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter(path: str | os.PathLike) -> None:
    """Move the calling thread into the network namespace at `path` (a file under
    /run/netns, or /proc/PID/ns/net)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
    except OSError as e:
        raise OSError(e.errno, f"setns: {e.strerror}", str(path)) from None
    finally:
        os.close(fd)
