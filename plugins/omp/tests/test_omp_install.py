"""The omp plugin: its shim spec and bridge profile.

The generic install behaviour (idempotence, dry runs, refusing a foreign shim, pruning, the npm
layout, the command line) is tested once in tests/core/test_shiminstall.py and by the harness
contract (firstmate.testing.HarnessContract).
"""

from __future__ import annotations

import json

from firstmate.api import resource_text
from firstmate.testing.state import shim_package_json
from firstmate_plugin_omp.hooks import INFO, PROFILE, SPEC, plugin


def test_profile_and_owned_files() -> None:
    assert (PROFILE.delivery, PROFILE.retire_on_shutdown, PROFILE.idle_queue_read) == \
        ("prompt", True, True)
    assert plugin.firstmate_bridge_profile(harness="omp") is PROFILE
    assert plugin.firstmate_bridge_profile(harness="claude") is None
    assert INFO.owned_files == SPEC.owned_files() and INFO.config_files == ()
    assert SPEC.marker in resource_text(SPEC.package, SPEC.resource, "omp")[:300]


def test_npm_manifest_names_the_extension_for_the_harness() -> None:
    manifest = json.loads(shim_package_json(SPEC))
    assert manifest["name"] == "firstmate-omp"
    for key, value in SPEC.npm_fields.items():
        assert manifest[key] == value
    assert manifest.get("keywords") == ["omp", "omp-plugin"]
