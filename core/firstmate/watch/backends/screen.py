"""The last lines of a crew's screen, read from the pane it is bound to and nowhere else.

:func:`tail` reads the pane and asks tmux which program it runs in one tmux call, then holds
that against the crew's registration (:func:`firstmate.watch.backends.panes.judge`): the text of
a pane that is gone, or that now runs another program than the crew's, is never returned. A
pane whose program ended (kept by remain-on-exit) is the crew's last screen and is returned.

Every line is cleaned with the one sanitiser for text from crews
(:func:`firstmate.base.wakeinput.clean`: escape sequences, controls and format characters
removed, a TAB a space), cut to :data:`LINE_CHARS` characters, and at most :data:`MAX_LINES`
lines are read; blank lines below the last written one (an empty screen's bottom) are left out.
``fm crew peek`` and ``fm top`` show it, and a drain may show a turn end's screen with it.
"""

from __future__ import annotations

import attrs

from firstmate.base.wakeinput import clean
from firstmate.store.crew import Crew
from firstmate.watch.backends.hosts import start_reader
from firstmate.watch.backends.panes import Verdict, judge
from firstmate.watch.backends.tmux import DEAD, GONE, LIVE, UNKNOWN, PaneFact, TmuxBackend

__all__ = ["LINE_CHARS", "MAX_LINES", "Tail", "clean_lines", "tail"]

#: Most lines one read returns.
MAX_LINES = 1000
#: Longest line returned, in characters (a longer one ends with ``…``).
LINE_CHARS = 400
#: What tmux prints after the captured text: the pane's id, program and whether it ended.
_FACT = "#{pane_id}\t#{pane_pid}\t#{pane_dead}"


@attrs.frozen
class Tail:
    """What :func:`tail` found: the pane's :data:`~firstmate.watch.backends.tmux.LIVE`,
    ``DEAD``, ``GONE`` or ``UNKNOWN`` (tmux could not be asked) state, its last lines when it is
    the crew's (live or dead), else why not."""

    name: str
    pane: str
    state: str
    lines: tuple[str, ...] = ()
    #: Why nothing was read: the verdict's reason ("is gone", "now runs another program ...")
    #: or what tmux said.
    why: str = ""
    #: A pane of that id exists, but runs a program the crew was not bound to.
    replaced: bool = False

    @property
    def read(self) -> bool:
        """The lines are the crew's screen (its pane is live, or its program ended)."""
        return self.state in (LIVE, DEAD)

    def verdict(self) -> Verdict:
        return Verdict(self.state, self.why, self.replaced)


def clean_lines(text: str, count: int, width: int = LINE_CHARS) -> tuple[str, ...]:
    """The last *count* lines of *text* up to its last non-blank one, each cleaned and cut to
    *width* characters."""
    lines = [clean(line).rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    cut = [line if len(line) <= width else line[: max(0, width - 1)] + "…" for line in lines]
    return tuple(cut[-count:]) if count > 0 else ()


def tail(backend: TmuxBackend, member: Crew, count: int, width: int = LINE_CHARS) -> Tail:
    """The last *count* (1 to :data:`MAX_LINES`) lines of *member*'s pane, scrollback included,
    read only when the pane is the one it is bound to (for a crew of another host, *backend* is
    that host's: the start time of the pane's program is read there). A registration by a
    position not bound yet is not read (that position may name another crew's pane): ``fm crew list`` binds it.
    Never raises for a missing pane or a tmux that cannot be asked."""
    count = max(1, min(MAX_LINES, count))
    if member.host is not None and getattr(backend, "host", None) != member.host:
        return Tail(member.name, member.pane, UNKNOWN,
                    why=f"its pane is on host {member.host}, read through that host's backend "
                        "(firstmate.watch.backends.hosts.CrewPanes)")
    if not member.bound:
        return Tail(member.name, member.pane, GONE,
                    why="is a position no pane is bound to yet (fm crew list binds it)")
    out = backend.run_sequence(["capture-pane", "-p", "-S", f"-{count}", "-t", member.pane],
                               ["display-message", "-p", "-t", member.pane, _FACT])
    if out is None:
        if backend.last_exit is None:
            return Tail(member.name, member.pane, UNKNOWN, why=backend.last_error or "")
        return Tail(member.name, member.pane, GONE, why="is gone")
    content, _, last = out.rstrip("\n").rpartition("\n")
    fact = _fact(last, member.pane)
    if fact is None:
        return Tail(member.name, member.pane, UNKNOWN,
                    why=f"tmux did not describe pane {member.pane}")
    verdict = judge(member, fact, start_reader(backend))
    if verdict.state not in (LIVE, DEAD):
        return Tail(member.name, member.pane, verdict.state, why=verdict.why,
                    replaced=verdict.replaced)
    return Tail(member.name, member.pane, verdict.state, clean_lines(content, count, width),
                why=verdict.why)


def _fact(line: str, pane: str) -> PaneFact | None:
    parts = line.split("\t")
    if len(parts) != 3 or parts[0] != pane or parts[2] not in ("0", "1"):
        return None
    if not (parts[1].isascii() and parts[1].isdigit()):
        return None
    return PaneFact(pane, int(parts[1]), parts[2] == "1")
