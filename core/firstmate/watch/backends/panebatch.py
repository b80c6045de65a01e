"""Reading many panes through one tmux client: ``capture-pane`` for each, in one call.

A fleet that went quiet together (a new fleet's first look, every crew busy) has every pane to
read at once. One ``tmux capture-pane`` process per pane costs a process start, a connection to
the server and an exit each; one call running ``capture-pane -p -t PANE ; display-message -p -t
PANE MARK`` for a batch of panes (tmux runs ``;``-separated commands in one client) costs that
once per batch.

**Framing.** The panes' texts come back one after another on one stdout. After each pane's text
the call prints a marker line, ``fm-<nonce> <pane id>``, where the nonce is random for every call
(:func:`os.urandom`): no pane can show it in advance, so a pane's text cannot end another's early.
A result is trusted only when the markers come back exactly in order, one per pane read, and
nothing but a pane's whole text stands between two of them; otherwise (a line of some pane that
happens to start like a marker of this call) the whole batch is discarded and its panes are read
one by one, as before. Texts are cut at line feeds as bytes and decoded per pane, so a pane's
text is the bytes a lone ``capture-pane -p`` would have printed for it.

**A pane that closes mid-batch.** tmux stops a command sequence at its first failing command:
the panes before it are read, the one whose capture failed (gone) is reported not captured with
tmux's words, and the panes after it are not in the result (the caller reads them again).

Every argument reaches tmux through :meth:`TmuxBackend.sequence` (a trailing ``;`` escaped); the
marker is a format tmux expands, and holds no ``#`` but the ``#{pane_id}`` it is meant to.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from firstmate.watch.backends.tmuxcall import TmuxCall

if TYPE_CHECKING:
    from firstmate.watch.backends.tmux import TmuxBackend

#: Panes read by one tmux call at most (each adds two commands to the client's one message,
#: which tmux caps at some 16 KB).
BATCH = 64
#: What the output of a pane that could not be read is recorded as: not captured, and why.
Missed = tuple[None, str]


def marker(nonce: str) -> str:
    """The marker prefix of one call (before the pane id)."""
    return f"fm-{nonce} "


@attrs.define(eq=False)
class CaptureBatch(TmuxCall):
    """One batch call under way (:func:`start`), stepped and waited on as a pane listing is
    (:class:`~firstmate.watch.backends.tmuxcall.TmuxCall`). A call past its deadline is killed and
    reads nothing."""

    panes: tuple[str, ...] = attrs.field(kw_only=True)
    mark: str = attrs.field(kw_only=True)

    def result(self) -> dict[str, str | Missed] | None:
        """Once :meth:`step` said the call is over: each pane read, by id, with its text, or
        ``(None, why)`` for the pane whose read failed; panes the call did not reach are left
        out. None when nothing can be trusted (killed, or the framing did not hold)."""
        if not self.over or self.code is None:
            return None
        found = parse(self.output, self.panes, self.mark)
        if found is None:
            return None
        texts: dict[str, str | Missed] = dict(found)
        if self.code != 0 and len(found) < len(self.panes):
            # tmux stopped at the pane after the last one read: its read failed.
            why = self.said.splitlines()[0] if self.said else f"tmux exited {self.code}"
            texts[self.panes[len(found)]] = (None, why)
        return texts


def parse(out: bytes, panes: Sequence[str], mark: str) -> dict[str, str] | None:
    """The texts of the panes *out* holds, in order, each ended by its marker line; None when the
    markers do not come back exactly in order, one per pane (a pane's text that forged one),
    or something follows the last marker that is not a whole pane's text."""
    prefix = mark.encode()
    lines = out.split(b"\n")
    tail = lines.pop() if lines else b""
    found: dict[str, str] = {}
    start = 0
    for number, line in enumerate(lines):
        if not line.startswith(prefix):
            continue
        if len(found) >= len(panes) or line != prefix + panes[len(found)].encode():
            return None  # out of order, or one too many: not ours
        found[panes[len(found)]] = b"".join(
            part + b"\n" for part in lines[start:number]).decode("utf-8", "replace")
        start = number + 1
    if tail:
        return None  # (tmux ends every line it prints)
    # Lines after the last marker are a pane's text whose marker never came (its pane went
    # between the two commands): that pane is not counted as read.
    return found


def start(backend: TmuxBackend, panes: Sequence[str],
          argv: Callable[..., list[str]] | None = None,
          env: Mapping[str, str] | None = None) -> CaptureBatch | None:
    """One call reading *panes* (pane ids, at most :data:`BATCH`); None when tmux cannot be
    started (:attr:`TmuxBackend.last_error` says why). *argv* makes the call's command line from
    the tmux commands (default: :meth:`TmuxBackend.sequence`; a fleet host's backend runs them
    over ssh, with its *env*)."""
    mark = marker(os.urandom(16).hex())
    commands: list[list[str]] = []
    for pane in panes:
        commands += [["capture-pane", "-p", "-t", pane],
                     ["display-message", "-p", "-t", pane, mark + "#{pane_id}"]]
    try:
        proc = subprocess.Popen((argv or backend.sequence)(*commands), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=None if env is None else dict(env))
    except OSError as exc:
        backend.last_error = f"tmux could not run: {exc.strerror}"
        return None
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    return CaptureBatch(proc, time.monotonic() + backend.timeout, panes=tuple(panes), mark=mark)


__all__ = ["BATCH", "CaptureBatch", "Missed", "marker", "parse", "start"]
