"""``fm wake …``: append to, drain, acknowledge, grant and query the durable wake queue.

``fm wake append`` and ``fm wake drain`` run on hot paths, so this module imports nothing at the
top beyond the standard library basics, append parses its three arguments by hand (no argparse),
and a plain drain or acknowledgement as main runs attrs-free (:mod:`firstmate.fast.drainpath`),
falling back to the store's path whenever that one is not sure.
"""

from __future__ import annotations

import os
import sys

from firstmate.cli.main import wants_help

# Not typing / collections.abc at run time: the append path pays for every import here (type
# checkers read a module-level TYPE_CHECKING = False like typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Mapping, Sequence
    from typing import TypeVar

    from firstmate.cli.args import Parser
    from firstmate.store.database import Store
    from firstmate.store.drain import AckResult, DrainResult
    from firstmate.store.home import Home

    Done = TypeVar("Done")

    DrainContextHook = Callable[[Home, DrainResult], Sequence[str]]

#: What a drain prints after its rows: each hook gets the home and the drain result and returns
#: lines for stdout (they land under ``"context"`` with ``--json``). A hook that fails is
#: reported on stderr and never changes the drain's outcome. The core's crew-status presentation
#: (firstmate.app.drain_context) runs first, under its own lock, and is not one of these hooks.
DRAIN_CONTEXT: list[DrainContextHook] = []


def __getattr__(name: str) -> object:
    # The DrainContextHook alias is built on first use, so importing this module for an append
    # does not import collections.abc.
    if name == "DrainContextHook":
        from collections.abc import Callable, Sequence

        from firstmate.store.drain import DrainResult
        from firstmate.store.home import Home

        alias = Callable[[Home, DrainResult], Sequence[str]]
        globals()[name] = alias
        return alias
    raise AttributeError(name)


def _usage(message: str) -> Exception:
    from firstmate.base.errors import UsageError

    return UsageError(message)


def parser() -> Parser:
    """The command line as help and errors describe it. ``append`` is parsed by hand (a hot
    path) and builds this only for ``--help`` or a wrong command line."""
    from firstmate.cli.args import Parser

    parser = Parser("fm wake", "The durable wake queue: append rows, drain and acknowledge them, "
                    "hand rows to a supervision branch, inspect it.")
    append = parser.add_command("append", "queue one wake row, ring the watcher's doorbell and "
                                "print the row's sequence number")
    append.add_argument("kind", metavar="KIND", help="signal, stale, check or heartbeat")
    append.add_argument("key", metavar="KEY", help="what the row is about (not empty); a drain "
                        "shows one row per kind and key")
    append.add_argument("payload", metavar="PAYLOAD", help="the reason line")
    drain = parser.add_command("drain", "present this actor's rows (claiming them) and print the "
                               "acknowledgement to run after handling them; with --ack-through, "
                               "acknowledge")
    drain.add_argument("--actor", metavar="main|branch",
                       help="whose rows (default: $FM_SUPERVISION_ACTOR, else main)")
    drain.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    drain.add_argument("--ack-through", metavar="SEQ",
                       help="acknowledge: delete this actor's presented rows up to SEQ")
    drain.add_argument("--recovery-generation", metavar="GEN",
                       help="with --ack-through: the episode generation the drain named; it is "
                            "retired when no rows remain")
    grant = parser.add_command("grant", "supervision-branch grants: reserve rows for one live "
                               "branch process")
    activate = grant.add_command("activate", "bind a fresh grant to the live process PID under "
                                 "generation GEN")
    activate.add_argument("pid", metavar="PID", help="the branch process")
    activate.add_argument("generation", metavar="GEN", help="the grant's generation")
    publish = grant.add_command("publish", "reserve the listed rows for the grant of GEN")
    publish.add_argument("generation", metavar="GEN", help="the grant's generation")
    publish.add_argument("seqs", nargs="+", metavar="SEQ", help="the rows' sequence numbers")
    grant.add_command("withhold", "the branch claimed nothing: rows nobody claimed surface to "
                      "main once")
    release = grant.add_command("release", "give the grant's remaining rows back (the owner "
                                "record stays)")
    release.add_argument("generation", metavar="GEN", help="the grant's generation")
    deactivate = grant.add_command("deactivate", "drop the grant and give its rows back")
    deactivate.add_argument("pid", metavar="PID", help="the branch process")
    deactivate.add_argument("generation", metavar="GEN", help="the grant's generation")
    query = parser.add_command("query", "read-only: depth, oldest row, pending counts per actor, "
                               "unusable rows, the episode and the grant")
    query.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    return parser


