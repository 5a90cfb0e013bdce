#!/usr/bin/env bash
# emu setup: installs everything emu needs (idempotent), then runs the job you name.
#
#   sudo ./setup.sh run [TOPOLOGY] [ARGS...]   set up, then `python -m emu run` (default rail2x4)
#   sudo ./setup.sh test [PYTEST ARGS...]      set up, then run the test suite
#   sudo ./setup.sh provision                  set up only (used by vagrant/Vagrantfile)
#
# Installs Debian packages (mininet for mnexec, iproute2, ethtool, tshark, iperf3, ping,
# python3-venv) only when missing, and a virtualenv .venv with the pinned Python
# dependencies (requirements.txt) only when requirements changed.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
ROOT=$(pwd)
MODE=${1:-run}
[ $# -gt 0 ] && shift

if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: needs root (apt packages, network namespaces): sudo $0 $MODE $*" >&2
    exit 2
fi
case "$MODE" in run|test|provision) ;; *)
    echo "usage: sudo $0 run [TOPOLOGY] [ARGS...] | test [PYTEST ARGS...] | provision" >&2
    exit 2;;
esac

APT_PKGS=(mininet iproute2 ethtool tshark iperf3 iputils-ping python3-venv python3-dev gcc)
[ "$MODE" = test ] && APT_PKGS+=(vagrant)
missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
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
    .venv/bin/python -m pip install -q -r requirements.txt -r requirements-dev.txt
    .venv/bin/python -m pip install -q --no-deps -e .
    echo "$WANT" > "$STAMP"
fi

case "$MODE" in
    provision) echo "==> emu is set up: sudo $ROOT/.venv/bin/python -m emu --help";;
    run) if [ $# -eq 0 ]; then set -- rail2x4; fi
         exec .venv/bin/python -m emu run "$@";;
    test) exec .venv/bin/python -m pytest "$@";;
esac
