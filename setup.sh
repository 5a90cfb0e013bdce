#!/usr/bin/env bash
# emu setup: installs everything emu needs (idempotent), then runs the job you name.
#
#   ./setup.sh run [TOPOLOGY] [ARGS...]   set up, then `python -m emu run` (default rail2x4)
#   ./setup.sh test [PYTEST ARGS...]      set up, then run the test suite (the unit tests
#                                         in parallel, then the fabric tests one at a time)
#   ./setup.sh provision                  set up only (used by vagrant/Vagrantfile)
#
# Run it as root, or as a user with sudo: it re-executes itself through sudo when it
# must (run and test build network namespaces; provision only when a Debian package is
# missing). Installs the Debian packages the README's commands use (mininet for mnexec,
# iproute2, ethtool, tshark + dumpcap, iperf3, ping, traceroute, python3-venv; vagrant
# for the tests) only when missing, and a virtualenv .venv with the pinned Python
# dependencies (requirements.txt) only when requirements changed.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")"
ROOT=$(pwd)
MODE=${1:-run}
[ $# -gt 0 ] && shift

case "$MODE" in run|test|provision) ;; *)
    echo "usage: $0 run [TOPOLOGY] [ARGS...] | test [PYTEST ARGS...] | provision" >&2
    exit 2;;
esac

# One package per tool the README shows: mnexec (mininet), ip/bridge (iproute2), ethtool,
# tshark (dumpcap comes with it, in wireshark-common), iperf3, ping (iputils-ping),
# traceroute (the CLI example `h2g2 traceroute -n h3g1`); python3-venv, python3-dev and
# gcc for the virtualenv.
# openssh-client: `emu run --servers` reaches the other servers with ssh.
APT_PKGS=(mininet iproute2 ethtool tshark iperf3 iputils-ping traceroute python3-venv
          python3-dev gcc openssh-client)
# chromium: tests render lab.html headless; openssh-server: a second server emulated in a
# namespace (issue 17, emu.cluster.emuserver starts its own sshd there, never the system's; the
# package is not installed for a plain run: Debian's would start the system's sshd)
[ "$MODE" = test ] && APT_PKGS+=(vagrant chromium openssh-server)
missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Root is needed for apt-get and for network namespaces (run, test); become root only then.
if [ "$(id -u)" -ne 0 ] && { [ "$MODE" != provision ] || [ ${#missing[@]} -gt 0 ]; }; then
    if command -v sudo >/dev/null 2>&1; then
        echo "==> setup.sh $MODE needs root: re-running through sudo" >&2
        exec sudo --preserve-env=PYTHON -- "$SELF" "$MODE" "$@"
    fi
    echo "setup.sh: $MODE needs root (Debian packages, network namespaces) and sudo is" \
         "not installed: run it as root, e.g. su -c '$SELF $MODE${*:+ $*}'" >&2
    exit 2
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: Python >= 3.11 needed, $PY is $("$PY" --version 2>&1)" >&2
    exit 2
fi
if [ ! -x .venv/bin/python ]; then
    echo "==> creating virtualenv .venv"
    "$PY" -m venv .venv
fi
STAMP=.venv/.emu-requirements
WANT=$(cat requirements.txt requirements-dev.txt setup.py | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "==> installing Python dependencies into .venv (torch is the CPU build 2.13.0)"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    # --no-compile, then compileall on every core: pip byte-compiles ~8,000 files on one
    # core (48 of its 72 s on the 2-core VM); compileall -j 0 takes 32 s there. Files that
    # do not compile (templates in some packages) are skipped, as pip skips them.
    .venv/bin/python -m pip install -q --no-compile -r requirements.txt -r requirements-dev.txt
    .venv/bin/python -m pip install -q --no-compile --no-deps -e .
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null 2>&1 || true
    echo "$WANT" > "$STAMP"
fi
# emu's own modules byte-compiled (only what changed): Python reads a cached .pyc even where
# PYTHONDONTWRITEBYTECODE keeps it from writing one, so each process does not compile them
.venv/bin/python -m compileall -q -j 0 emu emucore switch_agent traffic collectives topologies >/dev/null
# The compiled data path (C11, emucore/cbuild.py): rebuilt only when a source changed.
.venv/bin/python -m emucore.cbuild >/dev/null || exit 2

case "$MODE" in
    provision) echo "==> emu is set up: $ROOT/.venv/bin/python -m emu --help";;
    run) if [ $# -eq 0 ]; then set -- rail2x4; fi
         exec .venv/bin/python -m emu run "$@";;
    test) # Named tests (an argument not an option) run as given. The whole suite runs in
          # two parts: the unit tests (no fabric, no root) spread over every core with
          # pytest-xdist, then the fabric tests (netns, e2e, vm) one at a time - they share
          # the fabric lock and every core, and a busy core makes them fall behind the model.
          for a in "$@"; do
              case "$a" in -*) ;; *) exec .venv/bin/python -m pytest "$@";; esac
          done
          rc=0
          .venv/bin/python -m pytest -n auto tests/unit "$@" || rc=$?
          .venv/bin/python -m pytest --ignore=tests/unit "$@" || { r=$?; [ "$rc" -ne 0 ] || rc=$r; }
          exit "$rc";;
esac