def _open(env: Mapping[str, str]) -> Store:
    from firstmate.store.database import open_store
    from firstmate.store.home import open_home

    return open_store(open_home(env))


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")


def _json(obj: object) -> None:
    import json

    _out(json.dumps(obj, ensure_ascii=False, sort_keys=True))


def main(argv: list[str]) -> int:
    env = os.environ
    verb, rest = (argv[0], list(argv[1:])) if argv else ("", [])
    if verb == "append" and not wants_help(rest):
        return _append(rest, env)
    if verb == "drain":
        return _drain(rest, env)
    if verb == "grant":
        return _grant(rest, env)
    if verb == "query":
        return _query(rest, env)
    parser().parse(argv)  # help, or the error naming the subcommands
    raise _usage("wake: expected append, drain, grant or query; run 'fm wake --help'")


# --- append ----------------------------------------------------------------------------------


def _append_full(root: str, kind: str, key: str, payload: str) -> int:
    """The store's own append: creates or migrates the database, and any platform's lock."""
    from pathlib import Path

    from firstmate.store.database import open_store
    from firstmate.store.home import Home
    from firstmate.store.queue import append

    db = open_store(Home(Path(root)))
    try:
        return append(db, kind, key, payload)
    finally:
        db.close()


def _append(args: list[str], env: Mapping[str, str]) -> int:
    if len(args) != 3:
        parser().commands["append"].refuse(args, "expected KIND KEY PAYLOAD")
    # The attrs-free implementation queue.append shares: validation first (nothing written on
    # bad input), then the home, the lock, one transaction and the doorbell.
    from firstmate.fast.appendpath import append

    seq = append(args[0], args[1], args[2], env, fallback=_append_full, close=True)
    # The row is committed: a caller must not append it again, so telling its number is best
    # effort and a closed or full stdout still exits 0.
    try:
        sys.stdout.write(f"{seq}\n")
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        import os

        try:  # noqa: SIM105 - nothing left for the flush at exit to fail on
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
    return _done()


def _done() -> int:
    """Exit status 0 for a command whose work is committed and whose output is written: the
    process may leave without its teardown (and without the checkpoint closing its connection
    would run, cli.main.leave_at_once)."""
    from firstmate.cli.main import leave_at_once

    leave_at_once()
    return 0


# --- drain and acknowledge -------------------------------------------------------------------


#: The drain's options as the hand parser reads them: name → takes a value.
_DRAIN_OPTIONS = {"--actor": True, "--json": False, "--ack-through": True,
                  "--recovery-generation": True}


def _quick_options(args: list[str], known: dict[str, bool]) -> dict[str, str] | None:
    """*args* as ``{"--name": value}`` when they are plainly well formed (each known option once,
    as ``--opt value`` or ``--opt=value``, no value starting with ``-``), else None: argparse
    then judges them (and says what is wrong). Keeps argparse off the drain's path."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        takes = known.get(name)
        if takes is None or name in opts or (eq and not takes):
            return None
        if takes and not eq:
            if i + 1 >= len(args):
                return None
            i += 1
            value = args[i]
        if takes and (not value or value.startswith("-")):
            return None
        opts[name] = value
        i += 1
    return opts


def _options(args: list[str], verb: str) -> dict[str, str]:
    """*verb*'s options as ``{"--name": value}`` (a switch: ``""``), only those given."""
    if verb == "drain":
        quick = _quick_options(args, _DRAIN_OPTIONS)
        if quick is not None:
            return quick
    parsed = vars(parser().commands[verb].parse(args))
    opts: dict[str, str] = {}
    for name, value in parsed.items():
        if value is not None and value is not False and name != "command":
            opts["--" + name.replace("_", "-")] = "" if value is True else str(value)
    return opts


def _drain(args: list[str], env: Mapping[str, str]) -> int:
    opts = _options(args, "drain")
    from firstmate.fast.wakeactor import resolve_actor

    actor = resolve_actor(opts.get("--actor"), env)
    as_json = "--json" in opts
    if "--ack-through" in opts or "--recovery-generation" in opts:
        return _acknowledge(opts, actor, as_json, env)
    if as_json:
        drain_json(env, actor, _write_flushed)
        return 0
    if actor == "main" and not DRAIN_CONTEXT:
        # The common drain, attrs-free; it hands over (having changed nothing) whenever the
        # state needs the full path below (see firstmate.fast.drainpath).
        from firstmate.fast import drainpath

        if drainpath.drain(env, sys.stdout, sys.stderr):
            return _done()
    from firstmate.store import drain

    db = _open(env)
    result = drain.drain(db, actor, env=env)
    if result.skipped:
        _out(result.skipped)
        return 0
    from firstmate.app import drain_context

    # The crew-status presentation holds its own bounded lock from here until commit; its
    # cursors advance only once its lines were written and flushed.
    presentation = drain_context.prepare(db.home, result.rows, env=env)
    try:
        result.emit(sys.stdout, sys.stderr, [*presentation.lines, *_context(db.home, result)])
        sys.stdout.flush()
    except BaseException:
        presentation.abandon()
        raise
    presentation.commit()
    if result.actor == "main":
        drain.follow(db, env)
    return 0


