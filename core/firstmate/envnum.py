"""Read numeric settings from the environment: bad or out-of-range values fall back to defaults.

A knob that is set to junk must never stop the watcher, so every reader here is total: it returns
the default for an empty, non-numeric, negative or otherwise unusable value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def env_float(env: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    """A finite positive number of seconds (or zero when *allow_zero*), else *default*."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        return default
    return value


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    """A decimal integer of at least *minimum* (leading zeros allowed: ``08`` is 8), else *default*."""
    raw = env.get(name, "").strip()
    if not raw.isdigit() or not raw.isascii():
        return default
    value = int(raw, 10)
    return value if value >= minimum else default
