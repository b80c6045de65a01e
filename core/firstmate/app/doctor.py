"""``fm doctor``: what is missing or broken for a home, each finding with what fixes it.

Reads only (``fm doctor --fix`` applies the safe fixes: :func:`firstmate.app.doctorfinding.apply`). A home
that was never used is reported as such; nothing (no ``state/``, no database, no lock file) is
created. Every check is isolated: one that raises becomes a ``fail`` finding with a one-line
detail, and the others still run.

One thing gets one verdict: a harness's install is either current or not, its hooks either run
or not, never "ok" in one line and "fail" in the next. Each finding names its real cause and a fix
that, followed as printed, removes it; what brings a watcher back is said to a person (start or
restart the harness), never ``fm arm``, which holds a shell until the next wake.

The checks are split by what they look at: this module (the home, plugins, session lock,
watcher, queue, cycles, bridges), :mod:`firstmate.app.doctor_config` (each harness's install in
the project and its program), :mod:`firstmate.app.doctor_fleet` (tmux, the crews' panes, the
fleet's processes).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.app.doctorfinding import (
    STATUSES,
    Action,
    Applied,
    Finding,
    apply,
    failed,
    fm_action,
    one_line,
)
from firstmate.store.home import Home

#: Cycle-log reasons that mean a cycle ended badly (the others are ordinary wake deliveries).
BAD_REASONS = frozenset({
    "unexpected-clean-exit", "nonzero-exit", "signal-exit", "confirmation-timeout",
    "arm-interrupted", "handling-handoff-failed", "stale-beacon", "ground-removed",
})

#: How many of the newest cycle-log rows the report names.
LAST_CYCLES = 5

@attrs.define
class Doctor:
    """Runs the checks in order for one home and project directory."""

    home: Home
    project: Path
    env: Mapping[str, str]
    #: Why this home (firstmate.base.homeroot.reason), said on the home line.
    home_reason: str = ""
    #: Why fm will not act on this home's state (a cloned or moved one), "" when it will.
    refused: str = ""
    findings: list[Finding] = attrs.Factory(list)
    #: The installed harness plugins, by name.
    harnesses: list[str] = attrs.Factory(list)
    #: Those set up in this project (their config or an install record is there), with their
    #: plugins' HarnessInfo: what brings the watcher back.
    setup: list[Any] = attrs.Factory(list)
    _watcher_state: str = "none"
    #: What needs a watcher, in words (firstmate.store.need).
    _need: str = "nothing"

    def add(self, check: str, status: str, detail: str, fix: str = "",
            action: Action | None = None) -> None:
        # A fix names paths (a cloned repository's): it must not forge report lines either.
        fix = "".join(ch if ch.isprintable() else "?" for ch in fix)
        self.findings.append(Finding(check, status, one_line(detail), fix, action))

    def run(self) -> list[Finding]:
        from firstmate.app import doctor_config, doctor_fleet

        steps: list[tuple[str, Callable[[], None]]] = [
            ("home", self.check_home),
            ("plugins", self.check_plugins),
        ]
        if not self.refused:  # (nothing is read from a home fm will not act on)
            steps += [
                ("harness-config", lambda: doctor_config.check_configs(self)),
                ("harness", lambda: doctor_config.check_programs(self)),
                ("session-lock", self.check_session_lock),
                ("watcher", self.check_watcher),
                ("queue", self.check_queue),
                ("cycles", self.check_cycles),
                ("bridges", self.check_bridges),
                ("crews", lambda: doctor_fleet.check_crews(self)),
                ("fleet", lambda: doctor_fleet.check_fleet(self)),
            ]
        for name, step in steps:
            try:
                step()
            except Exception as exc:  # a broken check is a finding, never a traceback
                from firstmate.base.errors import FirstmateError

                detail = str(exc) if isinstance(exc, FirstmateError) else (
                    f"{type(exc).__name__}: {exc}")
                self.add(name, "fail", f"check could not run: {detail}")
        return self.findings

    def restart(self) -> str:
        """What brings the watcher back, said to a person: start or restart the harness set up
        here (firstmate.fast.rearmadvice)."""
        from firstmate.fast.rearmadvice import how, project_of, start_harness

        where = str(self.project) if self.setup else project_of(str(self.home.root))
        return start_harness([(info.display_name, how(info.rearm_owner, info.rearm_event,
                                                       info.rearm_command))
                              for info in self.setup], where)

    # --- checks, in report order ------------------------------------------------------------

    def check_home(self) -> None:
        from firstmate.store.home import refuse_symlink

        why = f" ({self.home_reason})" if self.home_reason else ""
        if self.refused:
            import shlex

            root = str(self.home.root)
            self.add("home", "fail", f"{self.refused} (the other checks of this home run once "
                     "it is adopted or set aside)", f"FM_HOME={shlex.quote(root)} fm status")
            return
        refuse_symlink(self.home.root)
        refuse_symlink(self.home.state)
        if not self.home.state.is_dir():
            self.add("home", "ok", f"{self.home.root}{why} has no state yet (never used)")
        else:
            self.add("home", "ok", f"{self.home.root}{why}")

    def check_plugins(self) -> None:
        from firstmate.plugin import manager as plugins

        host = plugins.load(self.env)
        infos = host.harnesses()
        self.harnesses = [info.name for info in infos]
        for failure in host.failures:
            self.add("plugins", "fail", f"plugin {failure.name} failed to load: {failure.error}",
                     f"fm plugin remove {failure.name} && fm plugin add {failure.name}")
        if not infos:
            self.add("plugins", "warn", "no harness plugin is installed",
                     "fm plugin add <harness> (the harness you supervise with)")
        else:
            names = ", ".join(
                f"{info.name} {host.versions.get(info.name, '')}".strip()
                + f" (re-armed by {self._rearm_owner(host, info.name)})" for info in infos)
            self.add("plugins", "ok", f"harness plugins: {names}")

    def _rearm_owner(self, host: Any, harness: str) -> str:
        """Who re-arms *harness*'s watcher in this home (the plugins' answer)."""
        from firstmate.plugin.handoff import Session

        owner = host.rearm_owner(self.home, Session(self.home, harness, dict(self.env)))
        return "nobody" if owner is None else str(owner.kind)

    def check_session_lock(self) -> None:
        from firstmate.continuity import session_lock

        if not self.home.state.is_dir():
            self.add("session-lock", "ok", "free (no state yet)")
            return
        lock = session_lock.inspect(self.home)
        if lock.state == "free":
            self.add("session-lock", "ok", "free")
        elif lock.state == "held":
            self.add("session-lock", "ok", f"held by live harness pid {lock.pid}")
        elif lock.state == "stale":
            # Harmless: the next session of the harness takes a stale lock over.
            harness = lock.record.harness if lock.record is not None else "harness"
            self.add("session-lock", "ok",
                     f"stale: pid {lock.pid} is gone or not a harness ({lock.detail}); the "
                     f"next {harness} session takes it over")
        elif lock.state == "unreadable":
            self.add("session-lock", "warn",
                     f"the lock record is unreadable ({lock.detail}), so no session holds it "
                     "and a running one's hooks stand aside; the next harness session replaces "
                     "it", self.restart())
        else:
            self.add("session-lock", "warn",
                     f"pid {lock.pid} is alive but its identity cannot be read, so fm cannot "
                     f"tell whether it is the harness session that took the lock (ps -p "
                     f"{lock.pid} shows what it is)")

    def check_watcher(self) -> None:
        from firstmate.store import health

        watcher = health.watcher_health(self.home, self.env)
        self._watcher_state = watcher.state
        if watcher.healthy:
            self.add("watcher", "ok",
                     f"healthy pid {watcher.pid}, beacon {watcher.age_text()}s old")
        elif watcher.state == "stale-beacon":
            self.add("watcher", "fail",
                     f"pid {watcher.pid} holds the watcher lock but its beacon is "
                     f"{watcher.age_text()}s old (grace {int(watcher.grace)}s): the harness "
                     "replaces it once it stays wedged; to end it now run the fix, then "
                     f"{self.restart()}", "fm arm --stop")
        elif watcher.state == "unverified":
            self.add("watcher", "warn",
                     f"lock holder pid {watcher.pid} is unverified (starting, closing or not "
                     "ours); run fm doctor again in a few seconds")
        elif not self._needed():
            self.add("watcher", "ok", "none running, and nothing needs one yet (no crew, "
                     "check or process source is registered)")
        else:
            self.add("watcher", "warn", f"no watcher is running for {self._need}",
                     self.restart())

    def _needed(self) -> bool:
        from firstmate.store.need import gather_need

        if not self.home.state.is_dir():
            return False
        need = gather_need(self.home)
        self._need = need.describe()
        return need.needed

    def check_queue(self) -> None:
        if not (self.home.db.exists() or self.home.db.is_symlink()):
            self.add("queue", "ok", "empty (no database yet)")
            self.add("episode", "ok", "none")
            return
        from firstmate.base.errors import FirstmateError
        from firstmate.store import queuestatus
        from firstmate.store.database import open_store

        try:
            status = queuestatus.query(open_store(self.home)).to_json()
        except FirstmateError as exc:
            self.add("queue", "fail", f"the database {self.home.db} is unusable: {exc}",
                     f"mv {self.home.db} {self.home.db}.broken   # then fm status")
            return
        raw_depth = status.get("depth")
        depth = raw_depth if isinstance(raw_depth, int) else 0
        oldest = status.get("oldest")
        if depth == 0:
            self.add("queue", "ok", "empty")
        else:
            age = ""
            if isinstance(oldest, dict):
                at = oldest.get("at")
                age = f", oldest row {oldest.get('seq')}"
                if isinstance(at, int | float):
                    import time

                    age += f" ({int(max(0.0, time.time() - float(at)))}s old)"
            if self._watcher_state == "healthy":
                self.add("queue", "ok", f"{depth} row(s) queued{age}, for the primary to drain "
                         "(fm wake drain, in its session)")
            else:
                # Only the primary's model drains them: a drain from a shell would count as
                # seen and never wake it for them.
                self.add("queue", "fail",
                         f"{depth} row(s) queued{age} and no healthy watcher to wake the primary "
                         "for them", self.restart())
        episode = status.get("episode")
        self.add("episode", "ok", one_line(episode) if episode else "none")

    def check_cycles(self) -> None:
        from firstmate.store import cyclelog

        if not self.home.state.is_dir():
            self.add("cycles", "ok", "no cycles logged yet")
            return
        rows = cyclelog.rows(self.home, self.env)[-LAST_CYCLES:]
        if not rows:
            self.add("cycles", "ok", "no cycles logged yet")
            return
        reasons = [row.reason for row in rows]
        text = "last reasons (oldest first): " + ", ".join(reasons)
        if reasons[-1] not in BAD_REASONS:
            self.add("cycles", "ok", text)
        elif self._watcher_state == "healthy":
            self.add("cycles", "ok", f"{text}; a watcher is healthy again since")
        elif not self._needed():
            self.add("cycles", "ok", f"{text}; nothing needs a watcher now")
        else:
            # What to do is the watcher's finding: this one says why it is down.
            self.add("cycles", "warn", f"{text}; the newest cycle ended with {reasons[-1]} "
                     "(see the watcher line for what brings it back)")

    def check_bridges(self) -> None:
        """The in-process harnesses' bridges (firstmate.host.bridge.record): a replacement session
        that never loaded the extension, a bridge gone under a live session."""
        from firstmate.host.bridge.record import problems, read_all

        if not self.home.state.is_dir():
            return
        records = read_all(self.home)
        found = problems(self.home, self.env, records=records)
        for problem in found:
            self.add("bridge", "warn", problem.line, problem.fix)
        if records and not found:
            self.add("bridge", "ok", ", ".join(f"{r.harness}: {r.phase}" for r in records))


def diagnose(env: Mapping[str, str] | None = None, project: Path | None = None) -> list[Finding]:
    """Every finding for the home *env* resolves to, in report order. A home whose state fm
    will not act on (a cloned or moved project's) is one finding naming how to adopt it."""
    from firstmate.base.errors import StateError
    from firstmate.base.homeroot import find_home, locate, reason

    env = dict(os.environ) if env is None else env
    where = Path(os.path.abspath(project if project is not None else os.getcwd()))
    refused = ""
    try:
        root, source, found_at = find_home(env)
    except StateError as exc:
        root, source, found_at = locate(env)
        if not _foreign(root, env):
            raise
        refused = exc.message
    return Doctor(Home(Path(root)), where, env, reason(root, source, found_at), refused).run()


def _foreign(root: str, env: Mapping[str, str]) -> bool:
    """Whether the home at *root* is refused for its state's mark alone (not for its owner
    or mode, which its own error names the fix for)."""
    from firstmate.base import homemark
    from firstmate.base.errors import StateError
    from firstmate.base.trust import verify_home

    try:
        return verify_home(root) == "state" and homemark.verdict(root, env) != "ok"
    except StateError:
        return False


__all__ = ["BAD_REASONS", "STATUSES", "Action", "Applied", "Doctor", "Finding", "apply",
           "diagnose", "failed", "fm_action", "one_line"]
