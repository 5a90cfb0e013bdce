"""The subcommands of `python -m emu` that are more than a few lines, one module each:
its argparse part (`add_parser(sub)`) and what it does (`main(args)`), as emu.lab.command
for `emu lab`. emu.cli holds the top-level parser, the dispatch and the small commands.
"""
