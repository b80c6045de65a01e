"""The supervision host's records: ``state/logs/branch-outcomes.jsonl`` (the outcomes a branch
reports and the host's verdicts) and ``state/logs/supervision-host.log``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.host.config import GENERATION_ENV
from firstmate.store.home import Home
from firstmate.store.ledgers import BoundedLog

LOG_DEFAULTS = (262144, 2000)
EVENTS_DEFAULTS = (1048576, 5000)


def events_log(home: Home, env: Mapping[str, str] | None = None) -> BoundedLog:
    """``state/logs/branch-outcomes.jsonl``: outcomes the engine reported and the host's
    verdicts (``turn`` and ``handback`` records), one JSON object per line."""
    return BoundedLog(home.logs / "branch-outcomes.jsonl", "FM_BRANCH_OUTCOMES_MAX_BYTES",
                      "FM_BRANCH_OUTCOMES_KEEP_LINES", EVENTS_DEFAULTS,
                      env=os.environ if env is None else env)


def host_log(home: Home, env: Mapping[str, str] | None = None) -> BoundedLog:
    """``state/logs/supervision-host.log``: where every close went, one stamped line each."""
    return BoundedLog(home.logs / "supervision-host.log", "FM_SUPERVISION_HOST_LOG_MAX_BYTES",
                      "FM_SUPERVISION_HOST_LOG_KEEP_LINES", LOG_DEFAULTS,
                      env=os.environ if env is None else env, stamp=True)


def record_event(home: Home, kind: str, env: Mapping[str, str] | None = None,
                 **fields: object) -> None:
    record = {"type": kind, "at": time.time(), **fields}
    events_log(home, env).append(json.dumps(record, sort_keys=True, ensure_ascii=True))


def events(home: Home, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every kept record, oldest first (unreadable lines are skipped)."""
    found: list[dict[str, Any]] = []
    try:
        lines = events_log(home, env).lines()
    except (OSError, FirstmateError):
        return found
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def report(home: Home, text: str, generation: str, *, captain: bool = False,
           env: Mapping[str, str] | None = None) -> None:
    """Record one branch outcome for the grant *generation* (``fm host report``)."""
    from firstmate.store.episodes import valid_generation
    from firstmate.store.queue import clean

    if not valid_generation(generation):
        raise UsageError("host report: no grant generation; run it from the engine turn (it sets "
                         f"{GENERATION_ENV}) or pass --generation G")
    body = clean(text, 2000).strip()
    if not body:
        raise UsageError("host report: empty outcome; say what happened and what was done")
    home.check_ground()
    record_event(home, "outcome", env, generation=generation, text=body, captain=captain)


def outcome_count(home: Home, generation: str, env: Mapping[str, str] | None = None) -> int:
    return sum(1 for e in events(home, env)
               if e.get("type") == "outcome" and e.get("generation") == generation)


__all__ = ["events", "events_log", "host_log", "outcome_count", "record_event", "report"]
