"""Shared fixtures of the in-process harness end-to-end tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_api import MockApi, start


@pytest.fixture
def mock() -> Iterator[MockApi]:
    """A loopback model API for one test (both the Anthropic and the OpenAI wire formats)."""
    server = start()
    try:
        yield server
    finally:
        server.close()
