"""Peer simulators that `emu bench speed` compares emu with (issue 11): ns-3."""
