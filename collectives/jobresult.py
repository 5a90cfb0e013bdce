"""Run a PyTorch workload on every emulated GPU and turn what the ranks left into the
run's result (book ch.14: the job, its rendezvous, the ring's traffic).

Called by `emu run --workload allreduce|train|pipeline|tensor` and `--script`: reads the
NICs' payload counters before and after, launches the job (`collectives.launch`, with
`--master-port` and `--ring`), and gathers from the workers' files: rank 0's workload
result, every rank's backend record (unique ID, ring, per-operation model times and
per-step timestamps and chunks). Every result has the job start of ch.14 Figs 14-1..14-3:
the rank table (`slots`), the master's frontend address and port, each rank's MASTER_ADDR
(127.0.0.1 on the master's host, L3487). For AllReduce it adds the ring's expected
traffic (each rank whose ring successor is on another host sends 2(N-1)/N x S per
AllReduce of S bytes through its NIC) and the book's step table of Figs 14-5..14-17
(`ring_trace`): per ReduceScatter / AllGather step the chunk letters each rank sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collectives.compute.summary import rank_split
from collectives.launch import MASTER_PORT, Prestart, run_job
from emucore import fidelity
from emucore.timedil import TimeDilation
from traffic.nic.client import request

MODULES = {"allreduce": "collectives.workloads.allreduce", "train": "collectives.workloads.train",
           "pipeline": "collectives.workloads.pipeline", "tensor": "collectives.workloads.tensor"}


def nic_payload_tx(sock: str) -> int:
    """RDMA payload bytes a NIC has sent (live QPs + QPs destroyed since it started)."""
    c = request(sock, {"cmd": "counters"})
    return c.get("closed_qps_tx_bytes", 0) + sum(q.get("tx_bytes", 0)
                                                  for q in c.get("qps", {}).values())


def target_argv(args: Any) -> list[str]:
    """What `python -m collectives.worker` gets for this workload."""
    if args.workload == "script":
        return [str(Path(args.script[0]).resolve())] + list(args.script[1:])
    argv = ["--module", MODULES[args.workload], "--backend", args.backend]
    if args.workload == "allreduce":
        argv += ["--size", args.size or "64MB", "--dtype", args.dtype]
    if args.iters is not None and args.workload in ("allreduce", "train"):
        argv += ["--iters", str(args.iters)]
    if args.workload == "train":
        argv += ["--model", getattr(args, "model", "mlp"), "--overlap",
                 getattr(args, "overlap", "on")]
    return argv


def world_record(records: list[dict]) -> dict | None:
    """A rank's backend record of the world group (the largest group, first made)."""
    return max(records, key=lambda r: (len(r["peers"]), -int(r["group"])
                                       if str(r["group"]).isdigit() else 0), default=None)


def last_allreduce(backend: dict[int, list[dict]], min_bytes: int = 1024) -> dict[int, dict]:
    """rank -> its record of the last AllReduce of at least min_bytes in the world group."""
    ops = {}
    for rank, recs in backend.items():
        w = world_record(recs)
        big = [h for h in (w or {}).get("history", [])
               if h["op"] == "allreduce" and h["bytes"] >= min_bytes]
        if big:
            ops[rank] = big[-1]
    return ops


def ring_steps(backend: dict[int, list[dict]], min_bytes: int = 1024) -> list[dict]:
    """Per-step timeline of the last large AllReduce, every rank, aligned in model time
    (with the chunk each rank sent and received at that step, where recorded)."""
    ops = last_allreduce(backend, min_bytes)
    if not ops:
        return []
    t0 = min(o["t0_lab"] for o in ops.values())
    out = []
    for rank, o in sorted(ops.items()):
        shift = TimeDilation(o["tdf"]).model_time(o["t0_lab"] - t0)
        for s in o["steps"]:
            out.append({"rank": rank, "step": s["step"], "phase": s["phase"],
                        "t_start_s": s["t_start_s"] + shift, "t_end_s": s["t_end_s"] + shift,
                        **{k: s[k] for k in ("send_chunk", "recv_chunk") if k in s}})
    return out


def chunk_letters(chunks: list[int], n: int) -> str:
    """The book's chunk labels: A for chunk 0, B, ... ("ABCD"); past 26 chunks "0,1,..."."""
    return "".join(chr(ord("A") + c) for c in chunks) if n <= 26 else ",".join(map(str, chunks))


