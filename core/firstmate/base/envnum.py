"""Read numeric settings from the environment: bad or out-of-range values fall back to defaults.

A knob that is set to junk must never stop the watcher, so every reader here is total: it returns
the default for an empty, non-numeric, negative or otherwise unusable value.
"""

from __future__ import annotations

# Not imported at run time: collections costs a status call (firstmate.fast.statusview) more
# than this whole module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def finite(value: float) -> bool:
    """``math.isfinite``, without importing ``math`` (loading its shared library is a cost every
    short command would pay), and False for an int too large for a float, where
    ``math.isfinite`` raises."""
    try:
        number = float(value)
    except OverflowError:
        return False
    return number - number == 0  # inf - inf and nan - nan are nan


def env_float(env: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    """A finite positive number of seconds (or zero when *allow_zero*), else *default*."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    if not finite(value) or value < 0 or (value == 0 and not allow_zero):
        return default
    return value


#: The largest value SQLite stores in an INTEGER column (queue sequences, epochs).
INT64_MAX = 2**63 - 1
#: The largest sequence number accepted from outside (an imported queue or counter): far below
#: INT64_MAX so the counter can always move on, and exact as a JSON number for the JS shims.
SEQ_IMPORT_MAX = 2**53 - 1
#: The largest process id any kernel hands out (pid_t is a signed 32-bit integer).
PID_MAX = 2**31 - 1


def decimal(text: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int | None:
    """*text* as a plain ASCII decimal in ``[minimum, maximum]``, else None.

    The upper bound matters: a sequence or pid beyond what SQLite or the kernel can hold must be
    refused as bad input, not reach them and fail with an overflow."""
    raw = text.strip()
    if not raw or not raw.isascii() or not raw.isdigit() or len(raw) > 32:
        return None
    value = int(raw, 10)
    return value if minimum <= value <= maximum else None


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    """A decimal integer of at least *minimum* (leading zeros allowed: ``08`` is 8), else *default*."""
    raw = env.get(name, "").strip()
    if not raw.isdigit() or not raw.isascii():
        return default
    value = int(raw, 10)
    return value if value >= minimum else default
