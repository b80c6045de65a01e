"""The pull guard (``fm guard``): a backstop printed before the model's commands run.

It warns once per down episode with the full banner when a home that needs supervision has no
healthy watcher (later, one line naming the same episode), reminds the calling actor of queued
wake rows it must drain, and names rows a live supervision branch holds. It never blocks: the
command runs anyway. Gathering reads the home into :class:`PullFacts`; :func:`decide_pull` is
the table in docs/guards.md, pure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import attrs

from firstmate.guards.down import (
    NO_REARM,
    Rearm,
    age,
    away_note,
    down_key,
    fix,
    last_beat,
    problem,
    publish_if_gone,
    rearm_owner,
)
from firstmate.host.away import AwayFacts
from firstmate.store.health import WatcherHealth
from firstmate.store.home import Home
from firstmate.store.need import NOTHING_NEEDED, Need, gather_need

EPISODE_KEY = "guard.down_episode"
CONTINUE_LINE = "This is a warning only; the command you ran still runs."
HELD_SHOWN = 20
NO_WATCHER = WatcherHealth(False, "none")
NOT_AWAY = AwayFacts()


@attrs.frozen
class PullFacts:
    actor: str = "main"
    primary: bool = True
    need: Need = NOTHING_NEEDED
    health: WatcherHealth = NO_WATCHER
    last_beat: float | None = None
    away: AwayFacts = NOT_AWAY
    #: Rows the calling actor can itself present or retire.
    mine: int = 0
    #: Rows a live branch grant holds (sequence numbers).
    held: tuple[int, ...] = ()
    held_pid: int | None = None
    held_generation: str | None = None
    #: The down-episode key already announced with the full banner (None: none announced).
    announced: str | None = None
    #: In-process harness bridges that leave a session unsupervised (firstmate.host.bridge.record).
    bridges: tuple[str, ...] = ()
    #: The long-lived re-arm owner named by ``FM_REARM_OWNER`` ("" when the hooks own it).
    owner: str = ""
    #: How the primary's harness (the session lock's) re-arms: what the advice may say.
    rearm: Rearm = NO_REARM


@attrs.frozen
class PullDecision:
    lines: tuple[str, ...] = ()
    #: The down-episode key to remember (None clears it).
    episode: str | None = None

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def _continue_line(env: Mapping[str, str] | None) -> str:
    value = (os.environ if env is None else env).get("FM_GUARD_CONTINUE_LINE", "").strip()
    return value or CONTINUE_LINE


def decide_pull(f: PullFacts, env: Mapping[str, str] | None = None) -> PullDecision:
    """The pull-guard table (docs/guards.md). Pure."""
    lines: list[str] = []
    down = f.primary and f.need.needed and not f.health.healthy and not f.away.supervising
    episode = down_key(f.health) if down else None
    if down:
        if f.announced != episode:
            lines += [
                "●  WATCHER DOWN - SUPERVISION IS OFF",
                f"●  {f.need.describe()} need a watcher, but {problem(f.health, f.last_beat)}."
                + away_note(f.away),
                f"●  {_continue_line(env)}",
                f"●  Fix: {fix(f.health, f.owner, f.rearm)}.",
            ]
        else:
            lines.append(
                f"WARNING: watcher still down (same {episode} episode; last beat: "
                f"{age(f.last_beat)}) - the full banner was already shown; fix: {fix(f.health, f.owner, f.rearm)}."
            )
    lines += [f"WARNING: {problem}." for problem in f.bridges] if f.primary else []
    if f.actor == "main":
        if f.mine:
            lines.append(f"WARNING: {f.mine} queued wake row(s) pending - run fm wake drain and "
                         "handle them before anything else.")
            if down:
                lines.append("WARNING: the watcher is down with queued wakes pending - nothing "
                             "will wake this session unattended: drain first, then restore the "
                             "watcher as above.")
        if f.held:
            shown = ",".join(str(s) for s in f.held[:HELD_SHOWN])
            shown += ",..." if len(f.held) > HELD_SHOWN else ""
            head = "" if f.mine else "nothing queued is yours to drain: "
            lines.append(
                f"NOTE: {head}{len(f.held)} queued wake row(s) ({shown}) are held by the live "
                f"supervision branch (pid {f.held_pid}, grant {f.held_generation}) - do not drain"
                " them from here; the branch presents and acknowledges them."
            )
    return PullDecision(tuple(lines), episode)


def gather_pull(home: Home, env: Mapping[str, str] | None = None, *, actor: str | None = None,
                cwd: str | None = None, now: float | None = None) -> PullFacts:
    from firstmate.host.away import away_facts
    from firstmate.store.health import watcher_health
    from firstmate.store.queue import resolve_actor
    from firstmate.store.scope import primary_scope

    env = os.environ if env is None else env
    now = time.time() if now is None else now
    who = resolve_actor(actor, env)
    if not home.state.is_dir():
        return PullFacts(actor=who, primary=False)
    # The caller's harness is unknown here: every installed plugin's project-directory
    # variables count, looked up only when FM_PROJECT_DIR does not decide first.
    scope = primary_scope(home, None, env, cwd, project_env=lambda: _installed_project_env(env))
    health = watcher_health(home, env, now=now)
    publish_if_gone(home, health)
    from firstmate.host.bridge.record import problems as bridge_problems

    facts = PullFacts(actor=who, primary=scope.primary,
                      need=gather_need(home) if scope.primary else Need(),
                      health=health, last_beat=last_beat(home, now),
                      away=away_facts(home, env, now=now),
                      bridges=tuple(p.line for p in bridge_problems(home, env, now))
                      if scope.primary else (),
                      owner=rearm_owner(env))
    if facts.primary and facts.need.needed and not health.healthy:
        facts = attrs.evolve(facts, rearm=_session_rearm(home, env))
    if not home.db.exists():
        return facts
    from firstmate.store import grants, queuestatus
    from firstmate.store.database import Store, kv_get

    db = Store(home)
    try:
        with db.reading() as conn:
            mine = queuestatus.pending_count(conn, who)
            grant = grants.live_grant(conn)
            held = tuple(grants.reserved(conn)) if grant is not None else ()
            announced = kv_get(conn, EPISODE_KEY)
    finally:
        db.close()
    return attrs.evolve(facts, mine=mine, held=held,
                        held_pid=grant.owner_pid if grant else None,
                        held_generation=grant.generation if grant else None, announced=announced)


def _session_rearm(home: Home, env: Mapping[str, str]) -> Rearm:
    """How the harness of the session that holds (or last held) the session lock re-arms:
    this guard runs in the primary's session but is not told its harness."""
    from firstmate.continuity.sessionrecord import read_record
    from firstmate.plugin.manager import load_harness

    record = read_record(home).record
    if record is None or not record.harness:
        return Rearm()
    try:
        return Rearm.of(load_harness(record.harness, env).harness(record.harness))
    except Exception:  # (a plugin that cannot load leaves the generic advice)
        return Rearm()


