"""The watcher cycle's own settings read from the environment: the cleanup's lock bound and
the arm a handling successor follows. Pure, so the arm reads them as the watcher does."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_CLEANUP_BOUND = 2
PREDECESSOR_ENV = "FM_WATCH_PREDECESSOR_ARM_PID"


def cleanup_lock_bound(value: str | None) -> int:
    """``FM_WATCHER_CLEANUP_LOCK_BOUND``: a positive decimal integer of seconds, else 2.

    Leading zeros are decimal (``08`` is 8). Empty, non-numeric, signed, fractional, zero
    (``0``, ``00``) and non-ASCII digits all fall back to 2.
    """
    text = (value or "").strip()
    if not text or not text.isascii() or not text.isdigit():
        return DEFAULT_CLEANUP_BOUND
    number = int(text, 10)
    return number if number > 0 else DEFAULT_CLEANUP_BOUND


def predecessor_arm_pid(env: Mapping[str, str]) -> int | None:
    """``FM_WATCH_PREDECESSOR_ARM_PID`` when it names a pid (a handling successor), else None."""
    raw = env.get(PREDECESSOR_ENV, "").strip()
    if raw.isascii() and raw.isdigit() and int(raw) > 1:
        return int(raw)
    return None


__all__ = ["DEFAULT_CLEANUP_BOUND", "PREDECESSOR_ENV", "cleanup_lock_bound", "predecessor_arm_pid"]