def ring_trace(backend: dict[int, list[dict]], min_bytes: int = 1024) -> dict:
    """The book's ring AllReduce table (Figs 14-5..14-17) from the last large AllReduce:
    {"trace": {"RS1": chunks sent by rank 0, 1, ..., ..., "AG<N-1>": ...}, "trace_recv"
    (the same, received), "owned_after_rs" (what each rank received at the last RS step:
    the chunk it holds fully reduced)}; {} unless every rank recorded its chunks."""
    ops = last_allreduce(backend, min_bytes)
    n = len(ops)
    if n < 2 or any(o["ranks"] != n or len(o["steps"]) != 2 * (n - 1) or "send_chunk" not in s
                    for o in ops.values() for s in o["steps"]):
        return {}
    out: dict = {"trace": {}, "trace_recv": {}}
    for i in range(2 * (n - 1)):
        name = f"RS{i + 1}" if i < n - 1 else f"AG{i - n + 2}"
        for key, field in (("trace", "send_chunk"), ("trace_recv", "recv_chunk")):
            out[key][name] = chunk_letters([ops[r]["steps"][i][field] for r in sorted(ops)], n)
    out["owned_after_rs"] = out["trace_recv"][f"RS{n - 1}"]
    return out


def same_unique_id(backend: dict[int, list[dict]]) -> int:
    """How many ranks hold rank 0's unique ID for the world group (the master made it and
    sent it to every rank over the rendezvous, L3501)."""
    uid = (world_record(backend.get(0, [])) or {}).get("unique_id")
    return sum(1 for recs in backend.values()
               if uid is not None and (world_record(recs) or {}).get("unique_id") == uid)


def rank_table(slots: list[dict]) -> list[dict]:
    """The job's ranks as the book's table (L3467-3481): rank, GPU, host, node and local rank."""
    return [{k: s[k] for k in ("rank", "gpu", "host", "node_rank", "local_rank")} for s in slots]


def fabric_senders(backend: dict[int, list[dict]]) -> list[str]:
    """GPUs whose successor on the world ring sits on another host (they use the NIC)."""
    w = world_record(backend.get(0, []))
    if not w:
        return []
    ring, peers = w["ring"], w["peers"]
    return [peers[r]["gpu"] for i, r in enumerate(ring)
            if peers[r]["host"] != peers[ring[(i + 1) % len(ring)]]["host"]]


def comm_fidelity(slots: list[dict], backend: dict[int, list[dict]]) -> dict[str, dict]:
    """GPU -> its worker's wake-up lags over every group it ran (collectives.channel
    `Events.meter`), for the fidelity guard; ranks without a record are left out."""
    out = {}
    for s in slots:
        snaps = [rec["fidelity"] for rec in backend.get(s["rank"], []) if rec.get("fidelity")]
        if snaps:
            out[s["gpu"]] = fidelity.merge(snaps)
    return out


def per_rank(slots: list[dict], backend: dict[int, list[dict]], tx: dict[str, int]) -> list[dict]:
    """Per rank: its GPU, the operations it issued on every group (count and bytes per
    kind, from the emu backend's records) and the payload its GPU's NIC sent."""
    out = []
    for s in slots:
        issued: dict[str, dict[str, int]] = {}
        for rec in backend.get(s["rank"], []):
            for kind, c in (rec.get("issued") or {}).items():
                into = issued.setdefault(kind, {"count": 0, "bytes": 0})
                into["count"] += c["count"]
                into["bytes"] += c["bytes"]
        out.append({"rank": s["rank"], "gpu": s["gpu"], "issued": issued,
                    "groups": len(backend.get(s["rank"], [])),
                    "nic_tx_bytes": tx.get(s["gpu"], 0)})
    return out


def rank_lines(rows: list[dict]) -> list[str]:
    """The per-rank table of the run's text: operations issued and NIC bytes."""
    if not any(r["issued"] for r in rows) and not any(r["nic_tx_bytes"] for r in rows):
        return []
    lines = ["  rank  GPU    groups  operations issued (count)             NIC payload sent"]
    for r in rows:
        ops = ", ".join(f"{k} {v['count']}" for k, v in sorted(r["issued"].items())) or "-"
        lines.append(f"  {r['rank']:>4}  {r['gpu']:<6} {r['groups']:>6}  {ops:<36}  "
                     f"{r['nic_tx_bytes']:>12,} B")
    return lines


