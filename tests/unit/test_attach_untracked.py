"""Attaching to another process's shared memory without the resource tracker
(traffic.nic.client.attach_untracked): the ranks collectives.zygote forks share one
tracker, so an attach must neither register nor unregister the creator's name."""

import subprocess
import sys
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import pytest

from traffic.nic.client import UntrackedSharedMemory, attach_untracked

ROOT = Path(__file__).resolve().parents[2]


def test_an_attach_tells_the_tracker_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(resource_tracker, "register", lambda *a: calls.append(("reg", a)))
    monkeypatch.setattr(resource_tracker, "unregister", lambda *a: calls.append(("unreg", a)))
    owner = shared_memory.SharedMemory(create=True, size=8192)
    try:
        assert calls == [("reg", (owner._name, "shared_memory"))]  # the creator's
        seg = attach_untracked(owner.name)
        assert isinstance(seg, UntrackedSharedMemory) and seg.name == owner.name
        assert seg.size == 8192
        seg.buf[:4] = b"emu!"
        assert bytes(owner.buf[:4]) == b"emu!"  # the same memory
        seg.close()
        assert calls == [("reg", (owner._name, "shared_memory"))]
    finally:
        owner.close()
        owner.unlink()
    assert calls[1:] == [("unreg", (owner._name, "shared_memory"))]


def test_a_missing_or_empty_segment_fails_and_leaves_no_descriptor():
    with pytest.raises(FileNotFoundError):
        attach_untracked("emu-test-no-such-segment")
    import _posixshmem
    import os
    name = "/emu-test-empty-segment"
    fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    os.close(fd)
    try:
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(ValueError):  # the creator has not sized it yet
            attach_untracked(name[1:])
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        _posixshmem.shm_unlink(name)


SHARED_TRACKER = """\
from multiprocessing import shared_memory
from traffic.nic.client import attach_untracked
owner = shared_memory.SharedMemory(create=True, size=4096)   # registers its name
peer = attach_untracked(owner.name)                          # as a rank that shares it
peer.close()
owner.close()
owner.unlink()                                               # unregisters it
print("done")
"""


def test_creator_and_attacher_sharing_a_tracker_leave_it_no_traceback():
    # One process stands for two ranks of the zygote: one tracker. The old attach
    # (register, then unregister) removed the creator's entry, and the creator's unlink
    # made the tracker print "KeyError: '/psm_...'" - once per segment, in every torch
    # run's workers/zygote.log. communicate() reads stderr until the tracker, which
    # inherited it, has exited too.
    p = subprocess.run([sys.executable, "-c", SHARED_TRACKER], cwd=ROOT, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "done\n", p.stderr
    assert p.stderr == ""


def test_the_attacher_leaving_does_not_unlink_the_segment():
    owner = shared_memory.SharedMemory(create=True, size=4096)
    try:
        code = (f"from traffic.nic.client import attach_untracked\n"
                f"attach_untracked({owner.name!r}).close()\n")
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True,
                           capture_output=True, timeout=60)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        attach_untracked(owner.name).close()  # still there
    finally:
        owner.close()
        owner.unlink()
