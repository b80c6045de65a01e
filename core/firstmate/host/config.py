"""The supervision host's configuration: ``config/supervision-host`` (written by ``fm host
enable``, its engine authenticated with the home's secret), the ``FM_SUPERVISION_HOST_*``
overrides, the default engine a plugin declares, and the hand-back retry backoff."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.base.envnum import env_float, env_int
from firstmate.base.errors import FirstmateError, UsageError
from firstmate.store.home import Home, atomic_write

CONFIG_NAME = "supervision-host"
ENGINE_ENV = "FM_SUPERVISION_HOST_ENGINE"
TURN_TIMEOUT_ENV = "FM_SUPERVISION_HOST_TURN_TIMEOUT"
BOUNDARY_ENV = "FM_SUPERVISION_HOST_BOUNDARY"
READY_ENV = "FM_SUPERVISION_HOST_READY_TIMEOUT"
RETRIES_ENV = "FM_SUPERVISION_HOST_HANDBACK_RETRIES"
RETRY_ENV = "FM_SUPERVISION_HOST_HANDBACK_RETRY_S"
RETRY_MAX_ENV = "FM_SUPERVISION_HOST_HANDBACK_RETRY_MAX_S"

#: No engine configured and no installed plugin declares one (``HarnessInfo.host_engine``).
NO_ENGINE: tuple[str, ...] = ()
DEFAULT_TURN_TIMEOUT = 900.0
#: The parking hook's registered timeout is 28800 s; the host stops a margin before it.
DEFAULT_BOUNDARY = 28800.0 - 900.0
DEFAULT_READY_TIMEOUT = 30.0
#: Deliveries of one acknowledged hand-back; 0: until main acknowledges its rows.
DEFAULT_RETRIES = 0
#: Seconds from an acknowledged hand-back to its first re-delivery; doubled per delivery.
DEFAULT_RETRY = 120.0
#: The cap of that backoff.
DEFAULT_RETRY_MAX = 1800.0
#: The grant generation a branch reports outcomes for (``fm host report``).
GENERATION_ENV = "FM_SUPERVISION_HOST_GENERATION"


@attrs.frozen
class HostConfig:
    enabled: bool = False
    #: The engine command line; empty when none is configured or declared (parking then fails
    #: with the fix, :func:`require_engine`).
    engine: tuple[str, ...] = NO_ENGINE
    turn_timeout: float = DEFAULT_TURN_TIMEOUT
    boundary: float = DEFAULT_BOUNDARY
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    #: ``default`` (stop the successor, hand back once) or ``acknowledged``.
    handback: str = "default"
    retries: int = DEFAULT_RETRIES
    retry: float = DEFAULT_RETRY
    retry_max: float = DEFAULT_RETRY_MAX


def config_path(home: Home) -> Any:
    return home.config / CONFIG_NAME


def _parse_config(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip().lower()] = value.strip()
    return values


def load_config(home: Home, env: Mapping[str, str] | None = None) -> HostConfig:
    """``config/supervision-host`` (``key = value`` lines), overridden by ``FM_SUPERVISION_HOST_*``.

    Keys: ``enabled`` (default yes when the file exists), ``engine`` (a command line; the prompt
    is appended as its last argument), ``turn_timeout`` (seconds), ``handback``
    (``default``/``acknowledged``). A missing file means the host is off.
    """
    from firstmate.base.trust import verify_file

    env = os.environ if env is None else env
    path = config_path(home)
    if not verify_file(str(path), "supervision host config"):
        return HostConfig(enabled=False)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, encoding="utf-8", errors="replace") as fh:
            values = _parse_config(fh.read(65536))
    except FileNotFoundError:
        return HostConfig(enabled=False)
    except OSError as exc:
        raise FirstmateError(f"cannot read {path}: {exc.strerror}; fix its permissions") from exc
    enabled = values.get("enabled", "yes").lower() not in ("no", "false", "0", "off")
    engine_text = env.get(ENGINE_ENV, "").strip()
    if not engine_text and values.get("engine"):
        engine_text = _authenticated_engine(home, values, env, path)
    try:
        engine = tuple(shlex.split(engine_text)) if engine_text else ()
    except ValueError as exc:
        raise UsageError(f"supervision host engine {engine_text[:80]!r} is not a valid command "
                         f"line ({exc}); fix engine = … in {path}") from exc
    if not engine and enabled:
        engine = default_engine(env)  # only an enabled host pays for loading the plugins
    turn = env_float(values, "turn_timeout", DEFAULT_TURN_TIMEOUT)
    handback = values.get("handback", "default").lower()
    return HostConfig(
        enabled=enabled, engine=engine,
        turn_timeout=env_float(env, TURN_TIMEOUT_ENV, turn),
        boundary=env_float(env, BOUNDARY_ENV, DEFAULT_BOUNDARY),
        ready_timeout=env_float(env, READY_ENV, DEFAULT_READY_TIMEOUT),
        handback="acknowledged" if handback == "acknowledged" else "default",
        retries=env_int(env, RETRIES_ENV, DEFAULT_RETRIES, minimum=0),
        retry=env_float(env, RETRY_ENV, DEFAULT_RETRY),
        retry_max=env_float(env, RETRY_MAX_ENV, DEFAULT_RETRY_MAX),
    )


def default_engine(env: Mapping[str, str]) -> tuple[str, ...]:
    """The first installed plugin's headless engine (``HarnessInfo.host_engine``, in plugin-name
    order); :data:`NO_ENGINE` when none declares one."""
    from firstmate.plugin.manager import load

    for info in load(env).harnesses():
        if info.host_engine:
            return tuple(info.host_engine)
    return NO_ENGINE


def require_engine(config: HostConfig) -> tuple[str, ...]:
    """The engine to run, or a one-line error naming the fix when there is none."""
    if not config.engine:
        raise UsageError(
            f"the supervision host has no engine: no installed harness plugin declares one; "
            f"set {ENGINE_ENV} (or fm host enable --engine 'CMD …') to a headless one-turn "
            "command line")
    return config.engine


def retry_delay(delivered: int, base: float, cap: float) -> float:
    """Seconds from the *delivered*-th delivery of a hand-back (1: the hand-back itself) to the
    next one: *base*, doubled per delivery, never more than *cap* (nor less than *base*). Pure."""
    steps = min(max(delivered, 1) - 1, 32)
    return min(max(cap, base), base * float(1 << steps))


def _engine_body(engine: str) -> dict[str, object]:
    return {"what": "supervision-host-engine", "engine": engine}


def _authenticated_engine(home: Home, values: Mapping[str, str], env: Mapping[str, str],
                          path: object) -> str:
    """The configured engine command line, only when ``fm host enable`` wrote it for this home
    (its ``engine_mac`` verifies under the home's secret): a copied, cloned or hand-edited
    engine never runs."""
    from firstmate.base import keyring
    from firstmate.base.errors import StateError

    engine = values["engine"]
    key = keyring.read_key(str(home.root), env)
    if not keyring.verify_mac(key, _engine_body(engine), values.get("engine_mac")):
        raise StateError(
            f"the engine in {path} was not set by fm host enable for this home (copied, cloned "
            "or edited by hand), so it is not run; set it again: fm host enable --engine 'CMD …'"
        )
    return engine


def enable(home: Home, engine: str | None = None, handback: str | None = None,
           env: Mapping[str, str] | None = None) -> None:
    from firstmate.base import keyring

    home.ensure()
    lines = ["# Firstmate supervision host (fm host enable). Keys: enabled, engine, "
             "turn_timeout, handback.", "enabled = yes"]
    if engine:
        if "\n" in engine or "\r" in engine or "\0" in engine:
            raise UsageError("the engine command line must be one line; pass it without "
                             "line breaks")
        key = keyring.ensure_key(str(home.root), os.environ if env is None else env)
        lines.append(f"engine = {engine}")
        lines.append(f"engine_mac = {keyring.mac(key, _engine_body(engine))}")
    if handback:
        lines.append(f"handback = {handback}")
    atomic_write(config_path(home), ("\n".join(lines) + "\n").encode())


def disable(home: Home) -> bool:
    try:
        os.unlink(config_path(home))
    except FileNotFoundError:
        return False
    return True


__all__ = ["ENGINE_ENV", "GENERATION_ENV", "RETRIES_ENV", "RETRY_ENV", "RETRY_MAX_ENV",
           "HostConfig", "config_path", "default_engine", "disable", "enable", "load_config",
           "require_engine", "retry_delay"]
