"""The subcommands of `python -m emu` that are more than a few lines, one module each:
its argparse part (`add_parser(sub)`) and what it does (`main(args)`). Where what it does
imports much (emu run, emu lab), the argparse part is a module of its own (run_args,
lab_args) and emu.cli imports the rest only when that command runs, so that `--help` and
the light commands start without Scapy, matplotlib, rich or Mininet (issue 30). emu.cli
holds the top-level parser, the dispatch and the small commands.
"""
