"""Fixtures the core tests share (the contract kit's fixtures come from firstmate.testing)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from wakeq_support import finish


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts: each is killed (if still running) and reaped at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        finish(proc)
