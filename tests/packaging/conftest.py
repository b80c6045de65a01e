"""The distributions, built once per test session (tests/packaging/dists.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dists import Built, build_all, require_tools


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[Built]:
    require_tools()
    return build_all(tmp_path_factory.mktemp("packaging"))
