"""The pytest fixtures: a fresh home, the environment a child ``fm`` runs with, a spawned arm
and a fake harness endpoint."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from firstmate.store.home import Home
from firstmate.testing.procs import DEADLINE, SpawnedArm, spawn_arm


@pytest.fixture
def fm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A fresh, prepared home; ``FM_HOME`` points at it for this test and its children."""
    root = tmp_path / "home"
    monkeypatch.setenv("FM_HOME", str(root))
    # The home's secrets go beside it, never into the user's own keys directory.
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    for name in list(os.environ):
        if name.startswith("FM_") and name != "FM_HOME":
            monkeypatch.delenv(name, raising=False)
    # Anything that asks tmux about crews' panes asks a server of this test's own (none runs),
    # never the user's.
    monkeypatch.setenv("FM_TMUX_SOCKET", f"fm-test-{os.getpid()}-{tmp_path.name}"[:60])
    yield Home(root).ensure()


@pytest.fixture
def fm_env(fm_home: Home) -> Mapping[str, str]:
    """The environment a child ``fm`` process should run with."""
    return {**os.environ, "FM_HOME": str(fm_home.root)}


@pytest.fixture
def spawned_arm(fm_home: Home, tmp_path: Path) -> Iterator[SpawnedArm]:
    """``fm arm`` running in ``fm_home``; ``.status`` is its first line, ``.wait_reason()`` the
    cycle's reason. Teardown runs ``fm arm --stop`` and kills anything left over."""
    arm = spawn_arm(fm_home, tmp_path)
    try:
        yield arm
    finally:
        arm.stop()


@attrs.frozen
class Delivery:
    """One wake a plugin delivered into a :class:`FakeHarness`."""

    text: str
    meta: Mapping[str, Any]
    at: float


@attrs.define(eq=False)
class FakeHarness:
    """A harness's wake channel for tests: call it with the wake text (and any keywords the
    harness API would take); it records the delivery and returns :attr:`accept`."""

    accept: bool = True
    deliveries: list[Delivery] = attrs.Factory(list)
    _cond: threading.Condition = attrs.Factory(threading.Condition)

    def __call__(self, text: str, **meta: Any) -> bool:
        with self._cond:
            self.deliveries.append(Delivery(text, dict(meta), time.time()))
            self._cond.notify_all()
        return self.accept

    @property
    def texts(self) -> list[str]:
        with self._cond:
            return [d.text for d in self.deliveries]

    def wait_for(self, count: int = 1, deadline: float = DEADLINE) -> list[Delivery]:
        """Block until at least *count* deliveries arrived (from any thread); fail after *deadline*."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.deliveries) >= count, timeout=deadline):
                pytest.fail(f"{len(self.deliveries)} of {count} deliveries within {deadline}s")
            return list(self.deliveries)


@pytest.fixture
def fake_harness() -> FakeHarness:
    """A fresh :class:`FakeHarness` that accepts every delivery."""
    return FakeHarness()
