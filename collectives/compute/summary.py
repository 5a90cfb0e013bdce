"""Per rank of a finished job: its compute (from its compute record,
`collectives.compute.record`), its communication (every operation its emu groups ran,
from their records) and their overlap over the job's window, in model milliseconds -
what `emu run --gpu` prints per rank and keeps in summary.json (`workload.compute`)."""

from __future__ import annotations

from collectives.compute.split import split


def comm_intervals_model(records: list[dict]) -> list[tuple[float, float]]:
    """(start, end) model seconds of every operation in a rank's backend records."""
    out = []
    for rec in records:
        for h in rec.get("history", []):
            tdf = h.get("tdf", 1.0)
            out.append((h["t0_lab"] / tdf, (h["t0_lab"] + h["seconds_lab"]) / tdf))
    return out


def rank_split(compute: dict, records: list[dict]) -> dict:
    """The rank's window (its first compute or operation to its last) split in model ms,
    with its modelled FLOPs and worst compute lag."""
    cint = [(r["t0_model_s"], r["t1_model_s"]) for r in compute.get("regions", [])]
    mint = comm_intervals_model(records)
    pts = [x for iv in cint + mint for x in iv]
    if not pts:
        return {}
    s = split((min(pts), max(pts)), cint, mint)
    out = {k.replace("_s", "_ms"): round(v * 1e3, 4) for k, v in s.items()}
    tot = compute.get("totals", {})
    out["flops"] = sum(v.get("flops", 0.0) for v in tot.values() if isinstance(v, dict))
    out["lag_max_model_us"] = round(tot.get("lag_max_model_s", 0.0) * 1e6, 3)
    return out
