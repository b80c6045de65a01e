"""``fm bridge <harness> [--home DIR]``: the long-lived process an in-process shim talks to.

Reads the shim's JSON lines on stdin and writes the bridge's on stdout (docs/bridge.md). Ends
with exit 0 when stdin closes or on SIGTERM/SIGINT/SIGHUP, after stopping every arm it started.
Exit 2 for bad arguments, 5 when no installed plugin gives the harness a bridge.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, BinaryIO

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.base.exitcodes import ExitCode

if TYPE_CHECKING:
    from firstmate.host.bridge.owner import BridgeOwner

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
USAGE = "usage: fm bridge <harness> [--home DIR]   (JSON lines on stdin/stdout, see docs/bridge.md)"


def parse(argv: Sequence[str]) -> tuple[str, str | None]:
    words = list(argv)
    home: str | None = None
    if "--home" in words:
        at = words.index("--home")
        if at + 1 >= len(words) or not words[at + 1]:
            raise UsageError(f"--home needs a directory; {USAGE}")
        home = words[at + 1]
        del words[at:at + 2]
    if len(words) != 1 or not _NAME.fullmatch(words[0]):
        raise UsageError(USAGE)
    return words[0], home


def build(harness: str, env: Mapping[str, str], out: BinaryIO) -> BridgeOwner:
    """The owner for *harness*, its plugin host and the shim channel on *out*."""
    from firstmate.host.bridge.channel import Channel
    from firstmate.host.bridge.owner import BridgeOwner, ShimDelivery
    from firstmate.plugin.manager import load_harness
    from firstmate.store.home import Home, resolve_root

    host = load_harness(harness, env, fresh=True)  # (its own: the shim delivery joins it)
    profile = host.bridge_profile(harness)
    if profile is None:
        raise FirstmateError(
            f"no installed plugin gives {harness!r} a bridge; install it with "
            f"pip install firstmate-plugin-{harness}", exit_code=ExitCode.PLUGIN)
    info = host.harness(harness)
    owner = BridgeOwner(harness, profile, Home(resolve_root(env)), dict(env), Channel(out),
                        host, display_name=info.display_name if info else harness)
    host.pm.register(ShimDelivery(owner), name=f"bridge-delivery-{harness}")
    return owner


def serve(owner: BridgeOwner, source: BinaryIO) -> None:
    """Feed every shim line to *owner* until end of input."""
    from firstmate.host.bridge.protocol import MAX_LINE, BadLine, parse

    while True:
        line = source.readline(MAX_LINE + 2)
        if not line:
            return
        if not line.endswith(b"\n") and len(line) > MAX_LINE:
            while line and not line.endswith(b"\n"):  # drop the rest of an oversized line
                line = source.readline(MAX_LINE + 2)
            owner.channel.error(None, f"line longer than {MAX_LINE} bytes ignored")
            continue
        if not line.strip():
            continue
        msg = parse(line.rstrip(b"\r\n"))
        if isinstance(msg, BadLine):
            owner.channel.error(msg.id, msg.message)
            continue
        try:
            owner.handle(msg)
        except Exception as exc:  # one broken request never ends the bridge
            owner.channel.error(msg.id, f"internal error: {type(exc).__name__}: {exc}")


def main(argv: Sequence[str], env: Mapping[str, str] | None = None,
         stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    harness, home = parse(argv)
    values = dict(os.environ if env is None else env)
    if home is not None:
        values["FM_HOME"] = os.path.abspath(home)
    # The shim sets it; a bridge started by hand is held for the process that started it.
    values.setdefault("FM_SESSION_HOLDER_PID", str(os.getppid()))
    from firstmate.base import stopsignals

    owner = build(harness, values, stdout or sys.stdout.buffer)
    try:
        # A stop quits the owner (its arms stopped, held deliveries left queued); once one
        # lands, further stops are held until the quit is done (firstmate.base.stopsignals).
        with stopsignals.trapped():
            serve(owner, stdin or sys.stdin.buffer)
    except stopsignals.Stopped:
        pass
    finally:
        stopsignals.block()  # quitting: a stop now waits for the quit to finish
        owner.quit()
    return ExitCode.OK


__all__ = ["USAGE", "build", "main", "parse", "serve"]
