"""``fm top``'s keys on a terminal: select a crew and attach to it, peek at it, steer it, answer
its decision or stop it.

:class:`Panel` holds what the screen shows besides the frame: the selected crew (kept by name
as crews come and go), a peek at its screen, a prompt, the outcome of the last action. Each
action is the command's own (:mod:`firstmate.app.crewops`, :mod:`firstmate.app.crewlook`), with
its checks: nothing is typed into, read from or ended in a pane that is not the crew's, and a
refusal is shown as the one line the command would print.

===========  ============================================================================
key          does
===========  ============================================================================
↑ ↓ / k j    select the previous / next crew
a            attach to the crew's pane (``fm crew attach``; detach to come back)
p, Enter     peek at its screen (the last lines of its pane, refreshed; any key returns)
s            steer it: type the instruction, Enter sends it (``fm crew steer``)
d            answer its open decision: its key (Tab picks the next open one), then the answer,
             recorded and typed into its pane (``fm crew answer --send``)
x            stop it, once confirmed with ``y`` (``fm crew stop``)
r, Ctrl-L    redraw;  q quits
===========  ============================================================================
"""

from __future__ import annotations

import subprocess
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from firstmate.app import top_keys as keys
from firstmate.app.crewlook import Attach
from firstmate.app.top import CrewView, Frame
from firstmate.app.top_view import ALERT, BOLD, DIM, GREEN, Footer, fit, paint, render, width_of
from firstmate.base.errors import FirstmateError
from firstmate.store.home import Home
from firstmate.watch.backends.hosts import CrewPanes
from firstmate.watch.backends.screen import Tail
from firstmate.watch.backends.tmux import DEAD

#: What :meth:`Panel.handle` asks of the screen.
QUIT, REDRAW = "quit", "redraw"
#: Seconds between two reads of a peeked pane.
PEEK_EVERY = 0.5
#: Most lines a message takes (a longer one is cut at the last).
MESSAGE_LINES = 4
KEYS_HELP = "j/k select · a attach · p peek · s steer · d answer · x stop · q quits"


