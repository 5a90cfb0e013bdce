"""The zygote's WARM imports (collectives.zygote.warm): which ranks it imports
torch._dynamo and torch.profiler for before forking them, and that it stays
single-threaded after importing them (the fork's thread check)."""

import json

import pytest

from collectives import zygote
from collectives.runners import Zygote
from tests.unit.test_zygote import wait, zygote_env


@pytest.mark.parametrize("argv, trains", [
    (["train.py", "--steps", "3"], True),                     # a script: it may train
    (["--module", "collectives.workloads.train"], True),
    (["--module", "collectives.workloads.overlap", "--x"], True),
    (["--module", "collectives.workloads.models"], True),
    (["--module", "collectives.workloads.allreduce", "--size", "1MB"], False),
    (["--module", "collectives.workloads.pipeline"], False),
    (["--module", "mypkg.train"], True),                      # a user's module
    (["--module"], True),
])
def test_which_ranks_the_zygote_warms_for(argv, trains):
    assert zygote.warms(argv) is trains


WARM_SCRIPT = """\
import json, os, sys
json.dump({"warm": [m in sys.modules for m in sys.argv[2:]],
           "threads": len(os.listdir("/proc/self/task"))}, open(sys.argv[1], "w"))
"""


def test_a_script_rank_starts_with_dynamo_imported_and_one_thread(tmp_path):
    """A DDP rank imported torch._dynamo (~800 modules, 1.6-2.7 s CPU) after the fork;
    the zygote imports it before forking a script's rank - and stays single-threaded."""
    p = tmp_path / "warm.py"
    p.write_text(WARM_SCRIPT)
    z = Zygote(zygote_env(), tmp_path / "zygote.log", timeout=600)
    try:
        pid = z.spawn([str(p), str(tmp_path / "w.json"), *zygote.WARM], {},
                      tmp_path / "w.log", tmp_path)
        assert wait(z, [pid]) == {pid: 0}, (tmp_path / "w.log").read_text()
    finally:
        z.close()
    seen = json.loads((tmp_path / "w.json").read_text())
    assert seen == {"warm": [True] * len(zygote.WARM), "threads": 1}
