"""``fm top``'s keyboard: bytes from a terminal in cbreak mode as keys, and a one-line editor.

:class:`KeyReader` turns what one ``read`` returned into keys: a printable character as itself,
the cursor keys (``ESC [ A`` and ``ESC O A``, as a terminal sends them in either cursor mode)
as ``up`` / ``down`` / ``left`` / ``right``, and ``enter``, ``tab``, ``backspace``, ``esc``,
``ctrl-u``, ``ctrl-l``. A sequence it does not know is dropped whole; UTF-8 split across two
reads is put together again.

:class:`LineEdit` is the prompt ``fm top`` types a steer or an answer into: printable characters
are added, Backspace removes one, Ctrl-U clears, Enter submits, Esc cancels.
"""

from __future__ import annotations

import codecs
import re

import attrs

UP, DOWN, LEFT, RIGHT = "up", "down", "left", "right"
ENTER, TAB, BACKSPACE, ESC = "enter", "tab", "backspace", "esc"
CTRL_U, CTRL_L = "ctrl-u", "ctrl-l"
_ARROWS = {"A": UP, "B": DOWN, "C": RIGHT, "D": LEFT}
_CONTROLS = {"\r": ENTER, "\n": ENTER, "\t": TAB, "\x7f": BACKSPACE, "\x08": BACKSPACE,
             "\x15": CTRL_U, "\x0c": CTRL_L}
#: A CSI or SS3 sequence (cursor keys and the like), or Alt and a key.
_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|O[@-~]|[^\[O])")
#: Longest text a prompt takes (characters).
MAX_INPUT = 4000


@attrs.define(eq=False)
class KeyReader:
    """Keys from the terminal's bytes, in order."""

    _decoder: codecs.IncrementalDecoder = attrs.field(
        factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def keys(self, data: bytes) -> list[str]:
        text = self._decoder.decode(data)
        found: list[str] = []
        at = 0
        while at < len(text):
            ch = text[at]
            if ch == "\x1b":
                match = _SEQUENCE.match(text, at)
                if match is None:  # a lone ESC: the Esc key
                    found.append(ESC)
                    at += 1
                    continue
                seq = match.group(0)
                if len(seq) == 3 and seq[1] in "[O" and seq[2] in _ARROWS:
                    found.append(_ARROWS[seq[2]])
                at = match.end()
                continue
            if ch in _CONTROLS:
                found.append(_CONTROLS[ch])
            elif ch.isprintable():
                found.append(ch)
            at += 1
        return found


@attrs.define(eq=False)
class LineEdit:
    """A one-line prompt: :attr:`label`, then what was typed."""

    label: str
    text: str = ""

    def feed(self, key: str) -> str | None:
        """Take one key; ``enter`` when the line is submitted, ``esc`` when cancelled, else
        None."""
        if key in (ENTER, ESC):
            return key
        if key == BACKSPACE:
            self.text = self.text[:-1]
        elif key == CTRL_U:
            self.text = ""
        elif len(key) == 1 and len(self.text) < MAX_INPUT:
            self.text += key
        return None


__all__ = ["BACKSPACE", "CTRL_L", "CTRL_U", "DOWN", "ENTER", "ESC", "LEFT", "RIGHT", "TAB", "UP",
           "KeyReader", "LineEdit"]
