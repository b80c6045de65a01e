"""``fm hook <harness> <event> [--home DIR] [--project DIR]``: the one entry every harness hook runs.

A hook runs on every turn of the harness, so this path is built to start fast and to never wedge
or break its harness:

1. The payload is read from stdin with a size cap (1 MiB) and a deadline (``FM_HOOK_STDIN_TIMEOUT``,
   2 s), so a harness that never closes stdin cannot hold us.
2. The plugin's optional ``quick_gate(event, payload, env, home)`` (in the package of the module
   its entry point names, or that package's ``gate`` submodule; the entry point is read from the
   cached index, :mod:`firstmate.base.pluginindex`) decides, with the standard library only, whether there can be anything
   to do; "no" exits 0 silently before pluggy, attrs or json are imported (docs/hooks.md,
   "The quick gate").
   A user-level hook (``--project DIR``: one entry per project in a file the harness reads
   for every project) first checks that the session runs in that project (the plugin's
   optional ``session_dirs(payload, env)``, else the current directory); any other session
   exits 0 at once, and the home is found from DIR.
3. Otherwise the payload is decoded leniently (empty, garbage, truncated or not an object →
   None), only this harness's plugin is loaded and ``firstmate_hook`` answers with the exit code
   and output. No answer (None) → exit 0, silently.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, NoReturn

    from firstmate.cli.args import Parser
    from firstmate.plugin.harness import HookOutcome

#: Payloads above this many bytes are not decoded: the hook sees None.
MAX_PAYLOAD = 1 << 20
DEFAULT_STDIN_TIMEOUT = 2.0
#: A complete-looking object followed by this much silence counts as the whole payload, for
#: harnesses that write the payload but keep stdin open.
SETTLE = 0.1
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def parser() -> Parser:
    """The command line as help and errors describe it; parsed by hand (:func:`_args`) on the
    hot path, which builds this only for ``--help`` or a wrong command line."""
    from firstmate.cli.args import Parser

    parser = Parser("fm hook", "The entry every harness hook runs (fm install writes it into the "
                    "harness's config): hands the harness's JSON payload on stdin to that "
                    "harness's plugin and answers in the harness's own terms. Never wedges or "
                    "breaks its harness: a bad payload reaches the plugin as none.")
    parser.add_argument("harness", metavar="HARNESS",
                        help="the harness whose plugin answers (fm plugins lists them)")
    parser.add_argument("event", metavar="EVENT",
                        help="the hook event in kebab case (session-start, stop, stop-failure)")
    parser.add_argument("--home", metavar="DIR",
                        help="the Firstmate home (becomes FM_HOME for this call and its children)")
    parser.add_argument("--project", metavar="DIR",
                        help="answer only for a session in this project (a user-level hook); "
                             "the home is found from it")
    return parser


def _refuse(argv: Sequence[str], message: str) -> NoReturn:
    parser().refuse(argv, message)


def _args(argv: Sequence[str]) -> tuple[str, str, str | None, str | None]:
    words = list(argv)
    options: dict[str, str | None] = {"--home": None, "--project": None}
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        if name in options:
            if "=" in word:
                value = word.split("=", 1)[1]
            elif i + 1 < len(words):
                i += 1
                value = words[i]
            else:
                _refuse(argv, f"{name} needs a directory")
            if not value:
                _refuse(argv, f"{name} needs a directory")
            options[name] = value
        elif word.startswith("-") and word != "-":
            _refuse(argv, f"unrecognized arguments: {word}")
        else:
            positional.append(word)
        i += 1
    if len(positional) != 2:
        _refuse(argv, "expected HARNESS and EVENT")
    return positional[0], positional[1], options["--home"], options["--project"]


def _timeout(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get("FM_HOOK_STDIN_TIMEOUT", ""))
    except ValueError:
        return DEFAULT_STDIN_TIMEOUT
    return value if 0 < value < 3600 else DEFAULT_STDIN_TIMEOUT


def _looks_whole(data: bytes) -> bool:
    body = data.strip()
    return body[:1] == b"{" and body[-1:] == b"}"


def read_payload(fd: int = 0, *, limit: int = MAX_PAYLOAD,
                 timeout: float = DEFAULT_STDIN_TIMEOUT) -> bytes | None:
    """The bytes on *fd* up to EOF; None when they exceed *limit*, *timeout* passes first, or the
    descriptor cannot be read. A terminal is not read at all (b"")."""
    import select
    import time

    try:
        if os.isatty(fd):
            return b""
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        settling = bool(chunks) and _looks_whole(b"".join(chunks))
        wait = min(left, SETTLE) if settling else left
        if wait <= 0:
            return None
        try:
            ready, _, _ = select.select([fd], [], [], wait)
        except (OSError, ValueError):
            return None
        if not ready:
            if settling:
                return b"".join(chunks)
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def parse_payload(data: bytes | None) -> dict[str, Any] | None:
    """The JSON object in *data*, or None for anything else (never raises)."""
    if data is None or not data.strip():
        return None
    import json

    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _disabled(harness: str, env: Mapping[str, str]) -> bool:
    return harness in {n.strip() for n in env.get("FIRSTMATE_DISABLE_PLUGINS", "").split(",")}


def _gate(harness: str) -> Any:
    """The plugin's quick-gate module (the package its entry point's module belongs to, or that
    package's ``gate`` submodule), or None."""
    try:
        # __import__, not importlib.import_module: the importlib package is not loaded yet.
        from firstmate.base.names import GATE_SUBMODULE
        from firstmate.base.pluginindex import find

        entry = find(harness)
        if entry is None:
            return None  # not installed: the full path says so
        package = entry.package
        __import__(package)
        module = sys.modules[package]
        if getattr(module, "quick_gate", None) is None:
            # A plugin whose package __init__ is empty keeps its gate in the gate submodule.
            __import__(f"{package}.{GATE_SUBMODULE}")
            module = sys.modules[f"{package}.{GATE_SUBMODULE}"]
    except Exception:
        return None  # broken: the full path decides
    return module


