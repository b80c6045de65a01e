"""``fm``: dispatch a command group to its module without importing the others.

Start-up cost matters (harness hooks and ``fm wake append`` run on every turn), so this module
imports nothing heavy: each group module is imported only when its name is on the command line,
and plugin-provided commands are looked up only for a name the core does not know.
"""

from __future__ import annotations

import os
import sys

# Every import here is paid by every hook call: no typing, contextlib or collections at start-up
# (type checkers read a module-level TYPE_CHECKING = False like typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: command name → (module, one-line help). The module exposes ``main(argv) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "wake": ("firstmate.cli.wake", "append to, drain and acknowledge the durable wake queue"),
    "status": ("firstmate.cli.status", "show watcher health, queue depth and episode (no side effects)"),
    "crew": ("firstmate.cli.crew", "register crews and record their status lines"),
    "check": ("firstmate.cli.check", "register, list and remove state checks"),
    "watch": ("firstmate.cli.watch", "run one watcher cycle (normally started by fm arm)"),
    "arm": ("firstmate.cli.arm", "start or attach to a watcher cycle and print its reason"),
    "plugin": ("firstmate.cli.plugin", "add, remove and list harness plugins in this fm's own environment"),
    "plugins": ("firstmate.cli.plugins", "list the loaded harness plugins (for scripts: --require, --json)"),
    "migrate": ("firstmate.cli.migrate", "import an original firstmate home's queue and episode"),
    "lock": ("firstmate.cli.lock", "acquire, inspect or release the primary session lock"),
    "demo": ("firstmate.cli.demo", "run the demo of a supervised fleet in a temporary home"),
    "hook": ("firstmate.cli.hook", "the entry harness hooks run: fm hook <harness> <event>"),
    "install": ("firstmate.cli.install", "write or merge a harness's config files"),
    "uninstall": ("firstmate.cli.uninstall", "remove exactly what fm install wrote"),
    "turnend-guard": ("firstmate.cli.turnend_guard", "turn-end backstop: block or allow a turn end (payload on stdin)"),
    "guard": ("firstmate.cli.guard", "pull guard: warn when the watcher is down or wakes are queued (exit 0)"),
    "away": ("firstmate.cli.away", "away mode on/off/status and the return brief"),
    "checkpoint": ("firstmate.cli.checkpoint", "one bounded foreground supervision window: exit 0 wake, 124 quiet"),
    "host": ("firstmate.cli.host", "the opt-in supervision host: park in place of the arm while away"),
    "doctor": ("firstmate.cli.doctor", "explain what is missing or broken for this home"),
    "top": ("firstmate.cli.top", "a live view of the fleet, redrawn on change (q quits)"),
    "bridge": ("firstmate.cli.bridge", "the long-lived process an in-process harness shim talks to"),
    "fleet": ("firstmate.cli.fleet", "crews on other hosts report here through NATS JetStream (serve, join, host add)"),
    # (A layer above the command line: the MCP server, which needs firstmate[mcp].)
    "mcp": ("firstmate.mcp.command", "serve the primary's actions as MCP tools over stdio (a harness starts it)"),
}

def wants_help(argv: Sequence[str]) -> bool:
    """Whether ``-h`` or ``--help`` is among the options of *argv* (before a ``--``). Here, not
    in firstmate.cli.args, so the hand-parsed hot paths can ask without importing argparse."""
    for word in argv:
        if word == "--":
            return False
        if word in ("-h", "--help"):
            return True
    return False


def _help() -> str:
    # The grouped list lives in its own module: no command but help pays for its tables.
    from firstmate.cli.helptext import render

    return render(COMMANDS)


def _error(message: str) -> None:
    # One line, always: hostile text must not be able to forge further output lines.
    clean = " ".join(message.split())
    sys.stderr.write(f"fm: {clean}\n")


def _unknown(name: str) -> Exception:
    from firstmate.base.errors import UsageError
    from firstmate.base.suggest import did_you_mean
    from firstmate.cli.helptext import plugin_commands

    hint = did_you_mean(name, [*COMMANDS, *plugin_commands(COMMANDS)])
    return UsageError(f"unknown command {name[:40]!r}; {hint}run 'fm help' to list the commands")


def _run(argv: Sequence[str]) -> int:
    if not argv:
        from firstmate.base.exitcodes import ExitCode

        sys.stdout.write(_help() + "\n")
        return ExitCode.USAGE
    if argv[0] in ("-h", "--help") or argv == ["help"]:
        sys.stdout.write(_help() + "\n")
        return 0
    if argv[0] == "help":
        # fm help CMD [SUB]: exactly what fm CMD [SUB] --help prints.
        if argv[1] in ("help", "-h", "--help"):
            return _run(["help"])
        if argv[1] not in COMMANDS:
            from firstmate.cli.registry import plugin_command

            if plugin_command(argv[1]) is None:
                raise _unknown(argv[1])
        return _run([*argv[1:], "--help"])
    if argv[0] in ("-V", "--version"):
        from firstmate import __version__

        sys.stdout.write(f"fm {__version__}\n")
        return 0
    name, rest = argv[0], list(argv[1:])
    entry = COMMANDS.get(name)
    if entry is None:
        from firstmate.cli.registry import plugin_command

        command = plugin_command(name)
        if command is None:
            raise _unknown(name)
        return int(command(rest))
    only = CAPTAIN_ONLY.get(name)
    if only is not None and not wants_help(rest):
        what = only.get(rest[0] if rest else "", only.get("*"))
        if what is not None:
            from firstmate.base.quickgate import refuse_crew_session

            refuse_crew_session(os.environ, f"{name} {rest[0]}" if "*" not in only else name, what)
    if name in LONG_RUNNING:
        from firstmate.store.locks import prefer_portalocker

        prefer_portalocker()
    __import__(entry[0])  # not importlib.import_module: the importlib package costs a hook time
    module = sys.modules[entry[0]]
    return int(module.main(rest))


