"""What ``fm doctor`` reports (:class:`Finding`), and what ``fm doctor --fix`` does with it.

A finding's fix is safe when it carries an :data:`Action`: an fm command built from this
installation's defaults or an authenticated install record, run as an argv (never a shell), or
an operation on fm's own files. Anything else (a file of the user's moved aside, the
environment changed, a harness restarted) is only printed, for the user to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

STATUSES = ("ok", "warn", "fail")

#: What ``fm doctor --fix`` runs for a safe finding: it returns one line saying what it did,
#: and raises (a :class:`~firstmate.base.errors.FirstmateError`) when it could not.
Action = Callable[[], str]


@attrs.frozen
class Finding:
    """One check's verdict. ``fix`` is what to do ("" when nothing is needed): a command to run
    when one exists. ``safe``: ``fm doctor --fix`` may apply it (through :attr:`action`)."""

    check: str
    status: str
    detail: str
    fix: str = ""
    action: Action | None = attrs.field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown doctor status {self.status!r} for {self.check}")

    @property
    def safe(self) -> bool:
        return self.action is not None

    def to_dict(self) -> dict[str, object]:
        return {"check": self.check, "status": self.status, "detail": self.detail,
                "fix": self.fix, "safe": self.safe}


def one_line(text: object, limit: int = 300) -> str:
    # Hostile text (a plugin error, a path) must not forge further report lines.
    clean = " ".join(
        "".join(ch if ch.isprintable() else " " for ch in str(text)).split()
    )
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def fm_action(words: list[str], cwd: Path, env: Mapping[str, str]) -> Action:
    """An action running ``fm <words>`` (this installation's fm, as an argv: never a shell) in
    *cwd*: what ``--fix`` does for a fix that is an fm command."""

    def run() -> str:
        import subprocess

        from firstmate.base.errors import FirstmateError
        from firstmate.base.names import fm_module_argv

        try:
            done = subprocess.run(fm_module_argv(*words), cwd=cwd, env=dict(env),
                                  capture_output=True, text=True, timeout=300, check=False,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            raise FirstmateError(f"could not run it: {exc}") from exc
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
            raise FirstmateError(one_line(lines[-1]))
        lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
        return one_line(lines[0]) if lines else "done"

    return run


@attrs.frozen
class Applied:
    """What ``fm doctor --fix`` did for one safe finding."""

    finding: Finding
    ok: bool
    #: One line: what the fix said it did, or why it failed.
    said: str

    def to_dict(self) -> dict[str, object]:
        return {"check": self.finding.check, "fix": self.finding.fix, "ok": self.ok,
                "said": self.said}


def apply(findings: list[Finding]) -> list[Applied]:
    """Run the action of every safe finding, in report order (``fm doctor --fix``). A fix that
    fails is reported and the others still run."""
    from firstmate.base.errors import FirstmateError

    done = []
    for finding in findings:
        if finding.action is None:
            continue
        try:
            done.append(Applied(finding, True, one_line(finding.action())))
        except (FirstmateError, OSError) as exc:
            said = exc.message if isinstance(exc, FirstmateError) else str(exc)
            done.append(Applied(finding, False, one_line(said)))
    return done


def failed(findings: list[Finding]) -> bool:
    return any(finding.status == "fail" for finding in findings)


__all__ = ["STATUSES", "Action", "Applied", "Finding", "apply", "failed", "fm_action",
           "one_line"]