def compute_lines(by_rank: dict | None, rank0: dict) -> list[str]:
    """With a compute model: each rank's compute, communication, overlap (model ms), and
    the train workload's last iteration."""
    if not by_rank:
        return []
    lines = ["  rank  model ms: window   compute     comm  overlap  exposed comm  "
             "compute lag"]
    for r, c in by_rank.items():
        if c:
            lines.append(f"  {r:>4}  {c['window_ms']:>16.3f} {c['compute_ms']:>9.3f} "
                         f"{c['comm_ms']:>8.3f} {c['overlap_ms']:>8.3f} "
                         f"{c['exposed_comm_ms']:>13.3f}  {c['lag_max_model_us']:>8.2f} us")
    its = rank0.get("iterations") or []
    if its:
        last = its[-1]
        lines.append(f"  rank 0, last of {len(its)} iterations: {last['window_ms']:.3f} ms model "
                     f"= compute {last['compute_ms']:.3f} + exposed communication "
                     f"{last['exposed_comm_ms']:.3f} + other {last['other_ms']:.3f} "
                     f"(communication {last['comm_ms']:.3f}, {last['overlap_ms']:.3f} "
                     "overlapped)")
    return lines


#: what a QP's error status means for the job (IBA 10.8.3, 11.6.2)
QP_ERRORS = {"RETRY_EXC_ERR": "no ACK within the retry budget (transport retry counter "
                              "exceeded): the peer or the path to it is gone",
             "RNR_RETRY_EXC_ERR": "the peer posted no receive within the RNR retries",
             "REM_ACCESS_ERR": "the peer refused the access (R_Key, range)",
             "REM_INV_REQ_ERR": "the peer found the request invalid",
             "LOC_PROT_ERR": "a local protection error (L_Key, range)"}


def nic_counters(sock: str) -> dict | None:
    """A NIC's counters, None when it does not answer."""
    try:
        return request(sock, {"cmd": "counters"})
    except Exception:  # NicError, OSError, ValueError: gone or mute
        return None


def qp_failure(fabric: Any, counters: dict[str, dict | None]) -> str | None:
    """The first QP in error among the GPUs' NIC counters, named: the GPU, the operation,
    the peer GPU and address, the status and what it means; None when none is."""
    by_ip = {g.ip: g.name for g in fabric.gpus.values()}
    for gpu in sorted(counters):
        c = counters[gpu]
        for qpn, q in sorted(((c or {}).get("qps") or {}).items()):
            if q.get("state") != "ERR":
                continue
            ip = (q.get("peer") or {}).get("remote_ip", "?")
            err = q.get("error") or "QP in error"
            return (f"{gpu} QP {int(qpn):#x}: RDMA WRITE to {by_ip.get(ip, '?')} ({ip}) "
                    f"failed with {err}" + (f" - {QP_ERRORS[err]}" if err in QP_ERRORS else ""))
    return None


def prestart(fnet: Any, args: Any) -> Prestart:
    """The job's zygote, started now for `run_torch_workload` later (collectives.launch.
    Prestart: run_job takes it only if its environment is what the job's would be)."""
    return Prestart(fnet, Path(fnet.run_dir or ".") / "workers",
                    port=getattr(args, "master_port", MASTER_PORT),
                    ring=getattr(args, "ring", "rail"), backend=args.backend,
                    gpu=getattr(args, "gpu", "none"))