@attrs.define(eq=False)
class Panel:
    """The interactive part of ``fm top`` for the home at *root*."""

    root: str
    env: Mapping[str, str]
    selected: str | None = None
    _index: int = 0
    #: What the open prompt is for: ("steer", crew), ("key", crew), ("answer", crew, key) or
    #: ("stop", crew); None when no prompt is open.
    _asking: tuple[str, ...] | None = None
    _edit: keys.LineEdit | None = None
    _choices: tuple[str, ...] = ()
    _message: tuple[str, str] | None = None
    _peeking: str | None = None
    _peek: Tail | None = None
    _peek_at: float = 0.0
    _backend: CrewPanes | None = None

    @property
    def home(self) -> Home:
        return Home(Path(self.root))

    @property
    def backend(self) -> CrewPanes:
        """The tmux servers crews' panes are on (this machine's, and fleet hosts')."""
        if self._backend is None:
            self._backend = CrewPanes.from_env(self.home, self.env)
        return self._backend

    # --- keys --------------------------------------------------------------------------------

    def handle(self, key: str, frame: Frame | None) -> str | Attach | None:
        """Take one key; what the screen must do about it (:data:`QUIT`, :data:`REDRAW`, an
        :class:`~firstmate.app.crewlook.Attach` to run with the terminal), or None."""
        crews = frame.crews if frame is not None else ()
        self.follow(crews)
        if self._peeking is not None:
            self._peeking = self._peek = None  # any key ends a peek
            return None
        if self._asking is not None:
            self._prompt_key(key)
            return None
        self._message = None
        if key in ("q", "Q"):
            return QUIT
        if key in ("r", "R", keys.CTRL_L):
            return REDRAW
        if key in (keys.UP, "k", keys.DOWN, "j"):
            self._move(crews, -1 if key in (keys.UP, "k") else 1)
            return None
        crew = next((c for c in crews if c.name == self.selected), None)
        if key not in ("a", "p", keys.ENTER, "s", "d", "x"):
            return None
        if crew is None:
            self._say("no crew is selected: register one with fm crew spawn or fm crew add",
                      ALERT)
            return None
        return self._act(key, crew)

    def follow(self, crews: tuple[CrewView, ...]) -> None:
        """Keep the selection on a listed crew: the same one, or the one now in its place."""
        names = [c.name for c in crews]
        if self.selected in names:
            self._index = names.index(self.selected)
        elif names:
            self._index = min(self._index, len(names) - 1)
            self.selected = names[self._index]
        else:
            self.selected = None

    def _move(self, crews: tuple[CrewView, ...], step: int) -> None:
        if crews:
            self._index = max(0, min(len(crews) - 1, self._index + step))
            self.selected = crews[self._index].name

    def _act(self, key: str, crew: CrewView) -> Attach | None:
        name = crew.name
        if key == "a":
            return self._attach(name)
        if key in ("p", keys.ENTER):
            self._peeking, self._peek_at = name, 0.0
        elif key == "s":
            self._ask(("steer", name), f"steer {name}: ")
        elif key == "x":
            self._ask(("stop", name), "")
        elif not crew.decisions:
            self._say(f"{name} has no open decision to answer", ALERT)
        elif len(crew.decisions) == 1:
            self._ask(("answer", name, crew.decisions[0]),
                      f"answer {name} [key={crew.decisions[0]}]: ")
        else:
            self._choices = crew.decisions
            self._ask(("key", name), f"answer {name}, decision key: ")
            assert self._edit is not None
            self._edit.text = crew.decisions[0]
        return None

    def _ask(self, purpose: tuple[str, ...], label: str) -> None:
        self._asking, self._edit = purpose, keys.LineEdit(label)

    def _prompt_key(self, key: str) -> None:
        assert self._asking is not None and self._edit is not None
        purpose = self._asking
        if purpose[0] == "stop":
            self._asking = self._edit = None
            if key in ("y", "Y"):
                self._run(lambda: self._stop(purpose[1]))
            else:
                self._say(f"{purpose[1]} was not stopped", DIM)
            return
        if purpose[0] == "key" and key == keys.TAB and self._choices:
            now = self._edit.text
            at = self._choices.index(now) + 1 if now in self._choices else 0
            self._edit.text = self._choices[at % len(self._choices)]
            return
        done = self._edit.feed(key)
        if done == keys.ESC:
            self._asking = self._edit = None
            self._say("cancelled", DIM)
        elif done == keys.ENTER:
            text = self._edit.text
            self._asking = self._edit = None
            if purpose[0] == "key":
                self._ask(("answer", purpose[1], text.strip()),
                          f"answer {purpose[1]} [key={text.strip()}]: ")
            elif purpose[0] == "steer":
                self._run(lambda: self._steer(purpose[1], text))
            else:
                self._run(lambda: self._answer(purpose[1], purpose[2], text))

    # --- actions -----------------------------------------------------------------------------

    def _say(self, text: str, style: str = GREEN) -> None:
        self._message = (text, style)

    def _run(self, action: Callable[[], str]) -> None:
        try:
            self._say(action())
        except FirstmateError as exc:
            self._say(exc.message, ALERT)
        except OSError as exc:
            self._say(f"{exc.filename or 'the home'}: {exc.strerror or exc}", ALERT)

    def _steer(self, name: str, text: str) -> str:
        from firstmate.app.crewops import steer

        done = steer(self.home, self.backend, name, text)
        return f"sent to {done.name} (pane {done.pane})"

    def _answer(self, name: str, key: str, text: str) -> str:
        from firstmate.app.crewops import answer
        from firstmate.base.quickgate import refuse_crew_session

        refuse_crew_session(self.env, "top: answer", "answers the crews' decisions")
        done = answer(self.home, self.backend, name, key, text, send=True)
        if done.unsent is not None:
            raise FirstmateError(f"answered {name} [key={key}], but typing it into pane "
                                 f"{done.pane} failed: {done.unsent}")
        return f"answered {name} [key={done.decision.key}] and sent it to pane {done.pane}"

    def _stop(self, name: str) -> str:
        from firstmate.app.crewops import stop

        done = stop(self.home, self.backend, name)
        ended = f"ended pane {done.pane}" if done.killed else f"pane {done.pane} was already gone"
        return f"stopped {name} ({ended}); its status log stays" + (
            f"; {done.note}" if done.note else "")

    def _attach(self, name: str) -> Attach | None:
        from firstmate.app.crewlook import attach

        try:
            plan = attach(self.home, self.backend, name, self.env, terminal=True)
        except FirstmateError as exc:
            self._say(exc.message, ALERT)
            return None
        if plan.takes_terminal:
            return plan
        try:
            done = subprocess.run(plan.argv, env=dict(plan.env), stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=self.backend.local.timeout,
                                  check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            self._say(f"cannot run tmux to switch to {name}: {exc}", ALERT)
            return None
        if done.returncode != 0:
            said = " ".join(done.stderr.decode("utf-8", "replace").split())[:200]
            self._say(f"tmux could not switch to {name}'s pane {plan.pane}: {said}", ALERT)
        else:
            self._say(f"switched this tmux client to {name} (pane {plan.pane}); fm top runs on "
                      "here")
        return None

    def attached(self, plan: Attach, code: int | None, error: str | None = None) -> None:
        """What the screen reports once an attach it ran (*plan*) ended with *code*."""
        if error is not None:
            self._say(f"cannot run tmux to attach to {plan.name}: {error}", ALERT)
        elif code:
            self._say(f"tmux attach to {plan.name} (pane {plan.pane}) exited {code}", ALERT)
        else:
            self._say(f"back from {plan.name} (pane {plan.pane})", DIM)

    # --- drawing -----------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """A peek wants its pane read again."""
        return self._peeking is not None and now >= self._peek_at

    def lines(self, frame: Frame, width: int, height: int, colour: bool) -> list[str]:
        """The screen: a peek, or the frame with the selection and this panel's footer."""
        self.follow(frame.crews)
        if self._peeking is not None:
            peeked = self._peek_lines(width, height, colour)
            if peeked is not None:
                return peeked
        footer: list[Footer] = []
        if self._asking is not None and self._edit is not None:
            footer += self._prompt_lines(width)
        elif self._message is not None:
            text, style = self._message
            # A refusal names its fix at its end: the whole line is shown, wrapped.
            footer += [(part, style) for part in textwrap.wrap(text, max(20, width))[:MESSAGE_LINES]]
        footer.append(KEYS_HELP)
        return render(frame, width, height, footer, selected=self.selected, colour=colour)

    def _prompt_lines(self, width: int) -> list[Footer]:
        assert self._asking is not None and self._edit is not None
        if self._asking[0] == "stop":
            return [(f"stop {self._asking[1]}? its pane ends and it is unregistered (its "
                     "status log stays) - y stops it, any other key keeps it", ALERT)]
        label, text = self._edit.label, self._edit.text + "_"
        room = max(1, width - width_of(label))
        while width_of(text) > room:  # the end of a long line stays in view
            text = text[1:]
        hint = "Enter sends · Esc cancels · Ctrl-U clears"
        if self._asking[0] == "key":
            hint = f"Tab: next open decision ({', '.join(self._choices)}) · Enter · Esc cancels"
        return [(label + text, BOLD), hint]

    def _peek_lines(self, width: int, height: int, colour: bool) -> list[str] | None:
        from firstmate.app.crewlook import peek

        name = self._peeking
        assert name is not None
        now = time.monotonic()
        if self._peek is None or now >= self._peek_at:
            self._peek_at = now + PEEK_EVERY
            try:
                self._peek = peek(self.home, self.backend, name, max(1, height - 1))
            except FirstmateError as exc:
                self._peeking = self._peek = None
                self._say(exc.message, ALERT)
                return None
        shown = self._peek
        ended = " (its harness has ended: its last screen)" if shown.state == DEAD else ""
        head = [(f"peek {name}", BOLD), (f"  pane {shown.pane}{ended}  · any key returns", DIM)]
        body = [[(line, "")] for line in shown.lines[-max(1, height - 1):]]
        return [paint(fit(line, width), colour) for line in [head, *body]][:max(1, height)]


__all__ = ["KEYS_HELP", "PEEK_EVERY", "QUIT", "REDRAW", "Panel"]
