"""``state/bridge-<harness>.json``: what each in-process harness's bridge last said, read back.

The bridge (:mod:`firstmate.host.bridge.owner`) writes the record at every phase change and answer:
which harness process and generation it serves, its phase (``waiting``, ``active``,
``handoff``, ``quit``) and its answer to the last session start (``started``, ``unchanged``,
``read-only``, ``not-needed``, ``away``, …). :func:`problems` turns a record into what a user
must hear from ``fm status``, ``fm doctor`` and the pull guard:

* a ``handoff`` that outlasts its grace: the session was replaced and the replacement never
  loaded the extension (a ``handoff`` phase never counts as a loaded extension);
* a bridge that is gone while its session was active or handing off;
* an answer that means this session is not supervising (``read-only``, ``failed``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

import attrs

from firstmate.base.envnum import PID_MAX, env_float
from firstmate.store.home import Home

#: Seconds a replacement session gets to load the extension before it is reported.
HANDOFF_GRACE_ENV = "FM_BRIDGE_HANDOFF_GRACE"
DEFAULT_HANDOFF_GRACE = 60.0
RECORD_MAX = 4096
PHASES = ("waiting", "active", "handoff", "quit")


@attrs.frozen
class BridgeRecord:
    harness: str
    bridge_pid: int | None
    harness_pid: int | None
    generation: int
    phase: str
    updated_at: float
    answer: str = ""


def path(home: Home, harness: str) -> str:
    return str(home.state / f"bridge-{harness}.json")


def _pid(value: object) -> int | None:
    return value if type(value) is int and 1 < value <= PID_MAX else None


def read_all(home: Home) -> list[BridgeRecord]:
    """Every readable record of this home (a malformed or hostile one is passed over)."""
    try:
        names = sorted(os.listdir(home.state))
    except OSError:
        return []
    found = []
    for name in names:
        if not (name.startswith("bridge-") and name.endswith(".json")):
            continue
        harness = name[len("bridge-"):-len(".json")]
        try:
            fd = os.open(home.state / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                data = json.loads(fh.read(RECORD_MAX + 1)[:RECORD_MAX])
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or data.get("phase") not in PHASES:
            continue
        generation, updated, answer = data.get("generation"), data.get("updated_at"), data.get("answer")
        found.append(BridgeRecord(
            harness=harness if harness.isidentifier() or harness.replace("-", "").isalnum()
            else "?",
            bridge_pid=_pid(data.get("bridge_pid")), harness_pid=_pid(data.get("harness_pid")),
            generation=generation if type(generation) is int else 0,
            phase=str(data["phase"]),
            updated_at=float(updated) if isinstance(updated, int | float) else 0.0,
            answer=answer if isinstance(answer, str) and answer.isprintable() else "",
        ))
    return found


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@attrs.frozen
class BridgeProblem:
    harness: str
    #: One line naming the harness, what is wrong and the fix.
    line: str
    #: What fixes it, on its own (``fm doctor``'s fix).
    fix: str = ""


def problems(home: Home, env: Mapping[str, str] | None = None, now: float | None = None,
             records: list[BridgeRecord] | None = None) -> list[BridgeProblem]:
    """One problem per bridge that leaves its harness unsupervised (of *records*, default
    every record of *home*)."""
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    grace = env_float(env, HANDOFF_GRACE_ENV, DEFAULT_HANDOFF_GRACE, allow_zero=True)
    out: list[BridgeProblem] = []

    def add(harness: str, text: str, fix: str) -> None:
        out.append(BridgeProblem(harness, f"{harness}: {text}", fix))

    for rec in read_all(home) if records is None else records:
        h = rec.harness
        if rec.phase == "quit":
            continue
        bridge_alive = _alive(rec.bridge_pid)
        if rec.phase in ("active", "handoff") and not bridge_alive:
            if _alive(rec.harness_pid):
                add(h, f"its fm bridge (pid {rec.bridge_pid}) is gone while the {h} session "
                       f"(pid {rec.harness_pid}) runs, so nothing re-arms it; run /reload in {h} "
                       "(or restart it) to start the bridge again",
                    f"run /reload in {h}, or restart {h}")
            continue
        if rec.phase == "handoff" and now - rec.updated_at > grace:
            add(h, f"the session was replaced {now - rec.updated_at:.0f}s ago and the new "
                   "session has not loaded the Firstmate extension, so nothing re-arms the "
                   f"watcher; check it is installed and current (fm doctor, fm install {h}), "
                   f"then /reload or restart {h}",
                f"run /reload in {h}, or restart {h} (fm doctor says whether its extension is "
                "installed and current)")
            continue
        if rec.phase == "active" and rec.answer in ("read-only", "failed"):
            add(h, f"the {h} session (pid {rec.harness_pid}) is not supervising (its bridge "
                   f"answered {rec.answer}); see fm lock status and fm doctor",
                f"end the session that holds the lock (fm lock status names it), then restart "
                f"{h}")
    return out


__all__ = ["DEFAULT_HANDOFF_GRACE", "HANDOFF_GRACE_ENV", "BridgeProblem", "BridgeRecord", "path",
           "problems", "read_all"]
