"""The servers file of `emu run TOPO --servers FILE` (issue 17): the machines one fabric is
spread over, as Mininet's cluster mode names them (`mininet.examples.cluster`: a server
name, its address, the SSH user), plus optional placement pins. Pure: parsing and
validation, errors naming the bad field; no SSH, no I/O beyond reading the file.

    servers:
      - name: a                 # the machine emu is started on: address localhost
        address: localhost
      - name: b
        address: 192.0.2.12
        user: root              # default root (emu needs root on every server)
        port: 22
        identity: ~/.ssh/emu    # optional: ssh -i (else ssh's own configuration)
        known_hosts: ~/.ssh/emu_known_hosts   # optional: its own known-hosts file
    placement:                  # optional: node -> server (the rest is placed, emu.cluster.placer)
      rail1: a
      h4: b
    underlay_mtu: 9300          # the servers' link MTU: VXLAN needs 9216 + 50 (emu.realise.tunnel)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = ["Server", "Servers", "load", "from_dict"]

NAME = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Server:
    """One machine: a short name (used in interface and log names), how to reach it."""

    name: str
    address: str
    user: str = "root"
    port: int = 22
    identity: str | None = None      #: ssh -i
    known_hosts: str | None = None   #: ssh -o UserKnownHostsFile= (new keys accepted)

    @property
    def local(self) -> bool:
        """The machine emu runs on (no SSH)."""
        return self.address in ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Servers:
    """The whole file."""

    servers: tuple[Server, ...]
    placement: dict[str, str] = field(default_factory=dict)
    underlay_mtu: int = 9300

    def names(self) -> list[str]:
        """Server names, in file order."""
        return [s.name for s in self.servers]


def _address(where: str, v) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"{where}: an IPv4 address or a host name, got {v!r}")
    try:
        ipaddress.IPv4Address(v)
        return v
    except ValueError:
        pass
    if not HOSTNAME.match(v):
        raise ValueError(f"{where}: an IPv4 address or a host name, got {v!r}")
    return v


def _server(i: int, d) -> Server:
    where = f"servers[{i}]"
    if not isinstance(d, dict):
        raise ValueError(f"{where}: a mapping with name and address, got {d!r}")
    known = ("name", "address", "user", "port", "identity", "known_hosts")
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(known)})")
    name = d.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"{where}.name: 1-16 of a-z, 0-9, '-', starting with a letter, "
                         f"got {name!r}")
    if "address" not in d:
        raise ValueError(f"{where}.address: missing")
    user = d.get("user", "root")
    if not isinstance(user, str) or not USER.match(user):
        raise ValueError(f"{where}.user: a user name, got {user!r}")
    port = d.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError(f"{where}.port: 1..65535, got {port!r}")
    paths = {}
    for k in ("identity", "known_hosts"):
        v = d.get(k)
        if v is not None and (not isinstance(v, str) or not v):
            raise ValueError(f"{where}.{k}: a file path, got {v!r}")
        paths[k] = str(Path(v).expanduser()) if v else None
    return Server(name, _address(f"{where}.address", d["address"]), user, port, **paths)


def from_dict(d, source: str = "servers file") -> Servers:
    """Validate a parsed servers file; ValueError names the bad field."""
    if not isinstance(d, dict):
        raise ValueError(f"{source}: a mapping with 'servers', got {type(d).__name__}")
    unknown = sorted(set(d) - {"servers", "placement", "underlay_mtu"})
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field (known: servers, placement, underlay_mtu)")
    raw = d.get("servers")
    if not isinstance(raw, list) or not raw:
        raise ValueError("servers: a list of at least one server")
    servers = tuple(_server(i, s) for i, s in enumerate(raw))
    seen: dict[str, int] = {}
    for i, s in enumerate(servers):
        if s.name in seen:
            raise ValueError(f"servers[{i}].name: {s.name!r} already names servers[{seen[s.name]}]")
        seen[s.name] = i
    local = [s.name for s in servers if s.local]
    if len(local) > 1:
        raise ValueError(f"servers: one local server (address localhost), got {local}")
    pl = d.get("placement") or {}
    if not isinstance(pl, dict):
        raise ValueError(f"placement: a mapping node -> server, got {pl!r}")
    for node, srv in pl.items():
        if srv not in seen:
            raise ValueError(f"placement.{node}: no server {srv!r} (servers: {', '.join(seen)})")
    mtu = d.get("underlay_mtu", 9300)
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not 1280 <= mtu <= 65535:
        raise ValueError(f"underlay_mtu: 1280..65535, got {mtu!r}")
    return Servers(servers, {str(k): v for k, v in pl.items()}, mtu)


def load(path: str | Path) -> Servers:
    """Read and validate a servers file (YAML)."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ValueError(f"--servers: cannot read {p}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"--servers: {p} is not YAML: {exc}") from None
    return from_dict(data, str(p))
