"""``fm checkpoint [--seconds N]``: one bounded foreground supervision window (the protocol of a
harness whose re-arm owner is ``checkpoint``).

Runs ``fm arm`` (which starts a watcher or attaches to a live one) for at most N seconds
(``--seconds``, else ``FM_CHECKPOINT_SECONDS``, else an older name an installed plugin declares
for it in ``HarnessInfo.env_aliases``, else 180):

* a reason line → print it and the next step (``fm wake drain`` …), exit 0;
* nothing within N seconds → the arm (and the watcher it started) is stopped,
  ``checkpoint: no actionable wake within <N>s``, exit 124;
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

if TYPE_CHECKING:
    from firstmate.cli.args import Parser

USAGE = "usage: fm checkpoint [--seconds N]   (N: positive whole seconds, default 180)"
DEFAULT_SECONDS = 180
MAX_SECONDS = 86400
CHECKPOINT_ENV = "FM_WATCH_CHECKPOINT"
SECONDS_ENV = "FM_CHECKPOINT_SECONDS"


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
    try:
        arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env,
                               start_new_session=True)
        stopsignals.unblock()
        assert arm.stdout is not None
        fd = arm.stdout.fileno()
        import select

        while True:
            left = deadline - time.monotonic()
            if left <= 0 and not quiet:
                quiet = True
                _terminate(arm)
                deadline = time.monotonic() + 30.0  # drain what the stopping arm still says
                continue
            if left <= 0:
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
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
            _reap(arm)
        return 128 + exc.signum
    finally:
        stopsignals.restore(old)  # after an interrupt stops stay held: we are on our way out
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
    if arm.stdout is not None:
        arm.stdout.close()
