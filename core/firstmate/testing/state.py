"""What a plugin's tests read of a home's state and of core's shipped texts, so they check it
through the test kit rather than through core's store: the re-arm claim a hook holds, the arm
links a watcher keeps, the wake episode, the wait left before a paced claim, the store keys of
a claim ledger, the harness as a hook loads it, the supervision host's default engine, the
markers of a text block an install writes and a shim's npm manifest. What they arrange before
a hook runs is :mod:`firstmate.testing.plant`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from firstmate.api import HarnessInfo, Home, ShimSpec


def claim(home: Home, harness: str) -> dict[str, Any]:
    """*harness*'s current re-arm claim in *home* (the claim ledger, as a dict: ``outcome``,
    ``epoch``, ``owner_pid``, …); ``{}`` when there is none."""
    import attrs

    from firstmate.continuity import claimledger
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.reading() as conn:
            entry = claimledger.read(conn, harness)
    finally:
        db.close()
    return attrs.asdict(entry) if entry is not None else {}


def arm_links(home: Home) -> list[tuple[int, int]]:
    """``(arm pid, watcher pid)`` of every arm a watcher of *home* was started or attached by,
    oldest first."""
    from firstmate.continuity.armlinks import links
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        return [(link.arm_pid, link.watcher_pid) for link in links(db)]
    finally:
        db.close()


def episode(home: Home) -> dict[str, Any]:
    """*home*'s wake episode as a dict (``status``, ``kind``, ``generation``); ``{}`` when
    there is none or its record is unreadable."""
    import attrs

    from firstmate.store import episodes
    from firstmate.store.database import Store

    db = Store(home)
    try:
        with db.reading() as conn:
            found = episodes.read(conn)
    finally:
        db.close()
    return attrs.asdict(found) if isinstance(found, episodes.Episode) else {}


def claim_keys(harness: str) -> tuple[str, ...]:
    """The store keys *harness*'s claim ledger keeps (the claim, then its ``notified``,
    ``alarmed``, ``stopfailure_at`` and ``notices`` records): a home an older version
    supervised keeps its ledger only while these stay the same."""
    from firstmate.continuity import claimledger

    return (claimledger.key(harness), *(claimledger.key(harness, part) for part in (
        "notified", "alarmed", "stopfailure_at", "notices")))


def loaded_harness(name: str, env: Mapping[str, str] | None = None) -> HarnessInfo | None:
    """*name*'s harness as fm loads it for a hook (its plugin alone, found by its entry
    point); None when the plugin declares no harness of that name."""
    from firstmate.plugin.manager import load_harness

    return load_harness(name, {} if env is None else env, fresh=True).harness(name)


def default_host_engine(env: Mapping[str, str]) -> tuple[str, ...]:
    """The supervision host's engine ``fm host enable`` picks with no ``--engine``, under
    *env* (the first installed harness's declared ``host_engine``; ``()`` when none has one)."""
    from firstmate.host.config import default_engine

    return default_engine(env)


def pacing_left(home: Home, harness: str, cooldown: float) -> float:
    """Seconds until *harness*'s next paced claim in *home* may run under a *cooldown* of that
    many seconds (0 when it may run now): positive while a paced hook waits."""
    from firstmate.rearm.claimpark import cooldown_left

    return cooldown_left(home, harness, cooldown)


def block_markers(name: str) -> tuple[str, str]:
    """The first and last lines of the text block *name* an install writes into a shared file
    (``AGENTS.md``)."""
    from firstmate.plugin.configfiles import block_markers as markers

    return markers(name)


def shim_package_json(spec: ShimSpec) -> str:
    """The ``package.json`` an install writes for the shim *spec*."""
    from firstmate.plugin.shiminstall import package_json

    return package_json(spec)


__all__ = ["arm_links", "block_markers", "claim", "claim_keys", "default_host_engine",
           "episode", "loaded_harness", "pacing_left", "shim_package_json"]
