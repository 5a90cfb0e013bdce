"""`emu bench uet`: emu's Ultra Ethernet flow completion times beside those the UEC's
simulator uet-htsim measured for the same scenarios (issue 32; docs/UET.md "Held against
uet-htsim", docs/PERFORMANCE.md "UET against uet-htsim").

The fabric is `data/uet-leafspine.yaml` (every link 400 G - or the scenario's rate - and
1 us, four spines; the receiver h1g1 on one leaf, the senders h2g2..h5g2 on the other, so
each flow crosses a spine as in uet-htsim's cross-ToR flows); the switches are lossy
(`data/uet-htsim-qos.yaml`) with the scenario's port buffer, ECN thresholds and, with
trimming, the trim threshold at the buffer; the NICs speak UET with NSCC and the
scenario's entropy mode. Each scenario runs as a lab variant (emu.lab.runner: built, the
flows started together, torn down) at one TDF; a flow's FCT is when its sender saw the
completion, after the flows' common start (traffic.workloads.flows). A row counts only
when the run's fidelity guard says it kept up. The scenarios come from a file
(`data/uet-scenarios.yaml` by default, `--scenarios FILE`), parsed by emu.bench.uetscen.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import topologies
from emu.bench import uetscen
from emu.bench.uetscen import Scenario
from emu.lab.runner import run_variant
from emu.lab.schema import Lab
from emu.lab.variant import Variant
from emu.observe import guard
from emu.realise.nics import uet_nic_options
from emu.run.terminal import Terminal
from emucore import yamlcache
from emucore.qos.load import load_qos
from emucore.qos.qosconfig import QosConfig
from traffic.workloads.flows import Flow

DATA = Path(__file__).parent / "data"
TOPOLOGY = DATA / "uet-leafspine.yaml"
QOS = DATA / "uet-htsim-qos.yaml"
RECEIVER = "h1g1"
SENDERS = ("h2g2", "h3g2", "h4g2", "h5g2")  # another leaf than the receiver's
TIMEOUT_S = 120.0  # lab seconds a scenario's flows may take


def fabric_for(s: Scenario, tdf: float) -> topologies.Fabric:
    """The bench fabric with every link at the scenario's rate."""
    data = yamlcache.load_file(TOPOLOGY)
    rate = f"{s.link_bps / 1e9:g}G"
    data.update(host_link=rate, uplink=rate)
    return topologies.from_dict(data, source=str(TOPOLOGY), tdf=tdf)


def qos_for(s: Scenario) -> QosConfig:
    """The lossy QoS with the scenario's buffer and ECN thresholds; trimming at the
    buffer, or none."""
    data = yamlcache.load_file(QOS)
    q3 = data["queuing"]["queues"][3]
    q3["limit"] = f"{s.buffer}B"
    q3["wred"].update(min=f"{s.ecn[0]}B", max=f"{s.ecn[1]}B")
    if s.trimming:
        data["trim"]["threshold"] = f"{s.buffer}B"
    else:
        del data["trim"]
    return load_qos(data)


def variant_for(s: Scenario, tdf: float) -> Variant:
    """The scenario as a lab variant: its fabric, QoS, UET NICs and flows."""
    fab, qos = fabric_for(s, tdf), qos_for(s)
    flows = [Flow(f"f{i + 1}", SENDERS[i], RECEIVER, s.size) for i in range(s.senders)]
    nic = uet_nic_options({"ev": s.ev}, qos, f"{s.id}: emu")
    return Variant(s.id, s.title, fab, qos, "paper", nic, [], flows, [])


def why_not(s: Scenario) -> str | None:
    """Why this bench cannot run a scenario the file calls expressible, else None."""
    if s.senders > len(SENDERS):
        return f"{s.senders} senders; the bench fabric has {len(SENDERS)} on another leaf"
    if s.payload != 4096:
        return f"payload {s.payload} B: emu's UET payload is the NIC's path MTU (4096 here)"
    return None


