"""``fm fleet run``: the primary's fleet supervisor, which keeps the relay (and, on a served
fleet, the ``nats-server``) running.

Started in its own session by ``fm fleet serve`` or ``fm fleet use`` (both idempotent: with a
supervisor already running they only have it reload). It holds ``state/fleet/run.lock``, starts
its children and waits for signals with ``sigtimedwait`` (no polling): a child that ends is
started again after a backoff that doubles from 0.2 s to 10 s (back to 0.2 s once a child ran a
minute); HUP has the server reload its users and the relay its hosts; TERM or INT stops the
relay, then the server, and ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping

import attrs

from firstmate.base.exitcodes import ExitCode
from firstmate.fleet import config, paths, procs, server
from firstmate.store.home import Home
from firstmate.store.ledgers import BoundedLog

ROLE = "fleet-run"
SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
FIRST_BACKOFF = 0.2
MAX_BACKOFF = 10.0
#: A child that ran this long before it ended starts again at the first backoff.
STEADY = 60.0
STOP_WAIT = 5.0


@attrs.define(eq=False)
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff: float = FIRST_BACKOFF
    due: float = 0.0


def _unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def run(home: Home, env: Mapping[str, str]) -> int:
    with procs.singleton(home, paths.RUN_LOCK, ROLE) as mine:
        if not mine:
            return ExitCode.OK
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            return _run(home, env)
        finally:
            _unblock()


def _run(home: Home, env: Mapping[str, str]) -> int:
    log = paths.log(home, "run", env)
    primary = config.load_primary(os.fspath(home.root), env)
    if primary is None:
        log.append("supervisor: this home serves no fleet here")
        return ExitCode.STATE
    children = [Child("relay", procs.fm_argv("fleet", "relay"))]
    if primary.mode == "serve":
        conf = os.path.join(config.fleet_dir(os.fspath(home.root), env), config.SERVER_CONF)
        children.insert(0, Child("server", [server.binary(env), "-c", conf]))
    log.append(f"supervisor: started (pid {os.getpid()}): "
               f"{', '.join(child.name for child in children)}")
    _loop(home, env, children, log)
    return ExitCode.OK


def _start(home: Home, env: Mapping[str, str], child: Child, log: BoundedLog) -> None:
    child_env = {**env, "FM_HOME": os.fspath(home.root)}
    try:
        child.proc = subprocess.Popen(child.argv, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env=child_env, close_fds=True, preexec_fn=_unblock)
    except OSError as exc:
        log.append(f"supervisor: cannot start the {child.name}: {exc.strerror}")
        child.proc = None
        child.due = time.monotonic() + child.backoff
        child.backoff = min(child.backoff * 2, MAX_BACKOFF)
        return
    child.started = time.monotonic()


def _loop(home: Home, env: Mapping[str, str], children: list[Child], log: BoundedLog) -> None:
    for child in children:
        _start(home, env, child, log)
    while True:
        now = time.monotonic()
        waiting = [child.due for child in children if child.proc is None]
        timeout = max(0.0, min(waiting) - now) if waiting else None
        info = signal.sigtimedwait(SIGNALS, timeout if timeout is not None else 3600.0)
        if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
            _stop_all(children, log)
            return
        if info is not None and info.si_signo == signal.SIGHUP:
            for child in children:
                if child.proc is not None and child.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.send_signal(signal.SIGHUP)
            log.append("supervisor: reloaded the configuration")
        now = time.monotonic()
        for child in children:
            if child.proc is not None and child.proc.poll() is not None:
                code = child.proc.returncode
                ran = now - child.started
                if ran >= STEADY:
                    child.backoff = FIRST_BACKOFF
                log.append(f"supervisor: the {child.name} (pid {child.proc.pid}) ended with "
                           f"{code} after {ran:.1f}s; starting it again in {child.backoff:.1f}s")
                child.proc = None
                child.due = now + child.backoff
                child.backoff = min(child.backoff * 2, MAX_BACKOFF)
            if child.proc is None and child.due <= now:
                _start(home, env, child, log)


def _stop_all(children: list[Child], log: BoundedLog) -> None:
    # The relay first: it acknowledges nothing it has not committed, so it can stop anywhere.
    for child in reversed(children):
        proc = child.proc
        if proc is None or proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.append("supervisor: stopped")


__all__ = ["Child", "run"]
