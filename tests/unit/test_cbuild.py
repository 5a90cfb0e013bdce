"""The compiled data path's build (emucore/cbuild.py): every `fast/*.c` module is built
by setup from today's sources, with -Werror, and also builds under ASan + UBSan; a
missing compiler is an error naming the package to install."""

import subprocess
import sys

import pytest

from emucore import cbuild


def test_every_fast_module_is_built_from_todays_sources():
    stale = [n for n in cbuild.EXTENSIONS if not cbuild.is_current(n)]
    assert stale == [], "run ./setup.sh (python -m emucore.cbuild) to build " + ", ".join(stale)


def test_modules_are_found_by_their_place():
    for name, (src,) in cbuild.EXTENSIONS.items():
        assert src.endswith(".c") and "/fast/" in src
        assert name == src[:-2].replace("/", ".").rsplit(".", 1)[0] + "._" + src.rsplit("/", 1)[1][:-2]


def test_a_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(cbuild.BuildError, match="install Debian's gcc"):
        cbuild.compiler()
    r = subprocess.run([sys.executable, "-m", "emucore.cbuild", "--force"], capture_output=True,
                       text=True, env={**__import__("os").environ, "CC": "no-such-cc"})
    if cbuild.EXTENSIONS:
        assert r.returncode == 2 and "install Debian's gcc" in r.stderr, r.stderr


def test_warnings_are_errors(tmp_path, monkeypatch):
    src = tmp_path / "pkg" / "fast" / "w.c"
    src.parent.mkdir(parents=True)
    src.write_text("int f(void) { int unused; return 0; }\n")
    monkeypatch.setattr(cbuild, "ROOT", tmp_path)
    monkeypatch.setitem(cbuild.EXTENSIONS, "pkg.fast._w", ("pkg/fast/w.c",))
    with pytest.raises(cbuild.BuildError, match="unused"):
        cbuild.build("pkg.fast._w", out_dir=tmp_path / "out")


OK_MODULE = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_ok", NULL, -1, NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__ok(void) { return PyModule_Create(&m); }
"""


def test_a_module_builds_and_loads_under_the_sanitizers(tmp_path, monkeypatch):
    src = tmp_path / "pkg" / "fast" / "ok.c"
    src.parent.mkdir(parents=True)
    src.write_text(OK_MODULE)
    monkeypatch.setattr(cbuild, "ROOT", tmp_path)
    monkeypatch.setitem(cbuild.EXTENSIONS, "pkg.fast._ok", ("pkg/fast/ok.c",))
    out = tmp_path / "asan"
    so = cbuild.build("pkg.fast._ok", sanitize=True, out_dir=out)
    assert so.is_file() and cbuild.build("pkg.fast._ok", sanitize=True, out_dir=out) == so
    (out / "pkg" / "__init__.py").write_text("")
    (out / "pkg" / "fast" / "__init__.py").write_text("")
    env = cbuild.sanitized_env(out)
    r = subprocess.run([sys.executable, "-c", "import pkg.fast._ok as m; print(m.__file__)"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and str(out) in r.stdout, r.stderr
