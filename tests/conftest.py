"""Shared test configuration: root-only tests are skipped with a reason."""

import os
import shutil

import pytest

IS_ROOT = os.geteuid() == 0


def pytest_collection_modifyitems(config, items):
    """Skip netns/e2e tests when not root or when mnexec is missing."""
    reason = None
    if not IS_ROOT:
        reason = ("needs root: network namespaces and raw sockets (./setup.sh test runs the suite "
                  "as root, through sudo when needed)")
    elif shutil.which("mnexec") is None:
        reason = "needs mnexec (Debian package mininet; ./setup.sh installs it)"
    if reason is None:
        return
    for item in items:
        if "netns" in item.keywords or "e2e" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