def _write_flushed(obj: dict[str, object]) -> None:
    _json(obj)
    sys.stdout.flush()


def drain_json(env: Mapping[str, str], actor: str | None,
               deliver: Callable[[dict[str, object]], None]) -> dict[str, object]:
    """What ``fm wake drain --json`` prints for *actor* (None: ``FM_SUPERVISION_ACTOR``, else
    main), handed to *deliver* to write and then returned: the drain's result with the
    crew-status context, the open decisions and the turn-end screens. The rows are claimed by
    the drain; the status lines it shows count as seen (their cursors advance) only once
    *deliver* returned, so one that raises leaves them to be shown again."""
    from firstmate.store import drain

    db = _open(env)
    result = drain.drain(db, actor, env=env)
    if result.skipped:
        skipped: dict[str, object] = {**result.to_json(), "context": [], "decisions": [],
                                      "screens": []}
        deliver(skipped)
        return skipped
    from firstmate.app import drain_context

    # The crew-status presentation holds its own bounded lock from here until commit.
    presentation = drain_context.prepare(db.home, result.rows, env=env)
    try:
        shown: dict[str, object] = {
            **result.to_json(), "context": [*presentation.context, *_context(db.home, result)],
            "decisions": presentation.decisions, "screens": presentation.screens}
        deliver(shown)
    except BaseException:
        presentation.abandon()
        raise
    presentation.commit()
    if result.actor == "main":
        drain.follow(db, env)
    return shown


def _context(home: Home, result: DrainResult) -> list[str]:
    if result.skipped or not DRAIN_CONTEXT:
        return []
    lines: list[str] = []
    for hook in list(DRAIN_CONTEXT):
        try:
            lines += [str(line) for line in hook(home, result)]
        except Exception as exc:  # a context section must never fail the drain
            _err(f"wake drain: context unavailable ({type(exc).__name__}: {exc}); the rows above are complete")
    return lines


def ack_arguments(through: str | None, generation: str | None) -> tuple[int, str]:
    """The acknowledgement's cutoff and generation from their text, or the usage error that
    names what is wrong with them (nothing is read or changed before)."""
    from firstmate.base.envnum import decimal
    from firstmate.fast.episoderow import valid_generation

    if through is None:
        raise _usage("wake drain: --recovery-generation needs --ack-through; run 'fm wake "
                     "drain --help'")
    cutoff = decimal(through)
    if cutoff is None:
        raise _usage("wake drain: invalid acknowledgement sequence (expected a decimal number "
                     "below 2^63)")
    if not generation:
        raise _usage("wake drain: acknowledgement requires its recovery generation")
    if not valid_generation(generation):
        raise _usage("wake drain: invalid recovery generation (expected [A-Za-z0-9._-]+)")
    return cutoff, generation


def acknowledge(env: Mapping[str, str], actor: str | None, through: int,
                generation: str) -> AckResult:
    """``fm wake drain --ack-through THROUGH --recovery-generation GENERATION`` for *actor*
    (None: ``FM_SUPERVISION_ACTOR``, else main) through the store, its commit tried again as
    the command does (:func:`_committed`)."""
    from firstmate.store import drain

    return _committed(lambda: drain.acknowledge(_open(env), actor, through, generation, env=env))


def _acknowledge(opts: dict[str, str], actor: str, as_json: bool, env: Mapping[str, str]) -> int:
    through, generation = ack_arguments(opts.get("--ack-through"),
                                        opts.get("--recovery-generation", ""))
    if actor == "main" and not as_json:
        from firstmate.fast import drainpath

        if _committed(lambda: drainpath.acknowledge(env, through, generation, sys.stdout,
                                                     sys.stderr)):
            return _done()
    result = acknowledge(env, actor, through, generation)
    if as_json:
        _json(result.to_json())
        return 0
    for line in result.notices:
        _err(line)
    if result.confirmation:
        _out(result.confirmation)
    return 0