def figures(run: dict, senders: list[str]) -> dict:
    """What explains a row: trims, NACKs, retransmissions, NSCC decreases and QuickAdapts,
    the smallest final window, the deepest queue towards the receiver, ECN marks."""
    counters, flows = run["counters"], run["result"]["flows"]
    qps = [q for g in senders for q in ((counters.get(g) or {}).get("qps") or {}).values()]
    nscc = [q.get("nscc") or {} for q in qps]
    ports = [p for sw in counters.values() if isinstance(sw, dict)
             for p in (sw.get("ports") or {}).values() if isinstance(p, dict)]
    to_rx = [p for p in ports if str(p.get("peer", "")).startswith(RECEIVER[:2] + ":")]
    return {"trims": sum(p.get("trimmed", 0) for p in ports),
            "nacks": sum(n.get("nacks", 0) for n in nscc),
            "retx": sum(f.get("retransmits", 0) for f in flows.values()),
            "decreases": sum(n.get("decrease", 0) for n in nscc),
            "quick_adapt": sum(n.get("quick_adapt", 0) for n in nscc),
            "cwnd_final_min": min((round(n["cwnd"]) for n in nscc if "cwnd" in n), default=None),
            "max_queue_to_rx": max((p.get("max_queue_bytes", 0) for p in to_rx), default=0),
            "ecn_marks": sum(q.get("ecn_marks", 0) for p in to_rx
                             for q in (p.get("queues") or {}).values())}


def run_one(s: Scenario, tdf: float, run_dir: Path) -> tuple[dict, dict, str]:
    """Run one scenario: (its table row, its figures, the guard's line)."""
    v = variant_for(s, tdf)
    lab = Lab("bench-uet", s.title, "", "", [], [], [], [v], 60.0, TIMEOUT_S, "")
    run = run_variant(lab, v, run_dir, Terminal(quiet=True))
    flows = run["result"]["flows"]
    ok = all(f.get("status") == "SUCCESS" and f.get("done_us") is not None for f in flows.values())
    fcts = [f["done_us"] for f in flows.values()] if ok else []
    fid = run.get("fidelity") or {}
    r = uetscen.row(s, fcts, fid.get("kept_up"))
    figs = {**figures(run, [f.src for f in v.flows]), "per_flow_us": fcts,
            "status": {n: f.get("status") for n, f in flows.items()},
            "byte_exact": all(f.get("byte_exact") for f in flows.values())}
    return r, figs, guard.line(run) or "Fidelity: no verdict"


def uet(scenarios: str | None = None, tdf: float = 10000.0, out: str | None = None) -> int:
    """Run every expressible scenario and print the table; 0 when every run completed
    byte-exact and kept up (the ratios are reported, not judged in the exit code)."""
    todo = [replace(s, ev=None, note=why_not(s)) if s.expressible and why_not(s) else s
            for s in uetscen.load(scenarios or uetscen.DEFAULT_FILE)]
    print(f"bench uet: {len(todo)} scenarios from {scenarios or uetscen.DEFAULT_FILE}, fabric "
          f"{TOPOLOGY.name}, TDF {tdf:g}; emu's FCT beside uet-htsim's (ratio emu / htsim)",
          flush=True)
    done: dict[str, tuple[dict, dict, str]] = {}
    code = 0
    with tempfile.TemporaryDirectory(prefix="emu-bench-uet-") as tmp:
        base = Path(out) if out else Path(tmp)
        for s in todo:
            if not s.expressible:
                continue
            print(f"  {s.id}: {s.senders} x {s.size} B, trimming "
                  f"{'on' if s.trimming else 'off'}, ev {s.ev} ...", flush=True)
            r, figs, gl = run_one(s, tdf, base / s.id)
            done[s.id] = (r, figs, gl)
            print(f"    {uetscen.format_row(s, r)}\n    {gl}\n    {json.dumps(figs)}", flush=True)
            code |= 0 if r["counts"] and figs["byte_exact"] else 1
        print(f"\n{uetscen.HEADER}")
        for s in todo:
            r, _, gl = done.get(s.id, (None, None, ""))
            print(uetscen.format_row(s, r, gl.split(" (")[0] if gl else ""))
        print("\nper row: trims, NACKs, retransmissions, NSCC decreases / QuickAdapts, smallest "
              "final cwnd, deepest queue and ECN marks towards the receiver (emu) | uet-htsim")
        for s in todo:
            if s.id in done:
                f = done[s.id][1]
                print(f"  {s.id}: trims {f['trims']}, NACKs {f['nacks']}, retx {f['retx']}, "
                      f"decreases {f['decreases']}, QA {f['quick_adapt']}, final cwnd min "
                      f"{f['cwnd_final_min']} B, queue {f['max_queue_to_rx']} B, ECN "
                      f"{f['ecn_marks']} | htsim NACKs {s.htsim_nacks}, rtx {s.htsim_rtx}, "
                      f"queue {s.htsim_max_queue} B")
        if not out:
            print("(run directories removed; --out DIR keeps them)")
    return code
