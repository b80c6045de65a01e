"""What needs supervision in a home: registered crews, registered checks and process sources.
Nothing to supervise means no guard blocks and no arm is started."""

from __future__ import annotations

import os

import attrs

from firstmate.store.home import Home

SOURCES_DIR = "sources"
SOURCE_SUFFIX = ".source"


@attrs.frozen
class Need:
    """What needs supervision: registered crews, registered checks, process sources."""

    crews: int = 0
    checks: int = 0
    sources: int = 0

    @property
    def needed(self) -> bool:
        return bool(self.crews or self.checks or self.sources)

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in ((self.crews, "crew(s)"), (self.checks, "check(s)"),
                                              (self.sources, "process source(s)")) if n]
        return ", ".join(parts) or "nothing"


def gather_need(home: Home) -> Need:
    """Registered crews, registered checks (rejected ones too: the watcher reports them) and
    process sources (``state/sources/*.source``, registered by external event producers)."""
    from firstmate.base.errors import FirstmateError
    from firstmate.store import checks, crew

    try:
        crews = len(crew.list(home))
    except (FirstmateError, OSError):
        crews = 1  # unreadable: assume there is something to watch
    try:
        valid, rejected = checks.load(home)
        nchecks = len(valid) + len(rejected)
    except (FirstmateError, OSError):
        nchecks = 1
    try:
        sources = sum(1 for name in os.listdir(home.state / SOURCES_DIR)
                      if name.endswith(SOURCE_SUFFIX) and not name.startswith("."))
    except FileNotFoundError:
        sources = 0
    except OSError:
        sources = 1
    return Need(crews, nchecks, sources)


#: A home with nothing to supervise.
NOTHING_NEEDED = Need()


__all__ = ["NOTHING_NEEDED", "Need", "gather_need"]