def _committed(attempt: Callable[[], Done]) -> Done:
    """*attempt*'s answer; a commit the disk failed but that is known to have written nothing
    is tried again (acknowledging is idempotent), and any other failure is told as what it
    means for the rows (:func:`_ack_failed`)."""
    for tries in range(1, _ACK_ATTEMPTS + 1):
        try:
            return attempt()
        except Exception as exc:
            if getattr(exc, "settled", None) is True and tries < _ACK_ATTEMPTS:
                continue
            failure = _ack_failed(exc)
            if failure is exc:
                raise
            raise failure from exc
    raise AssertionError("unreachable: the last try returns or raises")


#: Tries of an acknowledgement whose commit the disk fails (each one known to have written
#: nothing) before the failure is reported.
_ACK_ATTEMPTS = 3


def _ack_failed(exc: Exception) -> Exception:
    """An acknowledgement's failed commit, told as what it means for the rows: not consumed,
    or (when the disk left it in doubt) perhaps consumed, and safe to run again."""
    settled = getattr(exc, "settled", None)
    if settled is None:
        return exc
    where, reason = getattr(exc, "where", "the database"), getattr(exc, "reason", "")
    from firstmate.base.errors import StateError

    if settled:
        return StateError(f"wake drain: nothing was acknowledged: committing to {where} failed "
                          f"({reason}) and wrote nothing; check the disk (dmesg) and run the "
                          "same command again")
    return StateError(f"wake drain: the acknowledgement may or may not have taken effect: "
                      f"committing to {where} failed ({reason}) after it was written; check the "
                      "disk (dmesg), then run the same command again (acknowledging rows "
                      "already consumed changes nothing)")


# --- grants ----------------------------------------------------------------------------------


def _grant(args: list[str], env: Mapping[str, str]) -> int:
    from firstmate.store import grants

    ns = parser().commands["grant"].parse(args)
    verb = ns.command
    rest = {"activate": [ns.pid, ns.generation] if verb == "activate" else [],
            "publish": [ns.generation, *ns.seqs] if verb == "publish" else [],
            "release": [ns.generation] if verb == "release" else [],
            "deactivate": [ns.pid, ns.generation] if verb == "deactivate" else []}.get(verb, [])
    db = _open(env)
    if verb == "activate":
        grant = grants.activate(db, rest[0], rest[1])
        _out(f"wake grant: activated generation {grant.generation} for pid {grant.owner_pid}")
    elif verb == "publish":
        seqs = grants.publish(db, rest[0], rest[1:])
        _out(f"wake grant: generation {rest[0]} holds row(s) {','.join(map(str, seqs))}")
    elif verb == "withhold":
        surfaced = grants.withhold(db)
        _out("wake grant: unclaimed rows will surface to main" if surfaced
             else "wake grant: no newly unclaimed rows to surface")
    elif verb == "release":
        count = grants.release(db, rest[0])
        _out(f"wake grant: released {count} row(s) of generation {rest[0]}")
    else:
        count = grants.deactivate(db, rest[0], rest[1])
        _out(f"wake grant: deactivated generation {rest[1]}; {count} row(s) returned")
    return 0


# --- query -----------------------------------------------------------------------------------


def _query(args: list[str], env: Mapping[str, str]) -> int:
    import time

    from firstmate.store import episodes, queuestatus

    opts = _options(args, "query")
    status = queuestatus.query(_open(env))
    if "--json" in opts:
        _json(status.to_json())
        return 0
    _out(f"depth: {status.depth}")
    if status.oldest is None:
        _out("oldest: none")
    else:
        age = max(0, int(time.time() - status.oldest.at))
        _out(f"oldest: {status.oldest.line()} (age {age}s)")
    _out(f"pending main: {status.pending_main}")
    _out(f"pending branch: {status.pending_branch}")
    if status.unusable:
        _out(f"unusable: {status.unusable} (a main drain retires them)")
    state = status.episode
    shown = state.token() if isinstance(state, episodes.Episode) else (
        "invalid (the next watcher start sets it aside)" if isinstance(state, episodes.Invalid) else "none")
    _out(f"episode: {shown}")
    if status.grant is not None:
        rows = status.grant.get("rows") or []
        _out(f"grant: generation {status.grant['generation']} pid {status.grant['owner_pid']} "
             f"({status.grant['owner']}), {len(rows) if isinstance(rows, list) else 0} row(s)")
    _out(f"last seq: {status.last_seq}")
    return 0
