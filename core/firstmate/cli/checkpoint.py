"""``fm checkpoint [--seconds N]``: one bounded foreground supervision window (the protocol of a
harness whose re-arm owner is ``checkpoint``).

Runs ``fm arm`` (which starts a watcher or attaches to a live one) for at most N seconds
(``--seconds``, else ``FM_CHECKPOINT_SECONDS``, else an older name an installed plugin declares
for it in ``HarnessInfo.env_aliases``, else 180):

* a reason line → print it and the next step (``fm wake drain`` …), exit 0;
* nothing within N seconds → the arm (and the watcher it started) is stopped,
  ``checkpoint: no actionable wake within <N>s``, exit 124. That stop is planned: the stopped
  watcher's ``watcher: stopped by SIGTERM; publishing downtime …`` line is not passed on (it
  still goes to the triage log), while a stop nobody planned (another ``fm arm --stop``, a
  signal to this command) is reported as it happens;
* a ``watcher: FAILED - …`` line, or an arm that ends without a reason → that line, exit 1
  (a watcher that was merely live is never success);
* bad arguments → one line, exit 2.

The arm runs with ``FM_WATCH_CHECKPOINT=1``: its watcher's start skips the announced-episode
reopen, so an episode announced before stays announced across checkpoints, while a
never-announced (pending) one is still announced and recovered.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from firstmate.base.names import fm_module_argv

if TYPE_CHECKING:
    from firstmate.cli.args import Parser

USAGE = "usage: fm checkpoint [--seconds N]   (N: positive whole seconds, default 180)"
DEFAULT_SECONDS = 180
MAX_SECONDS = 86400
CHECKPOINT_ENV = "FM_WATCH_CHECKPOINT"
SECONDS_ENV = "FM_CHECKPOINT_SECONDS"
#: What the watcher says when the quiet window's own stop reaches it.
PLANNED_STOP_LINE = "watcher: stopped by SIGTERM; "


def _seconds(text: str) -> int:
    from firstmate.base.errors import UsageError

    if not (text.isascii() and text.isdigit()) or not 0 < int(text, 10) <= MAX_SECONDS:
        raise UsageError(f"--seconds must be a positive integer (at most {MAX_SECONDS}); {USAGE}")
    return int(text, 10)


def parser() -> Parser:
    from firstmate.cli.args import Parser

    parser = Parser(
        "fm checkpoint", "One bounded foreground supervision window: runs fm arm for at most N "
        "seconds. Exit 0 with the wake text, 124 when nothing came (the watcher it started is "
        "stopped), 1 for a watcher: FAILED line or a cycle without a reason.")
    parser.add_argument("--seconds", metavar="N",
                        help=f"the window in whole seconds, 1-{MAX_SECONDS} (default: "
                             f"${SECONDS_ENV}, else an older name a plugin declares, else "
                             f"{DEFAULT_SECONDS})")
    return parser


def parse_args(argv: Sequence[str], env: Mapping[str, str]) -> int:
    args = parser().parse(argv)
    if args.seconds is not None:
        return _seconds(args.seconds)
    raw = _configured_seconds(env)
    return _seconds(raw) if raw else DEFAULT_SECONDS


def _configured_seconds(env: Mapping[str, str]) -> str:
    """``FM_CHECKPOINT_SECONDS``, else the first older name for it an installed plugin declares
    that is set (plugins are loaded only when the core name is unset)."""
    raw = env.get(SECONDS_ENV, "").strip()
    if raw:
        return raw
    from firstmate.plugin.manager import load

    for info in load(env).harnesses():
        alias = info.env_aliases.get(SECONDS_ENV, "")
        raw = env.get(alias, "").strip() if alias else ""
        if raw:
            return raw
    return ""


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise(signum: int, frame: object) -> None:
    from firstmate.base import stopsignals

    stopsignals.block()  # one stop is enough: stopping the arm must not be interrupted again
    raise _Interrupted(signum)


def main(argv: Sequence[str]) -> int:
    seconds = parse_args(argv, os.environ)
    from firstmate.base import stopsignals
    from firstmate.base.exitcodes import ExitCode
    from firstmate.base.waketext import compose, one_line
    from firstmate.continuity.watchchild import REASON_RE, child_env

    env = child_env(os.environ)
    env[CHECKPOINT_ENV] = "1"
    env.pop("FM_WATCH_PREDECESSOR_ARM_PID", None)
    reasons: list[str] = []
    failure: str | None = None
    buf = b""
    deadline = time.monotonic() + seconds
    quiet = False
    # Stops are held while the handlers go in and the arm is spawned (it inherits the mask and
    # unblocks it itself), so a stop either finds no arm yet or an arm we know to stop.
    stopsignals.block()
    old = stopsignals.install(_raise, unblock_now=False)
    arm: subprocess.Popen[bytes] | None = None
    # The arm's stderr (and its watcher's) passes through us, so the quiet window's own stop
    # can be told apart from one nobody planned.
    errors = _Relay()
    try:
        arm = subprocess.Popen(fm_module_argv("arm"),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, start_new_session=True)
        stopsignals.unblock()
        assert arm.stdout is not None and arm.stderr is not None
        fd, errors.fd = arm.stdout.fileno(), arm.stderr.fileno()
        import select

        while True:
            left = deadline - time.monotonic()
            if left <= 0 and not quiet:
                quiet = errors.planned = True
                _terminate(arm)
                deadline = time.monotonic() + 30.0  # drain what the stopping arm still says
                continue
            if left <= 0:
                break
            ready, _, _ = select.select([fd, *errors.fds()], [], [], left)
            if errors.fd in ready:
                errors.read()
            if fd not in ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                raw, _, buf = buf.partition(b"\n")
                line = raw.decode(errors="replace").strip()
                if REASON_RE.match(line):
                    reasons.append(line)
                elif line.startswith("watcher: FAILED"):
                    failure = line
                elif line:
                    sys.stderr.write(one_line(line) + "\n")  # started/attached: not the answer
    except _Interrupted as exc:
        if arm is not None:
            _terminate(arm)
            errors.finish(arm)
            _reap(arm)
        return 128 + exc.signum
    finally:
        stopsignals.restore(old)  # after an interrupt stops stay held: we are on our way out
    errors.finish(arm)
    _reap(arm)
    if reasons:
        sys.stdout.write(compose(reasons, None, "checkpoint") + "\n")
        return int(ExitCode.OK)
    if failure is not None and not quiet:
        sys.stdout.write(one_line(failure) + "\n")
        return int(ExitCode.FAILED)
    if quiet:
        sys.stdout.write(f"checkpoint: no actionable wake within {seconds}s\n")
        return int(ExitCode.QUIET)
    sys.stdout.write("watcher: FAILED - cycle ended without an actionable reason\n")
    return int(ExitCode.FAILED)


class _Relay:
    """The arm's stderr, passed on line by line; once :attr:`planned` is set, the line of the
    watcher this command stopped itself is dropped."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.planned = False
        self._buf = b""

    def fds(self) -> list[int]:
        return [] if self.fd is None else [self.fd]

    def read(self) -> None:
        """Take what is ready (one read); at end of file, pass on the partial line and stop."""
        if self.fd is None:
            return
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.fd = None  # the Popen object closes the pipe itself
            if self._buf:
                self._pass(self._buf)
                self._buf = b""
            return
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            self._pass(raw)

    def finish(self, arm: subprocess.Popen[bytes], bound: float = 30.0) -> None:
        """Everything still to come: up to end of file, at most 2 s after the arm exited (a
        descendant that kept the pipe open must not hold this command) and *bound* in all."""
        import select

        end = time.monotonic() + bound
        while self.fd is not None:
            if arm.poll() is not None:
                end = min(end, time.monotonic() + 2.0)
            left = end - time.monotonic()
            if left <= 0:
                break
            if select.select([self.fd], [], [], min(left, 0.2))[0]:
                self.read()
        if self._buf:
            self._pass(self._buf)
            self._buf = b""

    def _pass(self, raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip("\r")
        if self.planned and line.startswith(PLANNED_STOP_LINE):
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def _terminate(arm: subprocess.Popen[bytes]) -> None:
    if arm.poll() is None:
        with contextlib.suppress(OSError):
            arm.send_signal(signal.SIGTERM)


def _reap(arm: subprocess.Popen[bytes]) -> None:
    try:
        arm.wait(timeout=30.0)
    except subprocess.TimeoutExpired:
        arm.kill()
        arm.wait(timeout=10.0)
    for stream in (arm.stdout, arm.stderr):
        if stream is not None:
            stream.close()
