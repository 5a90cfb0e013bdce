"""A second server emulated on this machine (issue 17): a network namespace running its
own sshd (root login with a key made for it, never the system's sshd or keys), a veth
away from this machine's root namespace - so `emu run --servers` and `emu bench
cluster` can spread a fabric over "two servers" on one machine, and the tests can.

The namespace is ``emu-<tag>-srv<name>`` with a run state of its own (/run/emu/<tag>/,
this process's pid), so `emu clean` leaves it alone while it is up and removes it after
a crash; the veth is ``e<tag>sv`` here, ``u0`` there, 10.98.0.1/30 here and 10.98.0.2/30
there, with the MTU asked for (VXLAN over it needs 9216 + 50 for the fabric's frames).
Its sshd (and so everything started over SSH) sees a /dev/shm and a /run/emu of its
own (`own_mounts`), as another machine would; the rest of the filesystem is shared.
Its files (host key, client key, known hosts, sshd_config) live in `workdir`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from emu.cluster import remote
from emu.realise import netlink, nsutil
from emu.cluster.servers import Server

__all__ = ["SSHD", "ADDRESS", "LOCAL_ADDRESS", "emulated_server", "missing"]

SSHD = "/usr/sbin/sshd"
ADDRESS, LOCAL_ADDRESS = "10.98.0.2", "10.98.0.1"
UP_TIMEOUT_S = 30.0


def missing() -> str | None:
    """What this machine lacks to emulate a server (None: nothing)."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None or not shutil.which("ssh"):
        return ("needs OpenSSH (apt-get install openssh-server openssh-client; "
                "./setup.sh test installs them)")
    return None


def _address_in_use(address: str) -> bool:
    r = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=10)
    return f" {address}/" in r.stdout


#: what a separate machine does not share with this one: its shared memory and emu's
#: run states (so a workload that mixed up the two servers' paths would fail here too)
PRIVATE = ("/dev/shm", str(nsutil.STATE_DIR))


def own_mounts(argv: list[str]) -> list[str]:
    """`argv` run in a mount namespace of its own with an empty tmpfs on each PRIVATE
    directory - it goes when its last process ends. Each directory's parent mount is
    made private there first, so the tmpfs never shows on this machine."""
    steps = ["set -e"]
    for d in PRIVATE:
        steps += [f"mkdir -p {d}", f'mount --make-private "$(findmnt -n -f -o TARGET -T {d})"',
                  f"mount -t tmpfs -o mode=1777 emu-server {d}"]
    return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c",
            "; ".join(steps) + '; exec "$@"', "sh", *argv]


@contextlib.contextmanager
def emulated_server(workdir: Path, mtu: int = 1500, name: str = "b") -> Iterator[Server]:
    """Yields the Server to put in a servers file; tears it all down on exit (its sshd
    ended by pid, its namespace and state removed). RuntimeError when it cannot."""
    why = missing()
    if why:
        raise RuntimeError(f"emulated server: {why}")
    if _address_in_use(LOCAL_ADDRESS):
        raise RuntimeError(f"emulated server: {LOCAL_ADDRESS} is in use here (another "
                           "emulated server is up?)")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    tag = nsutil.new_tag()
    ns = nsutil.ns_name(tag, f"srv{name}")
    nsutil.write_state(tag, {"tag": tag, "pid": os.getpid(), "what": f"emulated server {name}",
                             "created": time.time(), "namespaces": [ns]})
    host_key, key = workdir / "host_key", workdir / "id"
    for k in (host_key, key):
        if not k.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)],
                           check=True)
    (workdir / "authorized_keys").write_text((workdir / "id.pub").read_text())
    cfg = workdir / "sshd_config"
    cfg.write_text(f"ListenAddress {ADDRESS}\nPort 22\nHostKey {host_key}\n"
                   f"AuthorizedKeysFile {workdir}/authorized_keys\nPermitRootLogin "
                   f"prohibit-password\nPasswordAuthentication no\nStrictModes no\nUsePAM no\n"
                   f"PidFile {workdir}/sshd.pid\nMaxSessions 64\nMaxStartups 64\n")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    sshd = None
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        netlink.server_veth(f"e{tag}sv", ns, "u0", LOCAL_ADDRESS, ADDRESS, 30, mtu)
        log = open(workdir / "sshd.log", "ab")
        sshd = subprocess.Popen(own_mounts(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f",
                                            str(cfg)]),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        server = Server(name, ADDRESS, "root", identity=str(key),
                        known_hosts=str(workdir / "known_hosts"))
        deadline = time.monotonic() + UP_TIMEOUT_S
        while remote.Remote(server).run(["true"], timeout=15).returncode != 0:
            if time.monotonic() > deadline or sshd.poll() is not None:
                raise RuntimeError(f"emulated server: its sshd did not come up (see "
                                   f"{workdir / 'sshd.log'})")
            time.sleep(0.2)
        yield server
    finally:
        if sshd is not None and sshd.poll() is None:
            sshd.terminate()  # the one we started, by its pid
            sshd.wait(10)
        # the veth now (a namespace's end goes asynchronously)
        netlink.delete_links(f"e{tag}sv")
        nsutil.clean(tag, include_live=True)  # its namespace, processes, state
