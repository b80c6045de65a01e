"""The brief a spawned crew starts with: who it is, its task, and how it reports.

Harness-neutral: every crew gets the same words, with this installation's ``fm`` by absolute path
(a crew's shell may have no ``fm`` on its PATH). The verbs are the ones the watcher's status
source acts on (firstmate.watch.sources.status): ``done``, ``needs-decision``, ``blocked`` and
``failed`` wake the captain; ``working`` lines are progress the watcher absorbs while the crew
is busy.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

#: (verb, when to use it), in the order the brief lists them.
VERBS = (
    ("working", "progress worth knowing, e.g. the step you are on (does not wake the captain)"),
    ("done", "the task is finished; say where the result is (branch, commit, PR, file)"),
    ("needs-decision", "you need the captain to choose; add key=<short-id> so the answer can "
                       "name it"),
    ("blocked", "you cannot go on without help (access, a missing input, a broken tool)"),
    ("failed", "you gave up; say why"),
)


def brief(crew: str, task: str, fm_argv: Sequence[str]) -> str:
    """The first prompt of crew *crew*: its identity, *task* and the reporting protocol, with
    the commands spelled by *fm_argv* (this installation's ``fm``)."""
    status = shlex.join([*fm_argv, "crew", "status", crew])
    verbs = "\n".join(f"  - {verb}: {when}" for verb, when in VERBS)
    task = task.strip() or "(no task was given: report needs-decision and ask the captain for one)"
    return f"""You are crew "{crew}", one of the crews of a Firstmate captain (the primary agent). \
The captain does not watch your screen: it learns what you do only from your reports.

YOUR TASK
{task}

REPORTING PROTOCOL
Report with this shell command (run it; writing the words in chat is not a report):
  {status} "<verb>: <note>"
Verbs:
{verbs}
Examples:
  {status} "working: reproducing the bug"
  {status} "done: fixed in branch fix-login, tests pass"
  {status} "needs-decision: key=db-choice keep sqlite or move to postgres?"
Report done, needs-decision, blocked or failed the moment it is true, then stop and wait: the \
captain's answer or next instruction is typed into this session (an answer to a decision \
starts with "answered: key=<key>"). Keep each report to one line.
Your turn ends are recorded automatically. Never run fm arm, fm watch or fm wake: they are the \
captain's."""


__all__ = ["VERBS", "brief"]
