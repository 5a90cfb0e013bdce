"""A second server emulated on this machine for the tests (issue 17): emu.emuserver's
namespace with its own sshd, skipped where OpenSSH is missing. Used by test_remote and
test_cluster."""

import contextlib

import pytest

from emu import emuserver


@contextlib.contextmanager
def second_server(tmp_path, mtu: int = 1500):
    """Yields (Server, tmp_path)."""
    why = emuserver.missing()
    if why:
        pytest.skip(why)
    with emuserver.emulated_server(tmp_path, mtu) as server:
        yield server, tmp_path
