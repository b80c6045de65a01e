"""The "did you mean …?" of a mistyped name: the closest known name, when one is close.

Called only on an error path, so :mod:`difflib` (and what it imports) is loaded only then.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: How alike a word and a known name must be (difflib's ratio): one or two letters off in a
#: short name, never a different word.
CUTOFF = 0.6
#: A word longer than this is no typo of a name (and comparing it would cost time).
MAX_WORD = 64


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name *word* is most likely a typo of; None when none is close (or *word* is
    itself one of them)."""
    names = sorted({name for name in known if name})
    if not word or len(word) > MAX_WORD or word in names:
        return None
    import difflib

    found = difflib.get_close_matches(word, names, n=1, cutoff=CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"did you mean 'install'? "`` for a close name (to put before the fix), else ``""``."""
    name = closest(word, known)
    return f"did you mean {name!r}? " if name is not None else ""


def option_hint(word: str, options: Iterable[str]) -> str:
    """:func:`did_you_mean` for an option: names are compared without their dashes (every option
    shares them, which would make any two look alike), and ``-x`` for ``--x`` is a typo too."""
    bare = {option.lstrip("-"): option for option in options if option.startswith("-")}
    key = word.lstrip("-")
    found = bare.get(key) if key in bare else None
    if found is None:
        near = closest(key, bare)
        found = bare[near] if near is not None else None
    return f"did you mean {found!r}? " if found is not None and found != word else ""


__all__ = ["CUTOFF", "closest", "did_you_mean", "option_hint"]
