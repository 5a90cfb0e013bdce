"""Run a PyTorch workload on every emulated GPU and turn what the ranks left into the
run's result (book ch.14: the job, its rendezvous, the ring's traffic).

Called by `emu run --workload allreduce|train|pipeline|tensor` and `--script`: reads the
NICs' payload counters before and after, launches the job (`collectives.launch`), and
gathers from the workers' files: rank 0's workload result, every rank's backend record
(unique ID, ring, per-operation model times and per-step timestamps). For AllReduce it
adds the ring's expected traffic: each rank whose ring successor is on another host
sends 2(N-1)/N x S per AllReduce of S bytes through its NIC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collectives.launch import run_job
from fabric.timedil import TimeDilation
from traffic.nic_client import request

MODULES = {"allreduce": "collectives.workloads.allreduce", "train": "collectives.workloads.train",
           "pipeline": "collectives.workloads.pipeline", "tensor": "collectives.workloads.tensor"}


def nic_payload_tx(sock: str) -> int:
    """RDMA payload bytes a NIC has sent (live QPs + QPs destroyed since it started)."""
    c = request(sock, {"cmd": "counters"})
    return c.get("closed_qps_tx_bytes", 0) + sum(q.get("tx_bytes", 0)
                                                  for q in c.get("qps", {}).values())


def target_argv(args: Any) -> list[str]:
    """What `python -m collectives.run` gets for this workload."""
    if args.workload == "script":
        return [str(Path(args.script[0]).resolve())] + list(args.script[1:])
    argv = ["--module", MODULES[args.workload], "--backend", args.backend]
    if args.workload == "allreduce":
        argv += ["--size", args.size or "64MB", "--dtype", args.dtype]
    if args.iters is not None and args.workload in ("allreduce", "train"):
        argv += ["--iters", str(args.iters)]
    return argv


def world_record(records: list[dict]) -> dict | None:
    """A rank's backend record of the world group (the largest group, first made)."""
    return max(records, key=lambda r: (len(r["peers"]), -int(r["group"])
                                       if str(r["group"]).isdigit() else 0), default=None)


def ring_steps(backend: dict[int, list[dict]], min_bytes: int = 1024) -> list[dict]:
    """Per-step timeline of the last large AllReduce, every rank, aligned in model time."""
    ops = {}
    for rank, recs in backend.items():
        w = world_record(recs)
        big = [h for h in (w or {}).get("history", [])
               if h["op"] == "allreduce" and h["bytes"] >= min_bytes]
        if big:
            ops[rank] = big[-1]
    if not ops:
        return []
    t0 = min(o["t0_lab"] for o in ops.values())
    out = []
    for rank, o in sorted(ops.items()):
        shift = TimeDilation(o["tdf"]).model_time(o["t0_lab"] - t0)
        for s in o["steps"]:
            out.append({"rank": rank, "step": s["step"], "phase": s["phase"],
                        "t_start_s": s["t_start_s"] + shift, "t_end_s": s["t_end_s"] + shift})
    return out


def fabric_senders(backend: dict[int, list[dict]]) -> list[str]:
    """GPUs whose successor on the world ring sits on another host (they use the NIC)."""
    w = world_record(backend.get(0, []))
    if not w:
        return []
    ring, peers = w["ring"], w["peers"]
    return [peers[r]["gpu"] for i, r in enumerate(ring)
            if peers[r]["host"] != peers[ring[(i + 1) % len(ring)]]["host"]]


def run_torch_workload(fnet: Any, args: Any, w: dict, socks: dict[str, str]) -> dict:
    """Launch, wait, gather; {"result", "ok", "text"} as `emu run` expects."""
    out_dir = Path(fnet.run_dir or ".") / "workers"
    before = {g: nic_payload_tx(s) for g, s in socks.items()}
    job = run_job(fnet, target_argv(args), socks, out_dir)
    after = {g: nic_payload_tx(s) for g, s in socks.items()}
    tx = {g: after[g] - before[g] for g in socks}
    n = len(job["slots"])
    rank0 = job["results"].get(0, {})
    w0 = world_record(job["backend"].get(0, []))
    res = {"workload": args.workload, "backend": args.backend, "ranks": n, "job": job["job"],
           "master": job["master"], "seconds_lab": job["seconds_lab"],
           "returncodes": job["returncodes"], "failed": job["failed"],
           "unique_id": (w0 or {}).get("unique_id"), "ring": [
               w0["peers"][r]["gpu"] for r in w0["ring"]] if w0 else [],
           "nic_payload_tx_bytes": tx, "rank0": rank0,
           "workers_dir": str(out_dir)}
    ok = job["ok"] and (args.workload == "script" or (
        len(job["results"]) == n and all(r.get("ok") for r in job["results"].values())))
    lines = [f"{args.workload}: {n} ranks, master {job['master']}, backend {args.backend}, "
             f"{job['seconds_lab']:.1f} s lab; worker logs in {out_dir}"]
    if w0:
        lines.append(f"  world ring: {' -> '.join(res['ring'])}; unique ID "
                     f"{res['unique_id'][:16]}... ({len(res['unique_id']) // 2} bytes)")
    if args.workload == "allreduce" and args.backend == "emu" and rank0.get("rows"):
        rows = rank0["rows"]
        total = sum(r["size"] * (r["iters"] + r["warmup"]) for r in rows)
        res["expected_tx_bytes_per_fabric_sender"] = 2 * (n - 1) / n * total
        res["fabric_senders"] = fabric_senders(job["backend"])
        res["steps"] = ring_steps(job["backend"])
        for g in res["fabric_senders"]:
            lines.append(f"  {g} NIC sent {tx[g]} B payload = "
                         f"{tx[g] / res['expected_tx_bytes_per_fabric_sender']:.3f} x "
                         f"2(N-1)/N x S, summed over {sum(r['iters'] + r['warmup'] for r in rows)} "
                         "AllReduces")
    for r in job["failed"]:
        lines.append(f"  RANK {r} FAILED (exit {job['returncodes'][r]}); log tail:\n"
                     + "\n".join("    " + t for t in job["failed_tails"][r].splitlines()))
    if not ok and not job["failed"]:
        lines.append("  a rank reported a failed check; see its rank<R>.json")
    return {"result": res, "ok": ok, "text": "\n".join(lines)}
