"""How a harness's turn-end hook answers, in the harness's own terms.

Harnesses read a stop hook's answer differently: Claude Code and Grok take exit 2 with the text
on stderr as the next user message; Cursor takes a ``followup_message`` in a JSON object on
stdout (exit 0); Codex a ``{"decision": "block", "reason": …}`` object. A strategy says *what*
to answer (carry on with this text, let the turn end, tell the user something); a
:class:`HookReply` the harness declares says *how*.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.plugin.harness import HookOutcome, read_only


@attrs.frozen
class HookReply:
    """The three answers of a harness's turn-end hook: :meth:`proceed` (the turn goes on with a
    text: a wake, a failure, a reminder), :meth:`allow` (the turn ends quietly) and
    :meth:`notice` (the turn ends, and the user is told why).

    The default is exit 2 with the text on stderr. Set :attr:`key` for a harness that reads a
    JSON object on stdout instead (exit 0)."""

    #: The exit code of a continuation.
    exit_code: int = 2
    #: "" puts a continuation's text on stderr; otherwise it is this key of one JSON object
    #: printed on stdout (``followup_message``, ``reason``).
    key: str = ""
    #: More fields of that object, written before the key (``{"decision": "block"}``).
    fields: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: The continuation's text on one line (runs of whitespace become one space).
    one_line: bool = False
    #: What a quiet turn end prints on stdout (``{}`` for a harness that wants an object).
    allow_stdout: str = ""
    #: "" writes a notice as ``firstmate: …`` on stderr; otherwise it is ``Firstmate: …`` in
    #: this key of a JSON object on stdout (``systemMessage``).
    notice_key: str = ""

    @classmethod
    def json(cls, key: str, *, notice_key: str = "", allow_stdout: str = "",
             one_line: bool = False, **fields: Any) -> HookReply:
        """A harness that reads ``{**fields, key: text}`` on stdout, exit 0."""
        return cls(0, key, fields, one_line, allow_stdout, notice_key)

    def proceed(self, text: str) -> HookOutcome:
        """The turn goes on with *text* as the model's next input."""
        if self.one_line:
            text = " ".join(text.split())
        if not self.key:
            return HookOutcome(self.exit_code, "", text.rstrip("\n") + "\n")
        return HookOutcome(self.exit_code, json.dumps({**self.fields, self.key: text}) + "\n")

    def allow(self) -> HookOutcome:
        """The turn ends quietly."""
        return HookOutcome(0, self._allowed, "")

    def notice(self, text: str) -> HookOutcome:
        """The turn ends, and the user reads *text* (one line)."""
        line = " ".join(text.split())
        if self.notice_key:
            return HookOutcome(0, json.dumps({self.notice_key: f"Firstmate: {line}"}) + "\n")
        return HookOutcome(0, self._allowed, f"firstmate: {line}\n")

    def passing(self, text: str) -> HookOutcome:
        """The turn ends quietly, with the turn-end guard's own note (a fail-open notice) on
        stderr when there is one."""
        return HookOutcome(0, self._allowed, text.rstrip("\n") + "\n" if text else "")

    @property
    def _allowed(self) -> str:
        return self.allow_stdout.rstrip("\n") + "\n" if self.allow_stdout else ""

    def describe(self) -> str:
        """How a continuation reaches the model, for a delivery receipt."""
        if self.key:
            return f"its {self.key} (exit {self.exit_code})"
        return f"exit {self.exit_code} with the text on stderr"


__all__ = ["HookReply"]
