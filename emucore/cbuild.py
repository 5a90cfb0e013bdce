"""Builds emu's compiled data path: C11 extension modules, `-Wall -Wextra -Werror`.

Each compiled module mirrors a Python reference stage by stage under the same names
(docs/DATAPATH.md); this module only compiles them. `./setup.sh` runs
`python -m emucore.cbuild`, which builds every module in EXTENSIONS (each
`PKG/.../fast/NAME.c` as `PKG....fast._NAME`) next to its source
when a source or flag changed (a stamp holds their hash), so setup stays idempotent and
quick. The CPython C API is used directly, not cffi: no new dependency, the buffer
protocol gives the C code the frame's bytes without a copy, and a call costs ~50 ns.

`build(..., sanitize=True, out_dir=D)` builds the same sources with AddressSanitizer and
UBSan into D; `sanitized_env(D)` is the environment a Python child needs to load them
(libasan preloaded, leak checks off: CPython's own allocations are not ours). Builds into
one D are serialised per module (a lock file beside it), so processes may share a D (the
unit tests' xdist workers do). `defines={"N": v}` adds `-DN=v` (a test build's smaller
bound, e.g. the pipeline's FLOW_CACHE_MAX); it is part of the command, so of the stamp.
setup's production build passes none. A missing compiler or Python header is an error
naming the Debian package, never a silent fallback.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("emucore", "switch_agent", "traffic")


def discover() -> dict[str, tuple[str, ...]]:
    """Every `PKG/.../fast/NAME.c` is the one source of module `PKG....fast._NAME`;
    headers shared between modules live in emucore/csrc/, a module's own beside it (both
    are in its stamp: a changed header rebuilds it)."""
    found = {}
    for pkg in PACKAGES:
        for c in sorted((ROOT / pkg).glob("**/fast/*.c")):
            rel = c.relative_to(ROOT)
            found[".".join([*rel.parent.parts, "_" + c.stem])] = (str(rel),)
    return found


#: dotted module name -> its C sources (relative to the checkout)
EXTENSIONS: dict[str, tuple[str, ...]] = discover()
CFLAGS = ("-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
          "-fvisibility=hidden", "-D_GNU_SOURCE")
OPT = ("-O2",)
SANITIZE = ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined")


class BuildError(RuntimeError):
    pass


def compiler() -> str:
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise BuildError(f"no C compiler '{cc}': install Debian's gcc (./setup.sh does)")
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise BuildError(f"no Python.h in {include}: install Debian's python3-dev "
                         "(./setup.sh does)")
    return cc


def target(name: str, out_dir: Path | None = None) -> Path:
    """Where module `name` is built: beside its package, or in out_dir (its package path)."""
    *pkg, leaf = name.split(".")
    base = (out_dir if out_dir is not None else ROOT).joinpath(*pkg)
    return base / (leaf + sysconfig.get_config_var("EXT_SUFFIX"))


def command(name: str, sanitize: bool = False, out_dir: Path | None = None,
            defines: dict[str, int | str] | None = None) -> list[str]:
    sources = [str(ROOT / s) for s in EXTENSIONS[name]]
    include = sysconfig.get_paths()["include"]
    flags = SANITIZE if sanitize else OPT
    macros = [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    return [compiler(), *CFLAGS, *flags, *macros, f"-I{include}",
            f"-I{ROOT / 'emucore' / 'csrc'}", *sources, "-o", str(target(name, out_dir))]


def _digest(name: str, cmd: list[str]) -> str:
    h = hashlib.sha256(" ".join(cmd).encode())
    headers = sorted((ROOT / "emucore" / "csrc").glob("*.h"))
    headers += sorted(h for s in EXTENSIONS[name] for h in (ROOT / s).parent.glob("*.h"))
    for path in [*(ROOT / s for s in EXTENSIONS[name]), *headers]:
        h.update(path.read_bytes())
    return h.hexdigest()


def build(name: str, sanitize: bool = False, out_dir: Path | None = None,
          force: bool = False, defines: dict[str, int | str] | None = None) -> Path:
    """Compiles module `name` (skipped when its stamp matches); returns the .so path."""
    cmd = command(name, sanitize, out_dir, defines)
    so = target(name, out_dir)
    so.parent.mkdir(parents=True, exist_ok=True)
    stamp = so.with_name(so.name + ".stamp")
    want = _digest(name, cmd)
    if out_dir is None:
        return _compile(name, cmd, so, stamp, want, force)
    with open(so.with_name(so.name + ".lock"), "w") as lock:  # another process's build
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _compile(name, cmd, so, stamp, want, force)


def _compile(name: str, cmd: list[str], so: Path, stamp: Path, want: str, force: bool) -> Path:
    if not force and so.is_file() and stamp.is_file() and stamp.read_text() == want:
        return so
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"building {name} failed:\n$ {' '.join(cmd)}\n{r.stderr}")
    stamp.write_text(want)
    return so


def build_all(sanitize: bool = False, out_dir: Path | None = None,
              force: bool = False) -> list[Path]:
    return [build(n, sanitize, out_dir, force) for n in EXTENSIONS]


def is_current(name: str) -> bool:
    """True when module `name` is built from today's sources (what setup.sh leaves)."""
    so = target(name)
    stamp = so.with_name(so.name + ".stamp")
    try:
        return stamp.read_text() == _digest(name, command(name))
    except (OSError, BuildError):
        return False


def sanitized_env(out_dir: Path) -> dict[str, str]:
    """Environment for a Python child that imports the sanitized modules from out_dir."""
    libasan = subprocess.run([compiler(), "-print-file-name=libasan.so"], capture_output=True,
                             text=True, check=True).stdout.strip()
    env = dict(os.environ)
    env["LD_PRELOAD"] = libasan
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env["PYTHONPATH"] = os.pathsep.join([str(out_dir), str(ROOT)])
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emucore.cbuild", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    ap.add_argument("--sanitize", metavar="DIR", help="build with ASan + UBSan into DIR")
    args = ap.parse_args(argv)
    try:
        out = Path(args.sanitize) if args.sanitize else None
        for so in build_all(sanitize=out is not None, out_dir=out, force=args.force):
            print(f"built {so.relative_to(out or ROOT)}")
    except BuildError as e:
        print(f"emucore.cbuild: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
