"""``fm doctor``: what is missing or broken for a home, each finding with the command that fixes it.

Reads only. A home that was never used is reported as such; nothing (no ``state/``, no database,
no lock file) is created. Every check is isolated: one that raises becomes a ``fail`` finding
with a one-line detail, and the others still run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.store.home import Home

STATUSES = ("ok", "warn", "fail")

#: Cycle-log reasons that mean a cycle ended badly (the others are ordinary wake deliveries).
BAD_REASONS = frozenset({
    "unexpected-clean-exit", "nonzero-exit", "signal-exit", "confirmation-timeout",
    "arm-interrupted", "handling-handoff-failed", "stale-beacon", "ground-removed",
})

#: How many of the newest cycle-log rows the report names.
LAST_CYCLES = 5


@attrs.frozen
class Finding:
    """One check's verdict. ``fix`` is the exact command to run, or "" when nothing is needed."""

    check: str
    status: str
    detail: str
    fix: str = ""

    def __attrs_post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown doctor status {self.status!r} for {self.check}")

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "detail": self.detail, "fix": self.fix}


def _one_line(text: object, limit: int = 300) -> str:
    # Hostile text (a plugin error, a path) must not forge further report lines.
    clean = " ".join(
        "".join(ch if ch.isprintable() else " " for ch in str(text)).split()
    )
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


