"""Watching a run: captures (`capture`), the agents' counters over time (`metrics`),
CPU per process (`procstat`), reachability and paths (`reach`, `paths`), the fidelity
guard (`guard`) and the TDF calibration (`calibrate`), the run's summary.json and tables
(`summary`) and its plots (`plots`)."""
