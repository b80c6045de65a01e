"""What a claim-ledger park (:mod:`firstmate.rearm.claimpark`) says to the model: the wake,
the failure episode's notices, and the notice of a hook its harness ended.

A failure episode is announced FAILED once, then STILL FAILING, then an alarm after which the
hook stays silent until a positive recovery (a healthy watcher) resets the episode.
"""

from __future__ import annotations

import signal

import attrs

from firstmate.base.waketext import NEXT_STEP, PREFIX, facts_only, one_line, sanitise

#: The headline a wake carries under its first line.
WAKE_LINE = "One supervision event needs a handling turn now."
#: Lines of evidence a failure notice carries at most.
MAX_EVIDENCE = 6


@attrs.frozen
class Notice:
    """Which failure notice a failed cycle gets: ``failed``, ``still`` or ``suppressed``."""

    kind: str
    #: This notice spends the episode's budget: it says so, and later ones are suppressed.
    alarm: bool = False


def next_notice(*, notified: bool, alarmed: bool, sent: int, budget: int) -> Notice:
    """The failure-episode progression (pure): first FAILED, then STILL FAILING, and once the
    alarm was raised (by the last budgeted notice, or by the turn-end guard) nothing."""
    if alarmed:
        return Notice("suppressed")
    count = sent if notified else 0
    return Notice("failed" if count == 0 else "still", alarm=count + 1 >= budget)


def wake_banner(text: str) -> str:
    """The wake as the model reads it: the engine's wake (prefix, reasons, failure line, next
    step) with one headline under its first line."""
    lines = text.split("\n")
    return sanitise("\n".join([lines[0], WAKE_LINE, *lines[1:]])) + "\n"


def failure_banner(notice: Notice, attempts: int, evidence: list[str], state_hint: str) -> str:
    noun = "attempt" if attempts == 1 else "attempts"
    what = "FAILED" if notice.kind == "failed" else "STILL FAILING"
    lines = [f"{PREFIX} Firstmate auto-arm {what} - the stop hook that keeps the watcher armed "
             f"could not start or attach to a live watcher after {attempts} bounded {noun}; "
             "supervision is off until it recovers."]
    # Facts only: an arm's advice to an operator (fm arm --take-over) is not the model's to take.
    lines += [f"evidence: {facts_only(e)[:600]}" for e in evidence[-MAX_EVIDENCE:]]
    lines.append(f"state: {state_hint}")
    lines.append("The next turn end retries automatically. Run `fm status` to see the watcher "
                 "and the session lock, run `fm wake drain` to handle anything queued, and tell "
                 "the captain; do not arm the watcher by hand from a tool call.")
    if notice.alarm:
        lines.append("This was the last notice of this failure episode: further failures stay "
                     "silent until the watcher recovers.")
    return sanitise("\n".join(lines)) + "\n"


def interrupted_banner(display_name: str, signum: int, reasons: tuple[str, ...]) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    lines = [f"{PREFIX} Firstmate auto-arm INTERRUPTED by {name} - {display_name} ended the "
             "stop hook (its timeout or a shutdown) while it owned the watcher cycle, so this "
             "cycle is no longer watched by the hook."]
    lines += [one_line(r) for r in reasons]
    lines.append("The next turn end re-arms automatically. " + NEXT_STEP)
    return sanitise("\n".join(lines)) + "\n"


__all__ = ["MAX_EVIDENCE", "WAKE_LINE", "Notice", "failure_banner", "interrupted_banner",
           "next_notice", "wake_banner"]
