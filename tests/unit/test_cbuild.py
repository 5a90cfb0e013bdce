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


N_MODULE = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
#ifndef N
#define N 7
#endif
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_n", NULL, -1, NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__n(void) {
    PyObject *mod = PyModule_Create(&m);
    if (mod != NULL && PyModule_AddIntConstant(mod, "N", N) < 0) Py_CLEAR(mod);
    return mod;
}
"""


def test_defines_reach_the_build_and_its_stamp(tmp_path, monkeypatch):
    """`defines` (a test build's bound) compile in as -D, in a stable order; a build with
    other defines is rebuilt (they are in the stamp); none by default (setup's build)."""
    src = tmp_path / "pkg" / "fast" / "n.c"
    src.parent.mkdir(parents=True)
    src.write_text(N_MODULE)
    monkeypatch.setattr(cbuild, "ROOT", tmp_path)
    monkeypatch.setitem(cbuild.EXTENSIONS, "pkg.fast._n", ("pkg/fast/n.c",))
    assert not any(a.startswith("-D") and "=" in a for a in cbuild.command("pkg.fast._n"))
    cmd = cbuild.command("pkg.fast._n", defines={"N": 3, "A": "x"})
    assert [a for a in cmd if a.startswith("-D") and "=" in a] == ["-DA=x", "-DN=3"]
    out = tmp_path / "out"
    (out / "pkg" / "fast").mkdir(parents=True)
    (out / "pkg" / "__init__.py").write_text("")
    (out / "pkg" / "fast" / "__init__.py").write_text("")
    code = "import pkg.fast._n as m; print(m.N)"
    for defines, want in ((None, "7"), ({"N": 3}, "3"), ({"N": 65536}, "65536")):
        cbuild.build("pkg.fast._n", out_dir=out, defines=defines)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=out)
        assert (r.returncode, r.stdout.strip()) == (0, want), r.stderr
