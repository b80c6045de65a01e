"""Answers a hook's quick gate can give before anything but the standard library is loaded.

A plugin's ``quick_gate`` (docs/hooks.md) calls these with the home's root: each returns True
only when the answer is certain, so a gate that says "nothing to do" on it never skips work that
the full hook would have done.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: Set (non-empty) in a crew's or scout's own session: its primary's hooks are inert there.
CREW_ENV = ("FM_CREW", "FM_TASK_ID")


def crew_session(env: Mapping[str, str]) -> bool:
    """This hook runs in a crew's session (the scope rules' first rule: never a primary)."""
    return any(env.get(name, "").strip() for name in CREW_ENV)


def crew_marker(env: Mapping[str, str]) -> str | None:
    """``NAME=value`` of the first crew variable set in *env*, or None (not a crew's session)."""
    for name in CREW_ENV:
        value = env.get(name, "").strip()
        if value:
            return f"{name}={value}"
    return None


def refuse_crew_session(env: Mapping[str, str], command: str, only: str) -> None:
    """A :class:`~firstmate.base.errors.FirstmateError` (exit 1) when *env* is a crew's session:
    *command* consumes or changes what belongs to the primary (*only* says what only the captain
    does). A crew reads the project it works in, the primary's protocols included; whatever they
    tell its model, its session never takes the primary's wakes, decisions or session."""
    marker = crew_marker(env)
    if marker is not None:
        from firstmate.base.errors import FirstmateError

        raise FirstmateError(f"{command}: refusing to run in a crew's session ({marker}): only "
                             f"the captain {only}; report with fm crew status")


def _any(directory: str, suffix: str) -> bool:
    """Whether *directory* holds a non-hidden entry ending in *suffix* (True when it cannot be
    read: then the full hook decides)."""
    try:
        with os.scandir(directory) as entries:
            return any(not e.name.startswith(".") and e.name.endswith(suffix) for e in entries)
    except FileNotFoundError:
        return False
    except OSError:
        return True


def nothing_to_supervise(home: str) -> bool:
    """No crew, no check (rejected ones count) and no process source is registered in the home
    at *home*: a turn end has nothing to keep watched."""
    state = os.path.join(home, "state")
    return not (_any(os.path.join(state, "crew"), ".pane")
                or _any(os.path.join(state, "checks"), "")
                or _any(os.path.join(state, "sources"), ".source"))


__all__ = ["CREW_ENV", "crew_marker", "crew_session", "nothing_to_supervise",
           "refuse_crew_session"]
