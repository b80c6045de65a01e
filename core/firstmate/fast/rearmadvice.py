"""How a watcher that is down comes back, said to a person (``fm status``, ``fm doctor``,
``fm top``).

A harness's re-arm owner starts the watcher (a hook when a turn ends, an extension in the
session, or the model following its harness's protocol), so a person is told to start or
restart that harness in the project: never to run ``fm arm``, which stays in the foreground
until the next wake (and which the model in that harness is told never to run). A model is
told what its own harness allows (:mod:`firstmate.guards.down`).

Standard library only, and no more than one ``listdir``: ``fm status`` words its watcher line
with it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: How each kind of re-arm owner (``HarnessInfo.rearm_owner``) brings the watcher back, said
#: after "start or restart <harness> in <project>: ".
HOW = {
    "hook": "its {event} hook starts the watcher when a turn ends",
    "extension": "its Firstmate extension starts the watcher in the session",
    "checkpoint": "its protocol has the model run fm {command} while it works",
    "model-task": "its protocol has the model run fm {command} as a background task",
    "host": "its supervision host starts the watcher",
}

#: For a home no harness was set up for: a command that returns.
NO_HARNESS = ("no harness is set up here to start it: fm install <harness> in {project}, then "
              "start that harness there (from a shell, fm checkpoint --seconds 60 watches for "
              "a minute and returns)")


def how(kind: str, event: str = "", command: Sequence[str] = ()) -> str:
    """What the re-arm owner of *kind* does, in a few words ("" for an unknown kind)."""
    text = HOW.get(kind, "")
    if "{command}" in text and not command:
        return ""
    return text.format(event=(event or "turn-end").replace("-", " ").capitalize()
                       if kind == "hook" else event, command=" ".join(command))


def installed(root: str) -> list[str]:
    """The harnesses ``fm install`` recorded for the home at *root*
    (``config/installs/<harness>.json``), by name: what starts its watcher."""
    try:
        names = os.listdir(os.path.join(root, "config", "installs"))
    except OSError:
        return []
    found = []
    for name in names:
        harness = name[:-5] if name.endswith(".json") else ""
        if harness and len(harness) <= 40 and harness.replace("-", "").replace("_", "").isalnum() \
                and harness.isascii():
            found.append(harness)
    return sorted(found)


def project_of(root: str) -> str:
    """The project a home serves, as a person reads it: the directory holding a project's
    ``.firstmate/``, else "this project" (the default home serves every project)."""
    parent, name = os.path.split(os.path.abspath(root))
    if name != ".firstmate" or parent == os.path.expanduser("~"):
        return "this project"
    return parent


def start_harness(harnesses: Sequence[tuple[str, str]], project: str) -> str:
    """What brings the watcher back: *harnesses* are ``(name, how)`` pairs (``how`` from
    :func:`how`, "" when unknown) of the harnesses set up here."""
    if not harnesses:
        return NO_HARNESS.format(project=project)
    if len(harnesses) > 1:
        names = " or ".join(name for name, _ in harnesses)
        return f"start or restart the harness you supervise with ({names}) in {project}"
    name, said = harnesses[0]
    return f"start or restart {name} in {project}" + (f": {said}" if said else "")


def for_home(root: str) -> str:
    """:func:`start_harness` for the home at *root*, from its install records' names alone."""
    return start_harness([(name, "") for name in installed(root)], project_of(root))


__all__ = ["HOW", "NO_HARNESS", "for_home", "how", "installed", "project_of", "start_harness"]
