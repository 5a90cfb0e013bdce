"""The book's ring AllReduce step by step (ch.14 Figs 14-5..14-17, lab L14.3) and its job
start (Figs 14-1..14-3, L14.1): the rank-order ring, the per-step chunk trace, the rank
table, MASTER_ADDR by rank and the `emu run --ring / --master-port` options."""

import argparse
import json

import pytest

import topologies
from collectives import jobresult
from collectives.jobresult import chunk_letters, rank_table, ring_steps, ring_trace
from collectives.launch import LOOPBACK, MASTER_PORT, frontend_ip, plan, run_job, worker_env
from collectives.ring import RING_KINDS, Member, ring_by, ring_positions, schedule
from emu.cli import build_parser
from emu.commands.run import run_options
from emu.run.options import RunOptions, validate
from tests.unit.localjob import run_ranks

#: LABS.md L14.3, the book's table (L3548-3756): chunk sent by rank 0, 1, 2, 3 per step
BOOK_SENT = {"RS1": "ABCD", "RS2": "DABC", "RS3": "CDAB",
             "AG1": "BCDA", "AG2": "ABCD", "AG3": "DABC"}
BOOK_OWNED_AFTER_RS = "BCDA"  # rank 0 holds B fully reduced, 1 C, 2 D, 3 A (L3656-3660)


def members(topo: str) -> list[Member]:
    return [Member(s.rank, s.host, s.rail) for s in plan(topologies.load(topo))]


def table(ring: list[int], field: str = "send") -> dict[str, str]:
    """Per step, the chunk letters each rank (0..N-1) sends (or receives) in `ring`."""
    n, pos = len(ring), {r: p for p, r in enumerate(ring)}
    steps = schedule(n)
    names = [f"RS{i + 1}" for i in range(n - 1)] + [f"AG{i + 1}" for i in range(n - 1)]
    return {name: chunk_letters([st[field][pos[r]] for r in range(n)], n)
            for name, st in zip(names, steps)}


# -- the ring and its schedule --------------------------------------------------------
def test_rank_ring_on_rail2x2_gives_the_books_table():
    ring = ring_by("rank", members("rail2x2"))
    assert ring == [0, 1, 2, 3]  # rank 0 = h1g1, 1 = h1g2, 2 = h2g1, 3 = h2g2 (L3534)
    assert table(ring) == BOOK_SENT
    assert table(ring, "recv")["RS3"] == BOOK_OWNED_AFTER_RS
    # AG iter 1: rank 0 sends B and receives A (L3683)
    assert table(ring, "recv")["AG1"][0] == "A"


def test_rail_ring_is_the_default_and_orders_gpus_otherwise():
    ms = members("rail2x2")
    assert ring_by("rail", ms) == ring_positions(ms) == [0, 2, 3, 1]  # h1g1 h2g1 h2g2 h1g2
    assert table(ring_by("rail", ms)) != BOOK_SENT
    assert RING_KINDS[0] == "rail"


