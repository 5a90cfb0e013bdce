"""`emu run TOPO` as a sequence of steps, one module each (docs/ARCHITECTURE.md "One
run"): plan (validate every option, no root, nothing built) -> build (namespaces,
agents, captures, sampler) -> workload (reachability, then the chosen traffic) ->
collect (counters, captures, summary.json) -> report (the terminal summary, plots).
"""
