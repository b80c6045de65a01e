"""The first thing a long-running command does: turn a stop into its one closing line.

Until a command has imported its modules and installed its own stop handlers (a few hundred
milliseconds on a loaded machine), the default action of HUP, INT and TERM would end it with no
line at all. :func:`install` covers that window with handlers that write the command's line on
stdout and exit ``128 + signal`` at once: nothing has been started yet that needs cleaning up.
The command's own handlers replace these as soon as they exist.

Only ``os`` and ``signal``: this runs before anything else is imported.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

#: The stops every long-running command turns into its closing line.
STOPS = {1: "SIGHUP", 2: "SIGINT", 15: "SIGTERM"}


def install(line_for: str) -> None:
    """Until replaced, a stop writes ``line_for.format(signal=NAME)`` and exits 128 + signal."""
    import signal

    def stopped(signum: int, frame: FrameType | None) -> None:
        text = line_for.format(signal=STOPS.get(signum, str(signum))) + "\n"
        try:  # noqa: SIM105 - contextlib is not imported yet
            os.write(1, text.encode())
        except OSError:
            pass  # nobody is reading: the exit status still says what happened
        os._exit(128 + signum)

    for signum in STOPS:
        signal.signal(signum, stopped)


__all__ = ["STOPS", "install"]
