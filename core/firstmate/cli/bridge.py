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

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode

if TYPE_CHECKING:
    from firstmate.cli.args import Parser
    from firstmate.host.bridge.owner import BridgeOwner

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


def parser() -> Parser:
    from firstmate.cli.args import Parser

    parser = Parser("fm bridge", "The long-lived process an in-process harness's shim starts and "
                    "talks to: JSON lines on stdin and stdout (docs/bridge.md). Started by the "
                    "shim fm install writes, never by hand.")
    parser.add_argument("harness", metavar="HARNESS",
                        help="the harness whose shim this serves ([a-z][a-z0-9_-]*)")
    parser.add_argument("--home", metavar="DIR",
                        help="the Firstmate home to use (becomes FM_HOME for this process)")
    return parser


def parse(argv: Sequence[str]) -> tuple[str, str | None]:
    args = parser().parse(argv)
    if args.home is not None and not args.home:
        raise parser().usage_error("--home needs a directory")
    if not _NAME.fullmatch(args.harness):
        raise parser().usage_error(f"harness {args.harness[:40]!r} is not a harness name "
                                   "([a-z][a-z0-9_-]*; fm plugins lists the installed ones)")
    return args.harness, args.home


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


__all__ = ["build", "main", "parse", "parser", "serve"]
