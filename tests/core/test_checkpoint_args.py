"""``fm checkpoint``'s window: ``--seconds``, else ``FM_CHECKPOINT_SECONDS``, else a plugin's
older name for it, else 180."""

from __future__ import annotations

import pytest
from firstmate.base.errors import UsageError
from firstmate.cli.checkpoint import DEFAULT_SECONDS, parse_args

NO_PLUGINS = {"FIRSTMATE_PLUGINS": "no-such-plugin"}


def test_seconds_from_the_flag_then_the_core_knob_then_the_default() -> None:
    assert parse_args(["--seconds", "7"], {**NO_PLUGINS, "FM_CHECKPOINT_SECONDS": "5"}) == 7
    assert parse_args(["--seconds=9"], NO_PLUGINS) == 9
    assert parse_args([], {**NO_PLUGINS, "FM_CHECKPOINT_SECONDS": "5"}) == 5
    assert parse_args([], NO_PLUGINS) == DEFAULT_SECONDS


def test_a_bad_window_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="positive integer"):
        parse_args([], {**NO_PLUGINS, "FM_CHECKPOINT_SECONDS": "0"})
    with pytest.raises(UsageError, match="checkpoint: unrecognized arguments: --minutes; run 'fm checkpoint --help'"):
        parse_args(["--minutes", "3"], NO_PLUGINS)
