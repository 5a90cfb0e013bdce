"""The opt-in VM check (tests/vm) reruns a lab that fell behind at the TDF the lab names:
its parse of `emu lab run`'s message, held to the message emu/lab/command.py prints."""

from pathlib import Path

import pytest

from tests.vm.test_vm import first_lab_tdf, lab_rerun_tdf

COMMAND = Path(__file__).resolve().parents[2] / "emu" / "lab" / "command.py"


@pytest.mark.parametrize("out, tdf", [
    ("The lab did not keep up with the model: its verdict does not count. Rerun with --tdf 20000.", 20000.0),
    ("... Rerun with --tdf 1.5e+05.\nVerdict: FAIL.", 150000.0),
    ("The lab did not keep up with the model.\nVerdict: FAIL.", None),
    ("Verdict: PASS.  Run directory: runs/lab-L11.3", None),
])
def test_lab_rerun_tdf(out, tdf):
    assert lab_rerun_tdf(out) == tdf


def test_the_lab_still_prints_the_message_parsed():
    assert 'Rerun "\n              f"with --tdf {max(sug):g}.' in COMMAND.read_text()


@pytest.mark.parametrize("env, tdf", [
    ({}, None),                                              # KVM: the lab file's TDF
    ({"EMU_VM_DRIVER": "kvm"}, None),
    ({"EMU_VM_DRIVER": "qemu"}, 100000),                     # TCG: where L11.3 kept up
    ({"EMU_VM_DRIVER": "qemu", "EMU_VM_LAB_TDF": "0"}, None),
    ({"EMU_VM_LAB_TDF": "50000"}, 50000),
])
def test_first_lab_tdf(env, tdf):
    assert first_lab_tdf(env) == tdf


def test_first_lab_tdf_names_a_bad_value():
    with pytest.raises(ValueError, match="EMU_VM_LAB_TDF"):
        first_lab_tdf({"EMU_VM_LAB_TDF": "fast"})
