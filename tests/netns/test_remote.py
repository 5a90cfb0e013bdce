"""A second server emulated on this machine (issue 17's test setup): a network namespace
running its own sshd, reached from the first over a veth. `emu.remote.check` finds it
ready (SSH with a key, root, the same emu at the same path - the file system is shared -,
VXLAN), and names it when the key is wrong; `emu show --servers --check` says the same."""

import os
import shutil
import subprocess
import time

import pytest

from emu import nsutil, remote
from emu.servers import Server

pytestmark = pytest.mark.netns
SSHD = "/usr/sbin/sshd"


@pytest.fixture
def second_server(tmp_path):
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
    cfg.write_text(f"ListenAddress 10.98.0.2\nPort 22\nHostKey {host_key}\n"
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
            ipr.link("set", index=i, state="up")
        with nsutil.in_netns(ns), IPRoute() as ipr:
            i = ipr.link_lookup(ifname="u0")[0]
            ipr.addr("add", index=i, address="10.98.0.2", prefixlen=30)
            ipr.link("set", index=i, state="up")
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        sshd = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(cfg)],
                                stderr=subprocess.PIPE, text=True)
        server = Server("b", "10.98.0.2", "root", identity=str(key),
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


def test_the_second_server_is_ready(second_server):
    server, _tmp = second_server
    assert remote.check(remote.Remote(server)) == []
    r = remote.Remote(server).run(["cat", "/proc/self/net/dev"])
    assert "u0" in r.stdout   # the command really ran in the second server's namespace


def test_a_wrong_key_is_named(second_server, tmp_path):
    server, tmp = second_server
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
                   check=True)
    bad = Server(server.name, server.address, "root", identity=str(tmp_path / "other"),
                 known_hosts=server.known_hosts)
    (problem,) = remote.check(remote.Remote(bad))
    assert problem.startswith("server b (root@10.98.0.2): unreachable over SSH:")
    assert "Permission denied" in problem


def test_emu_show_check(second_server, capsys):
    from emu.cli import main
    server, tmp = second_server
    f = tmp / "servers.yaml"
    f.write_text("servers:\n  - {name: a, address: localhost}\n"
                 f"  - {{name: b, address: 10.98.0.2, identity: {server.identity}, "
                 f"known_hosts: {server.known_hosts}}}\n")
    assert main(["show", "rail2x4", "--servers", str(f), "--check"]) == 0
    err = capsys.readouterr().err
    assert "2 servers ready: a, b" in err
    # a veth away: tens of us; rail2x4's 1 us links need a TDF of that many thousandths
    line = next(x for x in err.splitlines() if x.startswith("server b: one-way latency"))
    us = float(line.split("latency ")[1].split(" us")[0])
    assert 0 < us < 2000 and "4 crossing links need TDF >=" in line and "fits" in line
    assert main(["show", "rail2x4", "--servers", str(f), "--check", "--tdf", "1"]) == 2
    assert "too low: rerun with --tdf" in capsys.readouterr().err
