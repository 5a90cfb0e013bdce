"""A worker's compute record for the run's summary: EMU_RESULT_DIR/compute-rank<R>.json
with the compute model's regions (model start and end on the job's clock, FLOPs,
modelled seconds, lag) and totals, so `emu run` can split each rank's time into compute,
communication and overlap (`collectives.compute.split`) for any script."""

from __future__ import annotations

import os

from collectives.compute.clock import ComputeClock
from emucore.atomic import write_json_atomic


def write_record(clock: ComputeClock, info: dict, env: dict | None = None) -> str | None:
    """Write the record of this rank (RANK); its path, or None outside a job."""
    env = os.environ if env is None else env
    out = env.get("EMU_RESULT_DIR")
    if not out:
        return None
    path = os.path.join(out, f"compute-rank{env.get('RANK', '0')}.json")
    write_json_atomic(path, {**info, "tdf": clock.td.tdf, "totals": clock.totals(),
                             "fidelity": clock.meter.snapshot(),
                             "regions": [r.to_dict(clock.td) for r in clock.regions]})
    return path
