"""The switch agent's compiled data path (issue 30, docs/DATAPATH.md): the per-frame
stages in C, built by `python -m emucore.cbuild` (./setup.sh runs it), driven from
Python (`switch_agent.fast.pipeline`). The Python agent stays the reference."""
