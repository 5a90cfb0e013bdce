"""emucore.datapath: the modes, the refusal of an unbuilt compiled path, and what a run
reports about its data path (issue 30)."""

import pytest

from emucore import cbuild, datapath


def test_modes_and_the_default(monkeypatch):
    monkeypatch.delenv(datapath.ENV, raising=False)
    assert datapath.mode() == "auto"
    monkeypatch.setenv(datapath.ENV, "python")
    assert datapath.mode() == "python" and datapath.mode("fast") == "fast"
    with pytest.raises(ValueError, match=r"EMU_DATAPATH: must be one of auto, python, fast, "
                                         r"got 'quick'"):
        datapath.mode("quick")


def test_an_unbuilt_compiled_path_is_an_error_naming_the_remedy(monkeypatch):
    assert datapath.stale() == []  # setup built them
    datapath.require_built()
    monkeypatch.setattr(cbuild, "is_current", lambda name: False)
    with pytest.raises(datapath.NotBuilt, match=r"emucore.wire.fast._roce\) is not built .* "
                                                r"run ./setup.sh, or .*--datapath python"):
        datapath.require_built("emucore.wire.fast._roce")
    with pytest.raises(datapath.NotBuilt):
        datapath.require_built()


def test_what_a_run_reports():
    assert datapath.describe("python") == {
        "mode": "python", "compiled": [],
        "python": [*datapath.PYTHON_ONLY, *datapath.COMPILED, *datapath.FAST_ONLY]}
    assert datapath.describe("auto") == {  # a refused switch config: the agent says so
        "mode": "auto", "compiled": list(datapath.COMPILED),
        "python": [*datapath.PYTHON_ONLY, *datapath.FAST_ONLY]}
    assert datapath.FAST_ONLY == ()
    assert datapath.describe("fast") == {
        "mode": "fast", "compiled": [*datapath.COMPILED, *datapath.FAST_ONLY],
        "python": list(datapath.PYTHON_ONLY)}
    for m in ("auto", "fast"):
        assert datapath.header(m).startswith(f"Data path: {m} - compiled (C): switch agents")
        assert "NIC RoCEv2 framing" in datapath.header(m).split("Python:")[0]
    assert datapath.header("python") == "Data path: python - everything in Python (the reference)"


def test_compiled_imports_the_c_module_only_when_chosen(monkeypatch):
    import sys
    mod = "traffic.fast._nicstep"
    monkeypatch.delitem(sys.modules, mod, raising=False)
    assert datapath.compiled(mod, "python") is None and mod not in sys.modules
    c = datapath.compiled(mod, "auto")
    assert c is sys.modules[mod] and callable(c.step)
    monkeypatch.setattr(cbuild, "is_current", lambda name: False)
    with pytest.raises(datapath.NotBuilt, match=r"_nicstep\) is not built"):
        datapath.compiled(mod, "fast")
