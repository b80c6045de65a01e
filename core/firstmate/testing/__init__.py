"""Pytest helpers for Firstmate and its plugins (an opt-in pytest plugin), and the plugin contract.

Enable with ``pytest_plugins = ["firstmate.testing"]`` in a conftest. Modules:
:mod:`~firstmate.testing.procs` (real processes), :mod:`~firstmate.testing.fixtures`,
:mod:`~firstmate.testing.samples` (hook calls and user files), :mod:`~firstmate.testing.contract`
and :mod:`~firstmate.testing.rearm` (the continuity half of the contract),
:mod:`~firstmate.testing.state` and :mod:`~firstmate.testing.plant` (what a plugin's tests read
of a home's state and of core's shipped texts, and what they arrange in a home before a hook
runs, so they import nothing of core but ``firstmate.api`` and this kit). Fixtures:

``fm_home`` / ``fm_env``
    A fresh prepared home (``FM_HOME`` points at it) and the environment a child ``fm`` runs with.
``spawned_arm``
    ``fm arm`` started in that home as a real process; its first status line is read, the reason
    line can be awaited with a deadline, and teardown stops the watcher and kills leftovers.
``fake_harness``
    A callable stand-in for a harness's wake channel that records every delivery.

:func:`eventually` is the one poll with a deadline, for what offers no event to wait on.

:class:`HarnessContract` is the conformance suite every harness plugin passes (see
``tests/contract/test_harness_contract.py``); subclass it with a ``harness`` fixture.
"""

from __future__ import annotations

from firstmate.testing.contract import HarnessContract
from firstmate.testing.fixtures import (
    Delivery,
    FakeHarness,
    fake_harness,
    fm_env,
    fm_home,
    spawned_arm,
)
from firstmate.testing.procs import (
    DEADLINE,
    SpawnedArm,
    arm_env,
    eventually,
    exec_identity,
    fm_command,
    read_line,
    spawn_arm,
)
from firstmate.testing.samples import (
    GARBAGE_PAYLOADS,
    HOOK_GARBAGE_EXITS,
    contract_plugin_names,
    garbage_payload,
    json_contains,
    payload_harnesses,
    sample_call,
    sample_of,
    snapshot,
    user_file_bytes,
)

__all__ = [
    "DEADLINE",
    "GARBAGE_PAYLOADS",
    "HOOK_GARBAGE_EXITS",
    "Delivery",
    "FakeHarness",
    "HarnessContract",
    "SpawnedArm",
    "arm_env",
    "contract_plugin_names",
    "eventually",
    "exec_identity",
    "fake_harness",
    "fm_command",
    "fm_env",
    "fm_home",
    "garbage_payload",
    "json_contains",
    "payload_harnesses",
    "read_line",
    "sample_call",
    "sample_of",
    "snapshot",
    "spawn_arm",
    "spawned_arm",
    "user_file_bytes",
]
