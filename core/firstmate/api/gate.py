"""What a plugin's quick gate may use: standard-library answers given before anything is loaded.

``fm hook <harness> <event>`` runs on every turn of the harness, so it calls the plugin's
``quick_gate(event, payload, env, home)`` (docs/hooks.md, "The quick gate") before it imports
pluggy, attrs or json. A gate module imports this module and the standard library, nothing
else; importing it loads only the standard-library ``firstmate.base`` modules below (a test
checks it in a fresh interpreter). Every answer here is sure: True only when the full hook
would decide the same way.
"""

from __future__ import annotations

import os

from firstmate.base.jsonkeys import top_level_keys
from firstmate.base.quickgate import crew_session, nothing_to_supervise

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def set_up(home: str) -> bool:
    """The home at *home* has been set up (its ``state/`` exists): without it nothing is
    supervised there, and a turn end has nothing to do."""
    return os.path.isdir(os.path.join(home, "state"))


def away(home: str) -> bool:
    """Away mode is on in the home at *home* (``fm away on``): the supervision host owns wakes,
    and a harness's turn-end hook stands down."""
    return os.path.lexists(os.path.join(home, "state", "away"))


def turn_end_idle(env: Mapping[str, str], home: str) -> bool:
    """A turn end surely has nothing to do: a crew's own session (a primary's hooks are inert
    there), a home never set up, or nothing registered to supervise."""
    return crew_session(env) or not set_up(home) or nothing_to_supervise(home)


__all__ = ["away", "crew_session", "nothing_to_supervise", "set_up", "top_level_keys",
           "turn_end_idle"]
