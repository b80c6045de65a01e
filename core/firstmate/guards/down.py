"""What both guards say about a watcher that is down: its episode key, the problem in words,
the fix (which never tells the model to arm when a long-lived owner re-arms), and the facts
both gather the same way (the last beat, downtime published once a watcher is proved gone)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from firstmate.host.away import AwayFacts
from firstmate.plugin.harness import HarnessInfo
from firstmate.store.health import WatcherHealth
from firstmate.store.home import Home

#: Operational-input prefix (docs/hooks.md): harness shims never mistake guard text for the captain.
PREFIX = "FIRSTMATE_OP:"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    seconds = max(0, int(seconds))
    return f"{seconds}s ago" if seconds < 120 else f"{seconds // 60}m ago"


def down_key(health: WatcherHealth) -> str:
    """The once-per-episode key of a down watcher: ``stale-beacon`` or ``no-watcher``."""
    return "stale-beacon" if health.state == "stale-beacon" else "no-watcher"


def problem(health: WatcherHealth, last_beat: float | None) -> str:
    if health.state == "stale-beacon":
        return (f"watcher pid {health.pid} is alive but has not polled for "
                f"{health.age_text()}s (grace {health.grace:g}s)")
    if health.state == "unverified" and health.pid:
        return (f"the watcher lock is held by pid {health.pid}, which cannot be verified as this "
                f"home's polling watcher (last beat: {age(last_beat)})")
    return f"no live watcher process holds this home's lock (last beat: {age(last_beat)})"


#: Set by a long-lived re-arm owner (an app-server host, a bridge) in its harness's
#: environment, naming itself: the model there must never arm by hand, so advice says so.
OWNER_ENV = "FM_REARM_OWNER"


def rearm_owner(env: Mapping[str, str]) -> str:
    from firstmate.base.waketext import one_line

    return one_line(env.get(OWNER_ENV, ""), 120).strip()


@attrs.frozen
class Rearm:
    """How the harness a guard speaks to re-arms: its plugin's ``HarnessInfo`` in short (all
    empty for a harness with no plugin here). The advice follows it, so a model is never told
    to run what its harness's protocol forbids."""

    #: ``HarnessInfo.rearm_owner`` ("" when unknown).
    kind: str = ""
    display: str = ""
    #: ``HarnessInfo.rearm_event`` (the hook that re-arms) and ``rearm_command`` (what the
    #: model runs, for a ``checkpoint`` or ``model-task`` harness).
    event: str = ""
    command: tuple[str, ...] = ()

    @classmethod
    def of(cls, info: HarnessInfo | None) -> Rearm:
        if info is None:
            return cls()
        return cls(info.rearm_owner, info.display_name, info.rearm_event, info.rearm_command)


#: A harness with no plugin here: the generic advice.
NO_REARM = Rearm()

#: Re-arm owners that restore the watcher on their own: the model never arms by hand there.
SELF_REARMING = ("hook", "extension", "host")


def fix(health: WatcherHealth, owner: str = "", rearm: Rearm | None = None) -> str:
    """What the model is told to do about a down watcher: what its harness allows."""
    rearm = Rearm() if rearm is None else rearm
    if owner:
        return (f"do not run `fm arm` yourself: {owner} owns re-arming here and restores the "
                "watcher; run `fm status`, and tell the captain if it stays down")
    if rearm.kind in SELF_REARMING:
        from firstmate.fast.rearmadvice import how

        said = how(rearm.kind, rearm.event) or "re-arm owner starts the watcher"
        who = rearm.display or "the harness"
        return (f"do not run `fm arm` yourself: {who}'s {said.removeprefix('its ')}, and it "
                "replaces a watcher that stays wedged; run `fm status`, and tell the captain "
                "if it stays down")
    if rearm.kind == "checkpoint" and rearm.command:
        command = "fm " + " ".join(rearm.command)
        return (f"run `{command}` in the foreground, as your protocol says (never in the "
                "background; it replaces a watcher that stays wedged), then `fm status` to "
                "confirm; tell the captain if it prints `watcher: FAILED`")
    if health.state == "stale-beacon":
        return ("run `fm arm --take-over` as a tracked background task to replace it, then "
                "`fm status` to confirm")
    return ("run `fm arm` as a tracked background task (recovery only: the harness re-arms on "
            "its own when it works), then `fm status` to confirm")


def away_note(away: AwayFacts) -> str:
    if not away.on:
        return ""
    if not away.owner_live:
        return " Away mode is on, but no supervision host is parked on this home either."
    return (f" Away mode is on and supervision host pid {away.owner_pid} is parked, but the "
            f"beacon is older than its grace ({away.grace:g}s).")


def last_beat(home: Home, now: float) -> float | None:
    from firstmate.store.health import beacon_mtime

    mtime = beacon_mtime(home)
    return None if mtime is None else max(0.0, now - mtime)


def publish_if_gone(home: Home, health: WatcherHealth) -> None:
    """No healthy watcher: one killed outright is reported as downtime now (firstmate.store.downtime)."""
    if not health.healthy:
        from firstmate.store.downtime import publish_for

        publish_for(home)


__all__ = ["NO_REARM", "OWNER_ENV", "PREFIX", "SELF_REARMING", "Rearm", "away_note", "down_key", "fix", "last_beat", "problem",
           "publish_if_gone", "rearm_owner"]