def dispatch(argv: Sequence[str]) -> int:
    try:
        return _run(argv)
    except Exception as exc:
        # A command that printed its help ends there (firstmate.cli.args): exit 0.
        from firstmate.base.errors import HelpShown

        if isinstance(exc, HelpShown):
            return 0
        raise


#: What a crew's session (``FM_CREW``, ``FM_TASK_ID``) may not run: command → subcommand (``*``:
#: all of them) → what only the captain does. These consume or change the primary's own state
#: (its wakes, decisions, session lock, away mode and host); ``fm arm``, ``fm watch`` and
#: ``fm checkpoint`` refuse with their own ``watcher: FAILED`` line, and the bridge and the hooks
#: stand aside in a crew's session. Looked up before the command's module is imported.
CAPTAIN_ONLY: dict[str, dict[str, str]] = {
    "wake": {"drain": "drains and acknowledges the wake queue",  # (wakeactor.CAPTAIN_ONLY)
             "grant": "hands wake rows to a supervision branch"},
    "lock": {"acquire": "holds the primary session lock",
             "release": "holds the primary session lock"},
    "crew": {"answer": "answers the crews' decisions"},
    "away": {"on": "turns away mode on or off", "off": "turns away mode on or off"},
    "host": {"park": "runs the supervision host", "report": "runs the supervision host",
             "enable": "configures the supervision host",
             "disable": "configures the supervision host"},
    "migrate": {"*": "imports into the wake queue"},
    "mcp": {"*": "acts on the wake queue and the crews through MCP tools"},  # (mcp.command)
}

#: Commands that run for minutes: they lock through portalocker (firstmate.store.locks), whose
#: import the short commands cannot afford.
LONG_RUNNING = frozenset({"watch", "arm", "checkpoint", "bridge", "host", "top", "mcp"})

#: Commands whose every end is one line: a stop before their own handlers exist still says so.
EARLY_STOP_LINES = {"arm": "watcher: FAILED - arm interrupted by {signal}"}


def _lenient_output() -> None:
    # Arguments that are not UTF-8 arrive as surrogate escapes; a strict stream (as
    # PYTHONIOENCODING=utf-8 makes it) would turn echoing one back into an internal error after
    # the command did its work. They go out as the bytes they came in as.
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict":
            try:  # noqa: SIM105 - contextlib costs every hook an import
                stream.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):
                pass


#: Set by a command that finished with nothing left for the interpreter's teardown to do.
_leave_at_once = False


def leave_at_once() -> None:
    """Let the process leave as soon as the command returns, without the interpreter's teardown.

    For a command whose result is durable and already written, and whose database connections
    are closed: ``fm wake append`` once its row is committed and its number printed, and the
    standard-library paths of ``fm wake drain`` (and its acknowledgement) and ``fm status`` once
    their lines are out. The interpreter's teardown (finalising every module and freeing every
    object, a drain's thousands of rows included) costs such a process a few milliseconds and
    does nothing it needs. Honoured only when :func:`main` runs as the process's own command (no
    *argv*), never for a caller in the same process.
    """
    global _leave_at_once
    _leave_at_once = True


def _leave(code: int) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            return code  # the ordinary exit reports nothing more for a stream that is gone
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    _lenient_output()
    args = list(sys.argv[1:] if argv is None else argv)
    early = EARLY_STOP_LINES.get(args[0]) if args and argv is None else None
    if early is not None:
        from firstmate.base.stopsignals import early as stop_early

        stop_early(early)
    try:
        code = dispatch(args)
        return _leave(code) if _leave_at_once and argv is None else code
    except (Exception, KeyboardInterrupt) as exc:
        # The error types are imported only when something failed: a hook's quiet exit never
        # pays for them.
        import contextlib

        from firstmate.base.errors import FirstmateError
        from firstmate.base.exitcodes import ExitCode

        if isinstance(exc, FirstmateError):
            _error(exc.message)
            return int(exc.exit_code)
        if isinstance(exc, KeyboardInterrupt):
            return ExitCode.SIGINT
        if isinstance(exc, BrokenPipeError):
            # The reader went away (e.g. `fm wake drain | head`); nothing useful to report.
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
            return ExitCode.FAILED
        if isinstance(exc, OSError) and not os.environ.get("FM_DEBUG"):
            # The machine said no (no space, no permission, a path that is not a directory):
            # one line naming the file, the state exit status.
            what = f"cannot use {exc.filename}" if exc.filename else "the system refused"
            _error(f"{what}: {exc.strerror or exc}; free space or fix the path and its "
                   "permissions, then retry")
            return ExitCode.STATE
        if os.environ.get("FM_DEBUG"):
            raise
        _error(f"internal error: {type(exc).__name__}: {exc}; rerun with FM_DEBUG=1 for a traceback and report it")
        return ExitCode.FAILED
