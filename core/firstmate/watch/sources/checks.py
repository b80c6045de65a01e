"""Registered state checks (see :mod:`firstmate.store.checks` for the definition and run contract).

Every poll first authenticates ``state/checks/``. A set of rejected entries not yet reported
wakes at once with ``check: rejected unauthenticated state checks: <names>`` (key
``unauthenticated-state-checks``); the same set is reported once, a changed set again. Then each
authenticated check whose last run is at least ``FM_CHECK_INTERVAL`` (default 300 s) old runs,
by name, bounded by ``FM_CHECK_TIMEOUT`` (default 30 s); a new check is due at once. The first
result with something to report wakes (``check: <name>: …``, key ``check:<name>``); quiet runs
are recorded and logged to triage. Run times live in ``state/check-state.json``; an actionable
run's time is recorded only in :meth:`ChecksSource.commit`, so a lost row means a rerun.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from firstmate.base.envnum import env_float
from firstmate.store import checks
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext, Wake

DEFAULT_INTERVAL = 300.0
DEFAULT_TIMEOUT = 30.0


@attrs.frozen
class _Pending:
    #: The check that ran (None for a rejection report) and when.
    name: str | None
    ran_at: float
    rejected: str = ""


@attrs.define(eq=False)
class ChecksSource:
    home: Home
    name: str = "checks"
    #: Polled when the doorbell rings: a newly registered check rings it (and is due at once).
    doorbell: ClassVar[bool] = True
    _pending: dict[str, _Pending] = attrs.field(factory=dict, init=False)
    _due: float | None = attrs.field(default=None, init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        self._pending.clear()
        self._due = None
        interval = env_float(ctx.env, "FM_CHECK_INTERVAL", DEFAULT_INTERVAL)
        timeout = env_float(ctx.env, "FM_CHECK_TIMEOUT", DEFAULT_TIMEOUT)
        valid, rejected = checks.load(self.home, ctx.env)
        state = checks.read_state(self.home)
        fingerprint = checks.rejected_fingerprint(rejected)
        if fingerprint and fingerprint != state.rejected:
            from firstmate.base.wakeinput import clean

            # File names anyone could have dropped there: sanitised before they reach a model.
            names = ", ".join(clean(entry.name, 80) for entry in rejected)
            wake = Wake("check", checks.REJECTED_KEY, f"check: rejected unauthenticated state checks: {names}")
            self._pending[wake.key] = _Pending(None, ctx.now, fingerprint)
            return wake
        # Here the rejected set is either empty or already reported; an empty one clears the
        # record so that a recurrence reports again.
        runs = {name: at for name, at in state.last_run.items() if any(d.name == name for d in valid)}
        found: Wake | None = None
        for definition in valid:
            last = runs.get(definition.name)
            if last is not None and 0 <= ctx.now - last < interval:
                continue
            result = checks.run_check(definition, timeout, ctx.env, self.home)
            ctx.beat()
            reason = result.reason
            if reason is None:
                runs[definition.name] = ctx.now
                ctx.triage(f"check ok: {definition.name}")
                continue
            found = Wake("check", checks.wake_key(definition.name), reason)
            self._pending[found.key] = _Pending(definition.name, ctx.now)
            break
        updated = checks.RunState(runs, fingerprint)
        if updated != state:
            checks.write_state(self.home, updated)
        due = [runs[d.name] + interval if d.name in runs else ctx.now for d in valid]
        self._due = min(due) if due else None
        return found

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        pending = self._pending.pop(wake.key, None)
        if pending is None:
            return
        state = checks.read_state(self.home)
        if pending.name is None:
            checks.write_state(self.home, attrs.evolve(state, rejected=pending.rejected))
        else:
            checks.write_state(self.home, checks.RunState({**state.last_run, pending.name: pending.ran_at},
                                                          state.rejected))

    def next_due(self, ctx: PollContext) -> float | None:
        return self._due
