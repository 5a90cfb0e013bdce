"""A second server emulated on this machine for the tests (issue 17): emu.cluster.emuserver's
namespace with its own sshd (and its own /dev/shm and /run/emu), skipped where OpenSSH
is missing. Used by test_remote and test_cluster."""

import contextlib

import pytest

from emu.cluster import emuserver, remote


@contextlib.contextmanager
def second_server(tmp_path, mtu: int = 1500):
    """Yields (Server, tmp_path)."""
    why = emuserver.missing()
    if why:
        pytest.skip(why)
    with emuserver.emulated_server(tmp_path, mtu) as server:
        yield server, tmp_path


def left_on(server, tag: str) -> list[str]:
    """What run `tag` left in the server's own /run/emu and /dev/shm (asked over SSH:
    this machine cannot see them)."""
    r = remote.Remote(server).run(["sh", "-c", f"ls -d /run/emu/{tag} /dev/shm/emu-{tag}-* "
                                   "2>/dev/null; true"])
    assert r.returncode == 0, r.stderr
    return r.stdout.split()