def test_rank_ring_of_a_subgroup_is_its_group_rank_order():
    ms = [Member(r, f"h{r % 2}", 1 + r // 2) for r in (3, 0, 2, 1)]
    assert ring_by("rank", ms) == [0, 1, 2, 3]


def test_a_bad_ring_order_names_emu_ring():
    with pytest.raises(ValueError, match="EMU_RING.*'ring'"):
        ring_by("ring", members("rail2x2"))


# -- the trace from the backend's records ---------------------------------------------
def record(rank: int, n: int, ring: list[int], history: list[dict]) -> dict:
    return {"group": "0", "rank": rank, "world_rank": rank, "ring": ring, "unique_id": "ab" * 128,
            "peers": [{"rank": r, "gpu": f"h{r // 2 + 1}g{r % 2 + 1}", "host": f"h{r // 2 + 1}"}
                      for r in range(n)],  # as on rail2x2: 2 GPUs per host
            "history": history}


def allreduce_op(rank: int, ring: list[int], nbytes: int, chunks: bool = True) -> dict:
    n, p = len(ring), ring.index(rank)
    steps = [{"step": i, "phase": st["phase"], "t_start_s": i * 1e-6, "t_end_s": (i + 1) * 1e-6,
              **({"send_chunk": st["send"][p], "recv_chunk": st["recv"][p]} if chunks else {})}
             for i, st in enumerate(schedule(n))]
    return {"op": "allreduce", "bytes": nbytes, "ranks": n, "tdf": 1.0, "t0_lab": 0.0,
            "seconds_lab": 1.0, "seconds_model": 1.0, "steps": steps}


def test_ring_trace_of_synthetic_records_is_the_books_table():
    ring = [0, 1, 2, 3]
    wrong = [0, 2, 3, 1]  # an earlier large AllReduce on another ring: not the last one
    backend = {r: [record(r, 4, ring, [allreduce_op(r, wrong, 4096), allreduce_op(r, ring, 4096),
                                       allreduce_op(r, wrong, 4)])]  # barrier: too small
               for r in range(4)}
    got = ring_trace(backend)
    assert got["trace"] == BOOK_SENT
    assert got["owned_after_rs"] == BOOK_OWNED_AFTER_RS
    assert got["trace_recv"] == {"RS1": "DABC", "RS2": "CDAB", "RS3": "BCDA",
                                 "AG1": "ABCD", "AG2": "DABC", "AG3": "CDAB"}
    assert list(got["trace"]) == ["RS1", "RS2", "RS3", "AG1", "AG2", "AG3"]
    steps = ring_steps(backend)  # the timeline carries the chunks too
    assert [(s["rank"], s["step"], s["send_chunk"], s["recv_chunk"]) for s in steps[:2]] == [
        (0, 0, 0, 3), (0, 1, 3, 2)]


def test_ring_trace_is_empty_without_chunks_or_records():
    ring = [0, 1, 2, 3]
    old = {r: [record(r, 4, ring, [allreduce_op(r, ring, 4096, chunks=False)])] for r in range(4)}
    assert ring_trace(old) == {} and ring_trace({}) == {}
    missing = {r: [record(r, 4, ring, [allreduce_op(r, ring, 4096)])] for r in range(3)}
    assert ring_trace(missing) == {}  # a rank left no record: no table


def test_chunk_letters_are_the_books_up_to_26_chunks_then_numbers():
    assert chunk_letters([0, 1, 2, 3], 4) == "ABCD"
    assert chunk_letters([25, 0], 26) == "ZA"
    assert chunk_letters([26, 0, 3], 27) == "26,0,3"


def test_ring_trace_for_27_ranks_uses_numbers():
    n = 27
    ring = list(range(n))
    backend = {r: [record(r, n, ring, [allreduce_op(r, ring, 1 << 20)])] for r in range(n)}
    got = ring_trace(backend)
    assert got["trace"]["RS1"] == ",".join(str(r) for r in range(n))
    assert got["owned_after_rs"] == ",".join(str((r + 1) % n) for r in range(n))


# -- job start (L14.1) ------------------------------------------------------------------
def test_rank_table_on_rail4x2_is_the_books():
    slots = rank_table([s.__dict__ for s in plan(topologies.load("rail4x2"))])
    # L3467-3481: Host A (node_rank 0) ranks 0-3, Host B (node_rank 1) ranks 4-7
    assert [(s["rank"], s["node_rank"], s["local_rank"]) for s in slots] == [
        (r, r // 4, r % 4) for r in range(8)]
    assert slots[5] == {"rank": 5, "gpu": "h2g2", "host": "h2", "node_rank": 1, "local_rank": 1}


def test_master_hosts_ranks_use_loopback_the_others_the_frontend(tmp_path):
    fab = topologies.load("rail4x2")
    slots = plan(fab)
    envs = [worker_env(fab, s, 4, 2, "/nic.sock", tmp_path, "j", 12345, "rank") for s in slots]
    master = frontend_ip(fab, "h1")
    assert master == "192.168.10.101" and LOOPBACK == "127.0.0.1"
    # L3487: ranks 1-3 reach the master over 127.0.0.1, ranks 4-7 over 192.168.10.101
    assert [e["MASTER_ADDR"] for e in envs] == [LOOPBACK] * 4 + [master] * 4
    assert {e["MASTER_PORT"] for e in envs} == {"12345"}
    assert {e["EMU_RING"] for e in envs} == {"rank"}
    default = worker_env(fab, slots[0], 4, 2, "/nic.sock", tmp_path, "j")
    assert default["MASTER_PORT"] == str(MASTER_PORT) == "29500" and default["EMU_RING"] == "rail"


@pytest.mark.parametrize("kw", [{"ring": "book"}, {"port": 0}, {"port": 65536}])
def test_run_job_refuses_a_bad_ring_or_port_before_starting(tmp_path, kw):
    with pytest.raises(ValueError, match="run_job"):
        run_job(None, ["x.py"], {}, tmp_path, **kw)
    assert not list(tmp_path.iterdir())


def test_torch_workload_result_has_the_job_start_and_the_trace(tmp_path, monkeypatch):
    fab = topologies.load("rail2x2")
    slots = [s.__dict__ for s in plan(fab)]
    order = [0, 1, 2, 3]
    calls = {}

    def fake_run_job(fnet, target, socks, out_dir, port, ring, watch=None, cwd=None,
                     backend="emu", gpu="none"):
        calls.update(port=port, ring=ring, backend=backend)
        return {"ok": True, "returncodes": {r: 0 for r in range(4)}, "seconds_lab": 1.0,
                "results": {r: {"ok": True, "rows": [{"size": 4096, "iters": 1, "warmup": 0}]}
                            for r in range(4)},
                "backend": {r: [record(r, 4, order, [allreduce_op(r, order, 4096)])]
                            for r in range(4)},
                "failed": [], "failed_tails": {}, "slots": slots, "job": "j",
                "master": "192.168.10.101:12345",
                "master_addr_by_rank": {0: LOOPBACK, 1: LOOPBACK, 2: "192.168.10.101",
                                        3: "192.168.10.101"}}
    monkeypatch.setattr(jobresult, "run_job", fake_run_job)
    monkeypatch.setattr(jobresult, "nic_payload_tx", lambda sock: 0)
    args = argparse.Namespace(workload="allreduce", backend="emu", size="4096", dtype="float32",
                              iters=1, ring="rank", master_port=12345)
    fnet = argparse.Namespace(run_dir=str(tmp_path))
    out = jobresult.run_torch_workload(fnet, args, {}, {g: "/nic" for g in fab.gpus})
    res = out["result"]
    assert out["ok"] and calls == {"port": 12345, "ring": "rank", "backend": "emu"}
    assert res["master"] == "192.168.10.101:12345" and res["master_port"] == 12345
    assert res["master_addr_by_rank"][1] == LOOPBACK and res["ring_kind"] == "rank"
    assert res["slots"] == rank_table(slots) and res["slots"][2]["gpu"] == "h2g1"
    assert res["trace"] == BOOK_SENT and res["owned_after_rs"] == BOOK_OWNED_AFTER_RS
    assert "RS1 ABCD" in out["text"] and "127.0.0.1 for ranks 0, 1" in out["text"]
    # the book's ring leaves each host from its second GPU: h1g2 -> h2g1, h2g2 -> h1g1
    assert res["fabric_senders"] == ["h1g2", "h2g2"]


# -- emu run's options ------------------------------------------------------------------
def run_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", "rail2x2", "--workload", "allreduce", *argv])


def test_emu_run_ring_and_master_port_defaults_and_values():
    fab = topologies.load("rail2x2")
    a = run_args()
    assert (a.ring, a.master_port) == ("rail", 29500)
    assert validate(run_options(a), fab)["ring"] == "rail"
    b = run_args("--ring", "rank", "--master-port", "12345")
    opts = validate(run_options(b), fab)
    assert (opts["ring"], opts["master_port"]) == ("rank", 12345)
    with pytest.raises(SystemExit):
        run_args("--ring", "book")


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_a_master_port_outside_1_65535_is_refused_naming_the_option(port):
    with pytest.raises(ValueError, match=f"--master-port: must be 1..65535, got {port}"):
        validate(run_options(run_args("--master-port", str(port))), topologies.load("rail2x2"))


def test_options_built_without_ring_or_port_take_the_defaults():
    a = RunOptions("rail2x2", workload="allreduce")  # a caller's own (labs) may leave them out
    opts = validate(a, topologies.load("rail2x2"))
    assert (opts["ring"], opts["master_port"]) == ("rail", MASTER_PORT)


# -- the backend records it: 4 ranks on this machine (shared memory) -------------------
SCRIPT = r'''
import torch, torch.distributed as dist
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
t = torch.full((1024,), float(r + 1))   # the book's last layer: 1024 gradients, 4 x 256
dist.all_reduce(t)
assert torch.equal(t, torch.full((1024,), float(sum(range(1, n + 1))))), t
o = torch.zeros(256); dist.reduce_scatter_tensor(o, torch.ones(1024)); assert (o == n).all()
outs = [torch.zeros(8) for _ in range(n)]; dist.all_gather(outs, torch.full((8,), float(r)))
dist.barrier()
dist.destroy_process_group()
'''


def test_backend_records_the_books_table_with_emu_ring_rank(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    run_ranks(4, [str(script)], tmp_path, env_extra={"EMU_RING": "rank"})
    backend = {r: [json.loads((tmp_path / f"emu-rank{r}-g0.json").read_text())]
               for r in range(4)}
    assert {b[0]["ring_kind"] for b in backend.values()} == {"rank"}
    assert backend[0][0]["ring"] == [0, 1, 2, 3]
    got = ring_trace(backend)
    assert got["trace"] == BOOK_SENT and got["owned_after_rs"] == BOOK_OWNED_AFTER_RS
    for r, (rec,) in backend.items():  # ReduceScatter / AllGather: chunk = whose segment
        ops = {h["op"]: h["steps"] for h in rec["history"]}
        assert ops["reduce_scatter"][-1]["recv_chunk"] == r  # rank r ends with segment r
        assert ops["allgather"][0]["send_chunk"] == r  # and starts the gather with its own


def test_same_unique_id_counts_the_ranks_holding_rank_0s():
    from collectives.jobresult import same_unique_id
    rec = lambda uid: [{"group": "0", "peers": [0, 1, 2], "unique_id": uid}]  # noqa: E731
    assert same_unique_id({0: rec("ab"), 1: rec("ab"), 2: rec("ab")}) == 3
    assert same_unique_id({0: rec("ab"), 1: rec("cd"), 2: []}) == 1
    assert same_unique_id({}) == 0
