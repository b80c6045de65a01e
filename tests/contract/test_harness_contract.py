"""Every installed harness plugin (or those named by FIRSTMATE_CONTRACT_PLUGINS) passes the contract."""

from __future__ import annotations

import pytest
from firstmate.testing import HarnessContract, contract_plugin_names

NAMES = contract_plugin_names()

if not NAMES:
    pytest.skip("no harness plugin is installed in this environment", allow_module_level=True)


@pytest.fixture(params=NAMES)
def harness(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestHarnessContract(HarnessContract):
    pass
