"""`--seed` reaches the balancer's groups (issue 31; docs/LOAD_BALANCING.md, RUNNING.md
"--seed"): each flowlet / spray group draws from `Random(f"{seed}:{switch}:lb:{members}")`
(`switch_agent.balancer.group_seed`), so no two groups of a run share a stream, no two
seeds do (the int `seed + group index` it replaces made seed 2's first group draw what
seed 1's second drew), and the stream is the same in every process whatever its
PYTHONHASHSEED. No root."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from emucore.lbconfig import LoadBalance
from switch_agent.balancer import Balancer, group_seed

from .test_agent import make_agent
from .test_lb import fake_port, frame, key, nh

ROOT = Path(__file__).resolve().parents[2]
GROUPS = (("eth5", "eth6"), ("eth7", "eth8"))
SPRAY = LoadBalance(mode="spray", spray="random")


def stream(b: Balancer, names: tuple[str, ...]) -> random.Random:
    """The generator of `b`'s group over `names`, made by deciding one flow over it."""
    b.decide([nh(n, "02:00:00:00:07:01") for n in names], key(), 0)
    return b.groups[names].rng.__self__


def balancer(seed: int, switch: str) -> Balancer:
    ports = {n: fake_port(n) for g in GROUPS for n in g}
    return Balancer(SPRAY, ports, 10.0, seed, switch)


def test_a_group_draws_from_the_documented_stream():
    assert group_seed(5, "rail1", ("eth5", "eth6")) == "5:rail1:lb:eth5,eth6"
    got = stream(balancer(5, "rail1"), ("eth5", "eth6"))
    assert got.getstate() == random.Random("5:rail1:lb:eth5,eth6").getstate()


def test_no_two_groups_switches_or_seeds_share_a_stream():
    firsts = {}
    for seed in (1, 2, 3):
        for switch in ("rail1", "rail2"):
            b = balancer(seed, switch)
            for names in GROUPS:
                firsts[seed, switch, names] = stream(b, names).getrandbits(64)
    assert len(set(firsts.values())) == len(firsts) == 12
    # what `seed + len(groups)` made equal: seed 2's first group, seed 1's second
    assert firsts[2, "rail1", GROUPS[0]] != firsts[1, "rail1", GROUPS[1]]


def test_the_agent_names_its_groups_by_its_switch():
    """rail1's spray group over its two uplinks: ten packets of one flow go where
    Random("1:rail1:lb:eth5,eth6") sends them (seed 1, the default)."""
    a = make_agent(lb=SPRAY)
    assert (a.balancer.seed, a.balancer.switch) == (1, "rail1")
    for _ in range(10):
        a.on_frame(a.ports["eth1"], frame(), 0.0)
    want = random.Random("1:rail1:lb:eth5,eth6")
    picks = [("eth5", "eth6")[want.randrange(2)] for _ in range(10)]
    assert a.balancer.groups["eth5", "eth6"].rng.__self__.getstate() == want.getstate()
    t = 0.0
    while t <= 0.05:
        a.service(t)
        t += 0.0005
    assert [a.ports[n].tx_packets for n in ("eth5", "eth6")] == \
        [picks.count(n) for n in ("eth5", "eth6")]


def test_the_stream_is_the_same_in_other_processes_whatever_their_hash_seed():
    code = ("import json; from switch_agent.balancer import group_seed; import random; "
            "print(json.dumps(random.Random(group_seed(5, 'rail1', ('eth5', 'eth6')))"
            ".getrandbits(64)))")
    here = random.Random(group_seed(5, "rail1", ("eth5", "eth6"))).getrandbits(64)
    for hash_seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                             capture_output=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert json.loads(out.stdout) == here
