"""`emu bench train`: a GPT-2-small DDP step on rail2x4 with the H100 compute model,
with DDP's compute/communication overlap on and off, in one run (issue 15; book ch.8
"Data parallelism").

Each mode is one `emu run rail2x4 --workload train --model gpt2-small --gpu h100
--overlap on|off` as a user would start it: 8 ranks, 85 M parameters, bf16 gradients
on the wire (170 MB per step, DDP's 25 MB buckets), the table's step shape (8 x 1024
tokens per GPU, 27.7 ms of forward + backward on an H100). Printed per mode, from rank
0's last iteration (the first sets up the QPs): iteration time, compute, communication,
their overlap and the exposed communication, in model milliseconds; against the ideal
ring AllReduce of the gradients, 2 (N - 1) / N x 170 MB at 200 Gbps; and whether the
fidelity guard says the run kept up (a figure counts only then).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import topologies
from emu.observe import guard
from emu.bench.benchrun import emu_run

FIELDS = ("window_ms", "compute_ms", "comm_ms", "overlap_ms", "exposed_comm_ms", "other_ms")


def ideal_allreduce_ms(grad_bytes: float, ranks: int, link_bps: float) -> float:
    """A ring AllReduce's time at line rate: every rank sends 2 (N - 1) / N x S."""
    return 2 * (ranks - 1) / ranks * grad_bytes * 8 / link_bps * 1e3


def train(gpu: str = "h100", tdf: float | None = None, iters: int = 2,
          out: str | None = None, model: str = "gpt2-small") -> int:
    """Run both modes, print the table; exit 0 if both passed and kept up."""
    fab = topologies.load("rail2x4")
    link = fab.link_of("h1", fab.gpus["h1g1"].nic).model_bps
    print(f"bench train: {model} DDP on rail2x4 (8 ranks), --gpu {gpu}, overlap on and off, "
          f"{iters} iterations each (the last is reported), TDF {tdf or 'auto'}", flush=True)
    rows, ok = {}, True
    with tempfile.TemporaryDirectory(prefix="emu-bench-train-") as tmp:
        base = Path(out) if out else Path(tmp)
        for mode in ("on", "off"):
            d = base / f"overlap-{mode}"
            print(f"  overlap {mode}: emu run ... (results in {d}) ...", flush=True)
            argv = ["rail2x4", "--workload", "train", "--model", model, "--gpu", gpu,
                    "--overlap", mode, "--iters", str(iters), "--pcap", "none", "--quiet",
                    "--out", str(d)] + (["--tdf", f"{tdf:g}"] if tdf else [])
            code = emu_run(argv)
            path = d / "summary.json"
            s = json.loads(path.read_text()) if path.is_file() else {}
            r0 = ((s.get("workload") or {}).get("rank0") or {})
            rows[mode] = (code, s, r0)
            ok &= code == 0 and bool(r0.get("iterations"))
        print()
        head = next((r0 for _, _, r0 in rows.values() if r0.get("compute")), {})
        comp = head.get("compute", {})
        grad = head.get("params", 0) * (2 if head.get("wire") == "bf16" else 4)
        ideal = ideal_allreduce_ms(grad, 8, link)
        if comp:
            print(f"step: {comp['flops_step'] / 1e12:.3f} TFLOP of {comp['shape']} per GPU "
                  f"-> {comp['step_model_ms']:.3f} ms on an {gpu} ({comp['family']}); "
                  f"gradients {grad / 1e6:.1f} MB on the wire, ideal ring AllReduce "
                  f"{ideal:.3f} ms at {link / 1e9:g} Gbps")
        print(f"{'overlap':<8}" + "".join(f"{f.replace('_ms', ''):>15}" for f in FIELDS)
              + f"{'comm/ideal':>11}  fidelity")
        for mode, (code, s, r0) in rows.items():
            it = (r0.get("iterations") or [{}])[-1]
            vals = "".join(f"{it.get(f, float('nan')):>15.3f}" for f in FIELDS)
            ratio = it.get("comm_ms", float("nan")) / ideal if ideal else float("nan")
            print(f"{mode:<8}{vals}{ratio:>11.2f}  exit {code}, "
                  f"{guard.line(s) if s else 'no summary.json'}")
        on, off = rows["on"][2], rows["off"][2]
        if on.get("iterations") and off.get("iterations"):
            a, b = on["iterations"][-1]["window_ms"], off["iterations"][-1]["window_ms"]
            print(f"\niteration with overlap / without: {a:.3f} / {b:.3f} ms = {a / b:.3f}")
    return 0 if ok else 1