def run_torch_workload(fnet: Any, args: Any, w: dict, socks: dict[str, str]) -> dict:
    """Launch, wait, gather; {"result", "ok", "text"} as `emu run` expects."""
    out_dir = Path(fnet.run_dir or ".") / "workers"
    before = {g: nic_payload_tx(s) for g, s in socks.items()}
    port, ring = getattr(args, "master_port", MASTER_PORT), getattr(args, "ring", "rail")
    job = run_job(fnet, target_argv(args), socks, out_dir, port=port, ring=ring,
                  watch=lambda: qp_failure(fnet.fabric, {g: nic_counters(s)
                                                          for g, s in socks.items()}),
                  cwd=getattr(args, "cwd", None), backend=args.backend,
                  gpu=getattr(args, "gpu", "none"))
    after = {g: nic_payload_tx(s) for g, s in socks.items()}
    tx = {g: after[g] - before[g] for g in socks}
    n = len(job["slots"])
    rank0 = job["results"].get(0, {})
    w0 = world_record(job["backend"].get(0, []))
    res = {"workload": args.workload, "backend": args.backend, "ranks": n, "job": job["job"],
           "master": job["master"], "master_port": port,
           "master_addr_by_rank": job["master_addr_by_rank"],
           "slots": rank_table(job["slots"]), "ring_kind": ring, "seconds_lab": job["seconds_lab"],
           "returncodes": job["returncodes"], "failed": job["failed"],
           "zygote": job.get("zygote"),
           "unique_id": (w0 or {}).get("unique_id"),
           "unique_id_ranks": same_unique_id(job["backend"]), "ring": [
               w0["peers"][r]["gpu"] for r in w0["ring"]] if w0 else [],
           "nic_payload_tx_bytes": tx, "rank0": rank0,
           "workers_dir": str(out_dir)}
    ok = job["ok"] and (args.workload == "script" or (
        len(job["results"]) == n and all(r.get("ok") for r in job["results"].values())))
    res["per_rank"] = per_rank(job["slots"], job["backend"], tx)
    res["comm_fidelity"] = comm_fidelity(job["slots"], job["backend"])
    if job.get("compute"):
        res["compute"] = {r: rank_split(c, job["backend"].get(r, []))
                          for r, c in sorted(job["compute"].items())}
        gpu_of = {s["rank"]: s["gpu"] for s in job["slots"]}
        res["compute_fidelity"] = {gpu_of[r]: c["fidelity"] for r, c in job["compute"].items()
                                   if c.get("fidelity")}
    silent = args.backend == "emu" and not any(tx.values())
    if args.workload == "script" and silent:
        ok = False
        res["no_fabric_bytes"] = True
    lines = [f"{args.workload}: {n} ranks, master {job['master']}, backend {args.backend}, "
             f"{job['seconds_lab']:.1f} s lab; worker logs in {out_dir}"]
    by_addr: dict[str, list[int]] = {}
    for r, a in job["master_addr_by_rank"].items():
        by_addr.setdefault(a, []).append(r)
    lines.append("  MASTER_ADDR " + "; ".join(f"{a} for ranks {', '.join(map(str, rs))}"
                                              for a, rs in by_addr.items()))
    if w0:
        lines.append(f"  world ring: {' -> '.join(res['ring'])}; unique ID "
                     f"{res['unique_id'][:16]}... ({len(res['unique_id']) // 2} bytes)")
    if args.workload == "allreduce" and args.backend == "emu" and rank0.get("rows"):
        rows = rank0["rows"]
        total = sum(r["size"] * (r["iters"] + r["warmup"]) for r in rows)
        res["expected_tx_bytes_per_fabric_sender"] = 2 * (n - 1) / n * total
        res["fabric_senders"] = fabric_senders(job["backend"])
        res["steps"] = ring_steps(job["backend"])
        res.update(ring_trace(job["backend"]))
        if res.get("trace"):
            steps = "  ".join(f"{k} {v}" for k, v in res["trace"].items())
            lines.append(f"  {ring} ring, chunk sent by rank 0..{n - 1} per step: {steps}; "
                         f"owned after RS {res['owned_after_rs']}")
        for g in res["fabric_senders"]:
            lines.append(f"  {g} NIC sent {tx[g]} B payload = "
                         f"{tx[g] / res['expected_tx_bytes_per_fabric_sender']:.3f} x "
                         f"2(N-1)/N x S, summed over {sum(r['iters'] + r['warmup'] for r in rows)} "
                         "AllReduces")
    lines += rank_lines(res["per_rank"])
    lines += compute_lines(res.get("compute"), rank0)
    if args.workload == "script" and silent:
        lines.append("  FAILED: no rank's NIC moved a byte over the fabric - the script never "
                     "communicated between hosts (or its collectives ran on another backend)")
    elif args.backend == "gloo":
        lines.append("  backend gloo: the collectives ran over the frontend's kernel TCP; the "
                     "NICs' bytes above are not theirs")
    if job.get("fabric_error"):
        res["fabric_error"] = job["fabric_error"]
        lines.append(f"  FAILED: {job['fabric_error']}; the job was stopped")
    for r in job["failed"]:
        lines.append(f"  RANK {r} FAILED (exit {job['returncodes'][r]}); log tail:\n"
                     + "\n".join("    " + t for t in job["failed_tails"][r].splitlines()))
    if not ok and not job["failed"] and not job.get("fabric_error"):
        lines.append("  a rank reported a failed check; see its rank<R>.json")
    return {"result": res, "ok": ok, "text": "\n".join(lines)}
