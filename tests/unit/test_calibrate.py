"""`--tdf auto`'s calibration (emu.observe.calibrate) is not fooled by a busy machine:
it counts the CPU the pipeline used, so a process that shares its CPU does not make
the same machine look slower (issue 30)."""

import json
import os
import subprocess
import sys
import time

import pytest

HOG = "while True: pass"


def _calibrate(cpu: int, seconds: float = 0.3) -> float:
    code = (f"import os; os.sched_setaffinity(0, {{{cpu}}}); "
            f"from emu.observe.calibrate import measure; print(measure({seconds}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       check=True)
    return float(r.stdout)


def test_time_frames_counts_on_the_clock_it_is_given():
    from emu.observe import calibrate
    agent, frame = calibrate.pipeline_agent(qos=True), calibrate.frames()["routed"]
    ticks = iter([10.0, 10.5])
    assert calibrate.time_frames(agent, frame, 100, clock=lambda: next(ticks)) == 0.5 / 100


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_process_sharing_the_cpu_does_not_slow_the_calibration():
    """A hog pinned to the calibration's CPU takes about half its time slices (CFS, two
    runnable tasks): a wall clock would read ~2x. CPU time reads the same work; the
    bound 1.5x sits between 1x (what CPU time should read) and the 2x of a wall clock."""
    cpu = min(os.sched_getaffinity(0))
    quiet = _calibrate(cpu)
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\n"
                            + HOG])
    try:
        time.sleep(0.2)
        busy = _calibrate(cpu)
    finally:
        hog.kill()
        hog.wait()
    assert busy < 1.5 * quiet, (busy, quiet)