def _installed_project_env(env: Mapping[str, str]) -> tuple[str, ...]:
    from firstmate.plugin.harness import PROJECT_ENV_SUFFIX

    # Every harness's variable ends in _PROJECT_DIR (HarnessInfo checks it): with none set,
    # no plugin's could decide, and loading them all would cost this command most of its time.
    if not any(name.endswith(PROJECT_ENV_SUFFIX) and name != "FM_PROJECT_DIR" and value.strip()
               for name, value in env.items()):
        return ()
    from firstmate.plugin.manager import load

    names: list[str] = []
    for info in load(env).harnesses():
        names += [name for name in info.project_env if name not in names]
    return tuple(names)


def pull_guard(home: Home | None = None, env: Mapping[str, str] | None = None, *,
               actor: str | None = None, cwd: str | None = None) -> PullDecision:
    """Gather, decide, and remember which down episode got its full banner."""
    env = os.environ if env is None else env
    if home is None:
        from firstmate.store.home import resolve_root

        home = Home(resolve_root(env))
    facts = gather_pull(home, env, actor=actor, cwd=cwd)
    decision = decide_pull(facts, env)
    if decision.episode == facts.announced or not home.state.is_dir():
        return decision
    from firstmate.store.database import kv_get, kv_set, open_store

    db = open_store(home)
    try:
        with db.transaction(timeout=5.0) as conn:
            # Compare and set: of two guards racing into a new episode, one prints the banner.
            facts = attrs.evolve(facts, announced=kv_get(conn, EPISODE_KEY))
            decision = decide_pull(facts, env)
            if decision.episode != facts.announced:
                if decision.episode is None:
                    conn.execute("DELETE FROM kv WHERE key = ?", (EPISODE_KEY,))
                else:
                    kv_set(conn, EPISODE_KEY, decision.episode)
    finally:
        db.close()
    return decision


__all__ = ["EPISODE_KEY", "PullDecision", "PullFacts", "decide_pull", "gather_pull", "pull_guard"]
