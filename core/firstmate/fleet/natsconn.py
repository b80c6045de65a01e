"""The fleet's NATS connections: the only module here that imports ``nats`` (``nats-py``).

Installed with the optional extra (``pip install 'firstmate[fleet]'``); without it, every
``fm fleet`` command that needs a server says so in one line (exit 1) and nothing else changes:
no hook, report or status path imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, TypeVar

from firstmate.base.errors import FirstmateError
from firstmate.fleet import names
from firstmate.fleet.config import Auth

#: Seconds between reconnection attempts (nats-py's own default is 2 s).
RECONNECT_WAIT = 0.5
#: Seconds a publish waits for JetStream's acknowledgement before it is sent again.
PUBLISH_TIMEOUT = 2.0
#: JetStream keeps message ids this long to drop a message sent twice (seconds;
#: ``FM_FLEET_DUPLICATE_WINDOW``). Past it the relay's own dedupe still drops it.
DUPLICATE_WINDOW = 3600.0
DUPLICATE_WINDOW_ENV = "FM_FLEET_DUPLICATE_WINDOW"
#: Seconds JetStream waits for the relay's acknowledgement before it delivers a message again.
ACK_WAIT = 30.0
EXTRA = "pip install 'firstmate[fleet]'"
T = TypeVar("T")


def load() -> ModuleType:
    try:
        import nats
    except ImportError:
        raise FirstmateError(f"fm fleet needs the NATS client: {EXTRA} (nats-py)") from None
    return nats


class Refused(FirstmateError):
    """The server turned these credentials away (no retry makes them work)."""


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def is_auth_failure(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "authorization" in text or "authentication" in text or "permissions" in text


async def connect(urls: tuple[str, ...], auth: Auth, *, name: str,
                  inbox_prefix: str | None = None,
                  on_error: Callable[[str], None] | None = None,
                  once: bool = False, timeout: float = 2.0,
                  fix: str = "ask the primary for new ones: fm fleet host add HOST --replace",
                  ) -> Any:
    """A connection that reconnects by itself for ever (the first one too: a server that is
    not up yet is waited for). With *once*, an unreachable server raises after a few seconds.
    Credentials the server refuses raise :class:`Refused` at once (nats-py would retry them
    for ever). *on_error* hears each new error text once in a row, never a flood."""
    nats = load()
    refused = asyncio.Event()
    said: list[str] = [""]

    async def error_cb(exc: Exception) -> None:
        text = _reason(exc)
        if is_auth_failure(exc):
            refused.set()
        if text != said[0]:
            said[0] = text
            if on_error is not None:
                on_error(text)

    options: dict[str, Any] = {
        "servers": list(urls), "name": name, "allow_reconnect": True,
        "max_reconnect_attempts": -1, "reconnect_time_wait": RECONNECT_WAIT,
        "connect_timeout": timeout, "error_cb": error_cb, "ping_interval": 20,
        "max_outstanding_pings": 3, **auth.connect_kwargs()}
    if inbox_prefix is not None:
        options["inbox_prefix"] = inbox_prefix
    connecting = asyncio.ensure_future(nats.connect(**options))
    refusal = asyncio.ensure_future(refused.wait())
    done, _ = await asyncio.wait({connecting, refusal}, timeout=3 * timeout + 1 if once else None,
                                 return_when=asyncio.FIRST_COMPLETED)
    refusal.cancel()
    if connecting in done:
        return connecting.result()
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    if refused.is_set():
        raise Refused(f"the server at {', '.join(urls)} refused these credentials "
                      f"({said[0][:200]}); {fix}")
    raise FirstmateError(f"cannot reach the fleet's server at {', '.join(urls)}: "
                         f"{said[0][:200] or 'no answer'}; check the address and that the "
                         "server runs (fm fleet status on the primary)")


async def until(stop: asyncio.Event, work: Awaitable[T]) -> tuple[bool, T | None]:
    """``(True, result)`` of *work*, or ``(False, None)`` when *stop* was set first (the work
    is cancelled): how a long-lived process waits on anything and still ends on a signal."""
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not working.done():
        working.cancel()
        with contextlib.suppress(BaseException):
            await working
        return False, None
    return True, working.result()


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait *seconds* (a backoff) unless *stop* is set first; whether it was."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def connected(stop: asyncio.Event, log: Callable[[str], None], urls: tuple[str, ...],
                    auth: Auth, **options: Any) -> Any | None:
    """:func:`connect` for a long-lived process: None (and the reason logged) when stopped
    first or refused."""
    try:
        done, nc = await until(stop, connect(urls, auth, on_error=lambda text: log(
            f"server said: {text}"), **options))
    except Refused as exc:
        log(f"stopped: {exc.message}")
        return None
    return nc if done else None


async def ensure_stream(js: Any, fleet: str, *, replicas: int = 1, max_bytes: int = -1,
                        duplicate_window: float = DUPLICATE_WINDOW) -> None:
    """The fleet's stream: every subject of the fleet, kept until the relay acknowledges it
    (work-queue retention), refusing new messages rather than dropping old ones when full."""
    from nats.js import api

    config = api.StreamConfig(
        name=names.stream(fleet), subjects=[names.subjects(fleet)],
        retention=api.RetentionPolicy.WORK_QUEUE, storage=api.StorageType.FILE,
        discard=api.DiscardPolicy.NEW, duplicate_window=duplicate_window,
        num_replicas=replicas, max_bytes=max_bytes)
    try:
        await js.stream_info(config.name)
    except Exception as exc:
        if "not found" not in str(exc).lower():
            raise
        await js.add_stream(config)
        return
    await js.update_stream(config)


async def fresh_consumer(js: Any, fleet: str) -> Any:
    """The relay's durable pull consumer, made anew: every message not yet acknowledged is
    delivered again from the oldest, in stream order (a relay that died mid-batch resumes
    exactly there, and a crew's lines keep their order)."""
    from nats.js import api

    stream = names.stream(fleet)
    try:
        await js.delete_consumer(stream, names.CONSUMER)
    except Exception as exc:
        if "not found" not in str(exc).lower():
            raise
    config = api.ConsumerConfig(
        durable_name=names.CONSUMER, ack_policy=api.AckPolicy.EXPLICIT,
        deliver_policy=api.DeliverPolicy.ALL, ack_wait=ACK_WAIT, max_ack_pending=20000,
        filter_subject=names.subjects(fleet))
    await js.add_consumer(stream, config)
    return await js.pull_subscribe_bind(durable=names.CONSUMER, stream=stream)


__all__ = ["ACK_WAIT", "DUPLICATE_WINDOW", "DUPLICATE_WINDOW_ENV", "EXTRA", "PUBLISH_TIMEOUT", "RECONNECT_WAIT",
           "Refused", "connect", "connected", "ensure_stream", "fresh_consumer", "is_auth_failure", "load", "pause", "until"]
