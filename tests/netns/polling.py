"""Waiting for a condition in the fabric tests: poll it, never sleep a fixed time."""

from __future__ import annotations

import time


def wait_for(probe, timeout: float, what: str, period: float = 0.05):
    """Poll `probe()` until it returns something truthy (returned), at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(period)
