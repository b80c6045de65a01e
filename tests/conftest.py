"""Shared test set-up: make the checkout importable when firstmate is not installed, and give
child processes the same view. Fixtures live in firstmate.testing (the contract kit)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORE = REPO / "core"

if importlib.util.find_spec("firstmate") is None:
    sys.path.insert(0, str(CORE))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(CORE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )

# Home secrets (firstmate.base.keyring) go to a directory of this test run, never the user's own;
# child processes inherit it.
if not os.environ.get("FIRSTMATE_KEYS_DIR"):
    import tempfile

    os.environ["FIRSTMATE_KEYS_DIR"] = os.path.join(tempfile.mkdtemp(prefix="fm-test-keys-"), "keys")

# The plugin index (firstmate.base.pluginindex) is cached in a directory of this test run too: the
# tests' private site directories would otherwise leave index files in the user's cache.
if "fm-test-cache-" not in os.environ.get("XDG_CACHE_HOME", ""):
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="fm-test-cache-")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile("dev", deadline=None, max_examples=25)
settings.register_profile("deep", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

pytest_plugins = ["firstmate.testing"]