@attrs.define
class Doctor:
    """Runs the checks in order for one home and project directory."""

    home: Home
    project: Path
    env: Mapping[str, str]
    #: Why this home (firstmate.base.homeroot.reason), said on the home line.
    home_reason: str = ""
    findings: list[Finding] = attrs.Factory(list)
    _harnesses: list[str] = attrs.Factory(list)
    _watcher_state: str = "none"

    def add(self, check: str, status: str, detail: str, fix: str = "") -> None:
        # A fix names paths (a cloned repository's): it must not forge report lines either.
        fix = "".join(ch if ch.isprintable() else "?" for ch in fix)
        self.findings.append(Finding(check, status, _one_line(detail), fix))

    def run(self) -> list[Finding]:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("home", self.check_home),
            ("plugins", self.check_plugins),
            ("harness-config", self.check_configs),
            ("session-lock", self.check_session_lock),
            ("watcher", self.check_watcher),
            ("queue", self.check_queue),
            ("cycles", self.check_cycles),
            ("bridges", self.check_bridges),
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

    # --- checks, in report order ------------------------------------------------------------

    def check_home(self) -> None:
        from firstmate.store.home import refuse_symlink

        refuse_symlink(self.home.root)
        refuse_symlink(self.home.state)
        why = f" ({self.home_reason})" if self.home_reason else ""
        if not self.home.state.is_dir():
            self.add("home", "ok", f"{self.home.root}{why} has no state yet (never used)")
        else:
            self.add("home", "ok", f"{self.home.root}{why}")

    def check_plugins(self) -> None:
        from firstmate.plugin import manager as plugins

        host = plugins.load(self.env)
        infos = host.harnesses()
        self._harnesses = [info.name for info in infos]
        for failure in host.failures:
            self.add("plugins", "fail", f"plugin {failure.name} failed to load: {failure.error}",
                     f"pip install --force-reinstall firstmate-plugin-{failure.name}")
        if not infos:
            self.add("plugins", "warn", "no harness plugin is installed",
                     "pip install firstmate-plugin-<harness> for the harness you run")
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

    def check_configs(self) -> None:
        """Each harness the project has config for, checked with the options it was installed
        with (firstmate.plugin.installrecord); the others are listed in one line."""
        if not self._harnesses:
            return
        if not self.project.is_dir():
            self.add("harness-config", "warn", f"project directory {self.project} does not exist",
                     "cd into the project directory and run fm doctor again")
            return
        from firstmate.plugin import manager as plugins

        unset: list[str] = []
        for name in self._harnesses:
            try:
                self._check_config(plugins.load_harness(name, self.env), name, unset)
            except Exception as exc:
                self.add("harness-config", "fail", f"{name}: the check failed: {_one_line(exc)}",
                         f"fm install {name} --dry-run")
        if unset:
            self.add("harness-config", "ok",
                     f"not set up in this project: {', '.join(unset)} "
                     "(fm install <harness> sets one up)")

    def _check_config(self, host: Any, name: str, unset: list[str]) -> None:
        from firstmate.plugin import installrecord
        from firstmate.plugin.harness import InstallOptions

        # Only entries fm install wrote for this home are used: one from anywhere else (a
        # cloned repository's .firstmate/) is named once, and nothing in it is run or proposed.
        loaded = installrecord.load(self.home, name, self.env)
        ignored = loaded.complaint()
        if ignored:
            self.add("harness-config", "warn", f"{name}: {ignored}", loaded.fix(name))
        records = loaded.for_project(self.project)
        if not records:
            probe = host.uninstall(self.home, InstallOptions(name, self.project, dry_run=True))
            if probe is None or not probe.changed:
                unset.append(name)
                return
            if not ignored:
                self.add("harness-config", "warn",
                         f"{name}: installed in {self.project} with no record of its options "
                         "(by an older fm, or by hand), so it cannot be checked",
                         f"rerun the fm install {name} command you used, once")
            return
        seen: set[str] = set()
        for record in records:
            self._check_record(host, name, record, seen)

    def _check_record(self, host: Any, name: str, record: Any, seen: set[str]) -> None:
        result = host.install(self.home, record.options(dry_run=True))
        if result is None:
            self.add("harness-config", "warn", f"{name}: the plugin does not implement fm install",
                     f"pip install -U firstmate-plugin-{name}")
            return
        if result.stale:
            files = ", ".join(self._shown(change.path) for change in result.stale)
            self.add("harness-config", "warn",
                     f"{name}: not current in {self.project} ({files})", record.command())
        elif result.changes:
            self.add("harness-config", "ok", f"{name}: installed and current")
        else:
            self.add("harness-config", "ok", f"{name}: no project config files to install")
        if record.fm_command not in seen:
            seen.add(record.fm_command)
            self._check_command(name, record)
        for problem in host.install_problems(self.home, record.options()):
            if problem.detail not in seen:  # two records may see one problem from both ends
                seen.add(problem.detail)
                self.add("harness-config", problem.status, f"{name}: {problem.detail}", problem.fix)

    def _check_command(self, name: str, record: Any) -> None:
        """Run the installed command (from an authenticated record only) with ``--version``,
        as the argv the harness's shell runs, never through a shell."""
        import subprocess

        from firstmate.plugin.configfiles import command_words

        reinstall = attrs.evolve(record, fm_command_given=False).command()
        try:
            assigned, words = command_words(record.fm_command)
        except ValueError as exc:
            self.add("harness-config", "fail",
                     f"{name}: the hook command is not a command line ({exc}): "
                     f"{record.fm_command}", reinstall)
            return
        if not words:
            return
        if not os.path.isabs(words[0]):
            self.add("harness-config", "warn",
                     f"{name}: the hooks run {words[0]!r} from the harness's PATH; a harness "
                     "started from a desktop launcher or another environment may not find it",
                     reinstall)
        try:
            done = subprocess.run([*words, "--version"], capture_output=True, text=True,
                                  timeout=30, check=False, env={**self.env, **assigned},
                                  stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.add("harness-config", "fail", f"{name}: the hook command cannot start "
                     f"({exc.strerror or exc}): {record.fm_command}", reinstall)
            return
        except (ValueError, subprocess.SubprocessError) as exc:
            self.add("harness-config", "fail", f"{name}: the hook command could not be run: {exc}",
                     reinstall)
            return
        if done.returncode != 0 or not done.stdout.startswith("fm "):
            said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            self.add("harness-config", "fail",
                     f"{name}: the hook command cannot start ({said}): {record.fm_command}",
                     reinstall)

    def _shown(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.project))
        except ValueError:
            return str(path)

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
            self.add("session-lock", "warn",
                     f"stale: pid {lock.pid} is gone or not a harness ({lock.detail})",
                     "fm lock acquire")
        elif lock.state == "unreadable":
            self.add("session-lock", "warn", f"the lock record is unreadable ({lock.detail})",
                     "fm lock acquire")
        else:
            self.add("session-lock", "warn",
                     f"pid {lock.pid} is alive but its identity cannot be read",
                     "fm lock status")

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
                     f"{watcher.age_text()}s old (grace {int(watcher.grace)}s)",
                     "fm arm --take-over")
        elif watcher.state == "unverified":
            self.add("watcher", "warn",
                     f"lock holder pid {watcher.pid} is unverified (starting, closing or not ours)",
                     "fm status")
        else:
            self.add("watcher", "warn", "no watcher is running", "fm arm")

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
                self.add("queue", "warn", f"{depth} row(s) queued{age}", "fm wake drain")
            else:
                self.add("queue", "fail",
                         f"{depth} row(s) queued{age} and no healthy watcher to deliver them",
                         "fm wake drain   # then fm arm")
        episode = status.get("episode")
        self.add("episode", "ok", _one_line(episode) if episode else "none")

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
        if reasons[-1] in BAD_REASONS:
            self.add("cycles", "warn", f"{text}; the newest cycle ended with {reasons[-1]}",
                     "fm arm")
        else:
            self.add("cycles", "ok", text)


    def check_bridges(self) -> None:
        """The in-process harnesses' bridges (firstmate.host.bridge.record): a replacement session
        that never loaded the extension, a bridge gone under a live session."""
        from firstmate.host.bridge.record import problems, read_all

        if not self.home.state.is_dir():
            return
        records = read_all(self.home)
        found = problems(self.home, self.env, records=records)
        for problem in found:
            self.add("bridge", "warn", problem.line, f"fm install {problem.harness}")
        if records and not found:
            self.add("bridge", "ok", ", ".join(f"{r.harness}: {r.phase}" for r in records))


def diagnose(env: Mapping[str, str] | None = None, project: Path | None = None) -> list[Finding]:
    """Every finding for the home *env* resolves to, in report order."""
    from firstmate.base.homeroot import find_home, reason

    env = dict(os.environ) if env is None else env
    root, source, found_at = find_home(env)
    where = Path(os.path.abspath(project if project is not None else os.getcwd()))
    return Doctor(Home(Path(root)), where, env, reason(root, source, found_at)).run()


def failed(findings: list[Finding]) -> bool:
    return any(finding.status == "fail" for finding in findings)


__all__ = ["BAD_REASONS", "STATUSES", "Doctor", "Finding", "diagnose", "failed"]
