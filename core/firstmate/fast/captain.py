"""Which crew status lines concern the captain: the ``FM_CAPTAIN_RE`` pattern.

In the standard-library layer, below the watcher and the drain presentation, because both judge
lines with it, the ``fm wake drain`` fast path among them. :func:`relevance` answers for the default pattern without :mod:`re` (the fast
path's import budget) whenever the answer is the pattern's own.
"""

from __future__ import annotations

from firstmate.fast.crewlog import FOLDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable

DEFAULT_CAPTAIN_RE = (
    r"done:|needs-decision:|blocked:|failed:|PR ready|checks green|ready in branch|merged"
)
#: The default pattern's alternatives, lower-cased: a case-insensitive search for any of them.
_DEFAULT_WORDS = tuple(DEFAULT_CAPTAIN_RE.lower().split("|"))


def captain_pattern(env_value: str | None) -> tuple[re.Pattern[str], bool]:
    """The compiled captain-relevant regex (case-insensitive) and whether *env_value* was
    usable; an empty or invalid value gives the default."""
    import re

    if env_value and env_value.strip():
        try:
            return re.compile(env_value, re.IGNORECASE), True
        except re.error:
            return re.compile(DEFAULT_CAPTAIN_RE, re.IGNORECASE), False
    return re.compile(DEFAULT_CAPTAIN_RE, re.IGNORECASE), True


def relevance(env_value: str | None) -> Callable[[str], bool]:
    """Whether a status line concerns the captain: ``captain_pattern(env_value)[0].search``
    finds something in it."""
    if env_value and env_value.strip():
        pattern = captain_pattern(env_value)[0]
        return lambda text: pattern.search(text) is not None
    return _default_relevant


def _default_relevant(text: str) -> bool:
    # Outside ASCII only FOLDS lower-case onto (or match, ignoring case) an ASCII letter, so
    # without them a search of the lower-cased text finds exactly what the pattern finds.
    if text.isascii() or FOLDS.isdisjoint(text):
        low = text.lower()
        return any(word in low for word in _DEFAULT_WORDS)
    return captain_pattern(None)[0].search(text) is not None


__all__ = ["DEFAULT_CAPTAIN_RE", "captain_pattern", "relevance"]
