"""``fm status [--json]``: watcher health, queue depth, episode and session lock. Reads only.

A home that was never used (no ``state/`` or no database yet) is reported as empty; nothing is
created. An unsafe or corrupt state is reported with its one-line fix and exit 4.

The common case is read by :mod:`firstmate.fast.statusview` without attrs (a status call must
start about as fast as an interpreter); whenever that path is not sure, :func:`full_snapshot`
answers, with the store's classes and the harness plugins' probes.
"""

from __future__ import annotations

import os
import sys

from firstmate.base.exitcodes import ExitCode

TYPE_CHECKING = False  # not typing's: importing typing costs a status call (cli/main.py)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from firstmate.cli.args import Parser
    from firstmate.store.home import Home


def snapshot(env: dict[str, str] | None = None) -> dict[str, object]:
    """What ``fm status --json`` prints: :mod:`firstmate.fast.statusview`'s answer, else
    :func:`full_snapshot`'s."""
    return _answer(dict(os.environ) if env is None else env)[0]


def _answer(env: dict[str, str]) -> tuple[dict[str, object], bool]:
    """The snapshot, and whether the standard-library path gave it (it closes what it opens)."""
    from firstmate.fast.statusview import snapshot as quick

    data = quick(env, _publish)
    return (full_snapshot(env), False) if data is None else (data, True)


def _publish(root: str) -> None:
    from pathlib import Path

    from firstmate.store.downtime import publish_for
    from firstmate.store.home import Home

    publish_for(Home(Path(root)))


def full_snapshot(env: dict[str, str] | None = None) -> dict[str, object]:
    """The snapshot through the store, the session-lock module and the bridge records (the
    home located and the report worded as :mod:`firstmate.fast.statusview` does both)."""
    from pathlib import Path

    from firstmate.fast import statusview
    from firstmate.store import health
    from firstmate.store.home import Home

    env = dict(os.environ) if env is None else env
    root, source, where, _state, state_dir = statusview.locate(env)
    home = Home(Path(root))
    watcher = health.watcher_health(home, env)
    if not watcher.healthy:
        # The one write a status read makes: a watcher proven gone is reported as downtime now,
        # so this snapshot, the guards and the away brief agree (firstmate.store.downtime).
        from firstmate.store.downtime import publish_for

        publish_for(home)
    queue = statusview.empty_queue()
    episode: object = None
    if home.db.exists() or home.db.is_symlink():
        from firstmate.store import queuestatus
        from firstmate.store.database import Store

        status = queuestatus.query(Store(home)).to_json()
        episode = status.pop("episode", None)
        queue.update(status)
    return statusview.report((root, source, where), watcher.verdict(), queue, episode,
                             _session_lock(home, state_dir), home.away_record.exists(),
                             _bridge_problems(home, state_dir, env))


def _session_lock(home: Home, state_dir: bool) -> dict[str, object]:
    # With no record at all the lock is free; the session-lock module (and the plugin probe it
    # may run) is imported only when there is a record to judge.
    if not state_dir:
        return {"state": "free", "pid": None}
    if not os.path.lexists(home.lock_path("session")):  # sessionrecord.RECORD_NAME
        return {"state": "free", "pid": None}
    from firstmate.continuity import session_lock

    lock = session_lock.inspect(home)
    return {"state": lock.state, "pid": lock.pid}


def _bridge_problems(home: Home, state_dir: bool, env: dict[str, str]) -> list[str]:
    if not state_dir:
        return []
    # Records are state/bridge-<harness>.json: with none, there is nothing to import or judge.
    if not any(name.startswith("bridge-") for name in os.listdir(home.state)):
        return []
    from firstmate.host.bridge.record import problems

    return [p.line for p in problems(home, env)]


def render(data: dict[str, object]) -> str:
    watcher = data["watcher"]
    queue = data["queue"]
    lock = data["session_lock"]
    assert isinstance(watcher, dict) and isinstance(queue, dict) and isinstance(lock, dict)
    age = watcher["beacon_age"]
    if watcher["healthy"]:
        wline = f"watcher: healthy pid={watcher['pid']} (beacon {int(age)}s)"
    elif watcher["state"] == "none":
        from firstmate.fast.rearmadvice import for_home

        # Who reads this is told what returns: fm arm would hold their shell until the next
        # wake, and the model in a harness is never to run it.
        wline = f"watcher: none ({for_home(str(data['home']))})"
    elif watcher["state"] == "stale-beacon":
        from firstmate.fast.rearmadvice import for_home

        wline = (f"watcher: stale beacon pid={watcher['pid']} (beacon {int(age)}s, grace "
                 f"{int(watcher['grace'])}s); the harness replaces it once it stays wedged, "
                 f"or end it now with fm arm --stop, then {for_home(str(data['home']))}")
    else:
        wline = f"watcher: unverified holder pid={watcher['pid']} (starting, closing or not ours)"
    oldest = queue.get("oldest")
    oline = ""
    if isinstance(oldest, dict):
        oline = f", oldest row {oldest.get('seq')}"
    why = data.get("home_reason")
    lines = [
        f"home: {data['home']}" + (f" ({why})" if why else ""),
        wline,
        f"queue: {queue['depth']} row(s){oline}",
        f"episode: {data['episode'] or 'none'}",
        f"session lock: {lock['state']}" + (f" (pid {lock['pid']})" if lock.get("pid") else ""),
    ]
    if data.get("away"):
        lines.append("away: on")
    bridges = data.get("bridges")
    if isinstance(bridges, list):
        lines += [f"bridge: {problem}" for problem in bridges]
    return "\n".join(lines)


def parser() -> Parser:
    from firstmate.cli.args import Parser

    parser = Parser("fm status", "Show watcher health, queue depth, the open episode, the session "
                    "lock and unsupervised in-process harnesses. Changes nothing, except that a "
                    "watcher proven gone has its downtime published at once.")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (home, home_source, home_reason, "
                             "watcher, queue, episode, session_lock, away, bridges)")
    return parser


def main(argv: Sequence[str]) -> int:
    # The one option is parsed by hand: argparse is imported only for help and errors.
    as_json = bool(argv) if list(argv) in ([], ["--json"]) else bool(parser().parse(argv).json)
    data, quick = _answer(dict(os.environ))
    if as_json:
        from firstmate.cli import jsonout

        jsonout.write(data)
    else:
        sys.stdout.write(render(data) + "\n")
    if quick:
        from firstmate.cli.main import leave_at_once

        leave_at_once()  # all read, the one publication committed, the database closed
    return ExitCode.OK