def _gate_says_idle(gate: Any, event: str, data: bytes | None, env: Mapping[str, str],
                    home: str) -> bool:
    """True when the plugin's quick gate is sure there is nothing to do."""
    check = getattr(gate, "quick_gate", None)
    if not callable(check):
        return False
    try:
        return check(event, data if data is not None else b"", env, home) is False
    except Exception:
        return False  # a broken gate never decides alone


def _inside(path: str, project: str) -> bool:
    here = os.path.realpath(path)
    return here == project or here.startswith(project.rstrip(os.sep) + os.sep)


def _in_project(gate: Any, project: str, data: bytes | None, env: Mapping[str, str]) -> bool:
    """Whether the session calling a user-level hook runs in *project* (its directories from
    the gate's ``session_dirs``, else the hook's current directory)."""
    dirs: list[str] = []
    reader = getattr(gate, "session_dirs", None)
    if callable(reader):
        try:
            dirs = [d for d in reader(data if data is not None else b"", env)
                    if isinstance(d, str) and d]
        except Exception:
            dirs = []
    if not dirs:
        try:
            dirs = [os.getcwd()]
        except OSError:
            return False
    real = os.path.realpath(project)
    return any(_inside(d, real) for d in dirs)


def main(argv: Sequence[str]) -> int:
    harness, event, home_arg, project_arg = _args(argv)
    env = os.environ
    if home_arg is not None:
        # Pinned by the installed command; children (an arm) inherit it too.
        env["FM_HOME"] = os.path.abspath(os.path.expanduser(home_arg))
    if not harness or not set(harness) <= _NAME_CHARS:
        from firstmate.base.errors import FirstmateError
        from firstmate.base.exitcodes import ExitCode

        raise FirstmateError(
            f"no Firstmate plugin for harness {harness[:40]!r}; harness names are lower-case "
            "words (fm plugins lists the installed ones)",
            exit_code=ExitCode.PLUGIN,
        )
    data = read_payload(0, timeout=_timeout(env))
    gate = None if _disabled(harness, env) else _gate(harness)
    project = None
    if project_arg is not None:
        project = os.path.abspath(os.path.expanduser(project_arg))
        if not _in_project(gate, project, data, env):
            return 0  # another project's session: this entry is not for it
    from firstmate.base.homeroot import find_root

    home_root = find_root(env, project, adopt=False)  # (a hook never makes a home)
    if gate is not None and _gate_says_idle(gate, event, data, env, home_root):
        return 0
    return _dispatch(harness, event, parse_payload(data), env, home_root)


def _dispatch(harness: str, event: str, payload: Mapping[str, Any] | None, env: Mapping[str, str],
              home_root: str) -> int:
    from pathlib import Path

    from firstmate.plugin.manager import load_harness
    from firstmate.store.home import Home

    host = load_harness(harness, env)
    outcome = host.hook(harness=harness, event=event, payload=payload, home=Home(Path(home_root)),
                        env=env)
    if outcome is None:
        return 0
    return emit(outcome)


def emit(outcome: HookOutcome) -> int:
    """Write a hook's outcome as the harness reads it (stdout, then stderr) and return its
    exit code."""
    if outcome.stdout:
        sys.stdout.write(outcome.stdout)
        sys.stdout.flush()
    if outcome.stderr:
        sys.stderr.write(outcome.stderr)
        sys.stderr.flush()
    return int(outcome.exit_code)
