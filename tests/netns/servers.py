"""A second server emulated on this machine (issue 17's test setup): a network namespace
running its own sshd, reached from the first (this machine's root namespace) over a
veth with the MTU asked for. Used by test_remote and test_cluster."""

import contextlib
import os
import shutil
import subprocess
import time

import pytest

from emu import nsutil, remote
from emu.servers import Server

SSHD = "/usr/sbin/sshd"
ADDRESS = "10.98.0.2"


@contextlib.contextmanager
def second_server(tmp_path, mtu: int = 1500):
    """Yields (Server, tmp_path); ends the sshd it started and removes the namespace."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        pytest.skip("needs openssh-server (./setup.sh test installs it)")
    from pyroute2 import IPRoute

    tag = nsutil.new_tag()
    ns = nsutil.ns_name(tag, "srvb")
    host_key, key = tmp_path / "host_key", tmp_path / "id"
    for k in (host_key, key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
    (tmp_path / "authorized_keys").write_text((tmp_path / "id.pub").read_text())
    cfg = tmp_path / "sshd_config"
    cfg.write_text(f"ListenAddress {ADDRESS}\nPort 22\nHostKey {host_key}\n"
                   f"AuthorizedKeysFile {tmp_path}/authorized_keys\nPermitRootLogin "
                   f"prohibit-password\nPasswordAuthentication no\nStrictModes no\nUsePAM no\n"
                   f"PidFile {tmp_path}/sshd.pid\n")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    sshd = None
    veth = f"e{tag}sv"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        with IPRoute() as ipr:
            ipr.link("add", ifname=veth, kind="veth", peer={"ifname": "u0", "net_ns_fd": ns})
            i = ipr.link_lookup(ifname=veth)[0]
            ipr.addr("add", index=i, address="10.98.0.1", prefixlen=30)
            ipr.link("set", index=i, state="up", mtu=mtu)
        with nsutil.in_netns(ns), IPRoute() as ipr:
            i = ipr.link_lookup(ifname="u0")[0]
            ipr.addr("add", index=i, address=ADDRESS, prefixlen=30)
            ipr.link("set", index=i, state="up", mtu=mtu)
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        sshd = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(cfg)],
                                stderr=subprocess.PIPE, text=True)
        server = Server("b", ADDRESS, "root", identity=str(key),
                        known_hosts=str(tmp_path / "known_hosts"))
        deadline = time.monotonic() + 30
        while remote.Remote(server).run(["true"], timeout=15).returncode != 0:
            assert time.monotonic() < deadline and sshd.poll() is None, "sshd did not come up"
            time.sleep(0.2)
        yield server, tmp_path
    finally:
        if sshd is not None:
            sshd.terminate()  # ends the one we started, by its pid
            sshd.wait(10)
        nsutil.remove(ns)  # and the veth pair with it
