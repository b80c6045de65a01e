"""Fixtures the core tests share (the contract kit's fixtures come from firstmate.testing)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import Fleet, make_fleet
from wakeq_support import finish


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts: each is killed (if still running) and reaped at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        finish(proc)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """A home and a private tmux server with the stand-in crew harness (fleet_support)."""
    yield from make_fleet(tmp_path)
