"""The tools ``fm mcp`` serves: each a thin call into the code its ``fm`` command runs, with
that command's rules, refusals and one-line errors (docs/mcp.md).

| tool | what it is | the command |
|---|---|---|
| ``fleet_status`` | watcher, queue, episode, session lock, every crew | ``fm status --json`` + ``fm crew list --json`` |
| ``wake_drain`` | present the wake: rows, unread status, decisions, the acknowledgement | ``fm wake drain --json`` |
| ``wake_ack`` | consume what that drain presented | ``fm wake drain --ack-through S --recovery-generation G --json`` |
| ``crew_list`` | every crew | ``fm crew list --json`` |
| ``crew_peek`` | a crew's screen | ``fm crew peek NAME -n N`` |
| ``crew_steer`` | type an instruction into a crew's pane | ``fm crew steer NAME TEXT`` |
| ``crew_answer`` | answer a crew's open decision | ``fm crew answer NAME --key K ANSWER [--send]`` |
| ``crew_spawn`` | start a crew | ``fm crew spawn NAME --harness H … -- TASK`` |
| ``crew_stop`` | end a crew's pane and unregister it | ``fm crew stop NAME`` |

The drain and its acknowledgement act for the actor the server's environment names, as the
command does (``FM_SUPERVISION_ACTOR``, else ``main``): the primary's session is ``main``.
Every call finds its home as ``fm`` does (``FM_HOME``, else the project's home from the
directory the server runs in).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.base.errors import FirstmateError, StateError
from firstmate.mcp.params import Param, input_schema, read
from firstmate.store.home import Home
from firstmate.watch.backends.tmux import TmuxBackend

Env = Mapping[str, str]
Handler = Callable[[Env, dict[str, Any]], dict[str, Any]]


@attrs.frozen
class Tool:
    """One tool: its name, what the model reads about it, its arguments and its handler."""

    name: str
    description: str
    params: tuple[Param, ...]
    handler: Handler
    #: Changes nothing (MCP's readOnlyHint).
    read_only: bool = False
    #: May end or remove something that cannot be had back (MCP's destructiveHint).
    destructive: bool = False
    #: Calling it again with the same arguments changes nothing more (MCP's idempotentHint).
    idempotent: bool = False

    def schema(self) -> dict[str, Any]:
        return input_schema(self.params)

    def call(self, env: Env, given: object) -> dict[str, Any]:
        """Check *given* as this tool's arguments, then run it (errors: FirstmateError)."""
        return self.handler(env, read(self.name, self.params, given))


# --- shared ------------------------------------------------------------------------------------


def _home(env: Env, *, create: bool) -> Home:
    from firstmate.store.home import open_home

    return open_home(env, create=create)


def _backend(env: Env) -> TmuxBackend:
    return TmuxBackend.from_env(env)


def _crews(env: Env) -> list[dict[str, Any]]:
    """What ``fm crew list --json`` lists: every crew, by name; none before the home exists."""
    from firstmate.app.crewops import rows
    from firstmate.store.home import resolve_root

    try:
        home = _home(env, create=False)
    except StateError:
        if os.path.isdir(resolve_root(env)):
            raise
        return []  # no home yet: nothing is registered
    now = time.time()
    return [row.as_json(now) for row in rows(home, _backend(env))]


NAME = Param("name", "string", "the crew's name (as crew_list shows it)", required=True)


# --- the fleet and the wake --------------------------------------------------------------------


def fleet_status(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.cli.status import snapshot

    found = snapshot(dict(env))
    found["crews"] = _crews(env)
    return found


def wake_drain(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.cli.wake import drain_json

    # The result is the delivery: the status lines it shows count as seen once it is handed
    # back (the rows stay claimed and queued until wake_ack).
    shown = drain_json(env, None, lambda obj: None)
    through, generation = shown.get("ack_through"), shown.get("generation")
    ack = None if through is None or generation is None else \
        {"through": through, "generation": generation}
    return {**shown, "ack": ack}


def wake_ack(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.cli.wake import ack_arguments, acknowledge

    through, generation = ack_arguments(str(args["through"]), args["generation"])
    return acknowledge(env, None, through, generation).to_json()


# --- crews -------------------------------------------------------------------------------------


def crew_list(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    return {"crews": _crews(env)}


def crew_peek(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.app.crewlook import peek
    from firstmate.watch.backends.tmux import DEAD

    shown = peek(_home(env, create=False), _backend(env), args["name"], args["lines"])
    note = (f"the harness in {shown.name}'s pane {shown.pane} has ended; this is its last screen"
            if shown.state == DEAD else None)
    return {"name": shown.name, "pane": shown.pane, "state": shown.state,
            "lines": list(shown.lines), "note": note}


def crew_steer(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.app.crewops import steer

    done = steer(_home(env, create=False), _backend(env), args["name"], args["text"])
    return {"name": done.name, "pane": done.pane, "sent": done.text}


def crew_answer(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.app.crewops import answer

    name = args["name"]
    done = answer(_home(env, create=False), _backend(env), name, args["key"], args["answer"],
                  send=args["send"])
    if done.unsent is not None:
        raise FirstmateError(f"answer recorded, but typing it into pane {done.pane} failed: "
                             f"{done.unsent}; send it to the crew yourself")
    return {"name": name, "key": done.decision.key, "answered": True, "pane": done.pane,
            "sent": done.pane is not None}


def crew_spawn(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    import shlex

    from firstmate.app.crewspawn import SpawnRequest, spawn
    from firstmate.base.errors import UsageError

    fm_argv: tuple[str, ...] = ()
    if args["fm_command"] is not None:
        try:
            fm_argv = tuple(shlex.split(args["fm_command"]))
        except ValueError as exc:
            raise UsageError(f"crew_spawn: argument 'fm_command' is not a command line ({exc})"
                             "; give the fm the crew should run") from None
        if not fm_argv:
            raise UsageError("crew_spawn: empty fm_command: give the fm the crew should run")
    request = SpawnRequest(
        name=args["name"], harness=args["harness"], task=args["task"],
        cwd=None if args["cwd"] is None else Path(args["cwd"]), worktree=args["worktree"],
        window_name=args["window_name"], session=args["session"], fm_argv=fm_argv,
        harness_args=tuple(args["harness_args"]))
    done = spawn(_home(env, create=True), request, env)
    return {"name": done.name, "harness": done.harness, "pane": done.pane,
            "session": done.session, "window": done.window, "cwd": str(done.cwd),
            "worktree": done.worktree, "notes": list(done.notes)}


def crew_stop(env: Env, args: dict[str, Any]) -> dict[str, Any]:
    from firstmate.app.crewops import stop

    done = stop(_home(env, create=False), _backend(env), args["name"])
    return {"name": done.name, "pane": done.pane, "killed": done.killed,
            "pane_log": done.pane_log}


# --- the list ----------------------------------------------------------------------------------


ACK_HOW = ("wake_ack with exactly the arguments in its `ack` field (`through`, `generation`; the "
           "same numbers as the printed `fm wake drain --ack-through SEQ --recovery-generation "
           "GEN`)")

TOOLS: tuple[Tool, ...] = (
    Tool("fleet_status",
         "Look over the whole fleet at once, changing nothing: the watcher's health (healthy, "
         "pid, beacon age), the wake queue (depth, rows pending per actor, the oldest row), the "
         "open recovery episode, the session lock, away mode, and every crew with its pane's "
         "state (live, dead: its program ended, gone, unknown: tmux could not be asked, remote), "
         "its last status line and its open decisions. Use it to get your bearings: at the "
         "start of a session, before spawning or stopping crews, when you wonder what the fleet "
         "is doing. It consumes no wake: when Firstmate wakes you, call wake_drain. Same as "
         "`fm status --json` plus `fm crew list --json`.",
         (), fleet_status, read_only=True, idempotent=True),
    Tool("wake_drain",
         "Call this first whenever Firstmate wakes you (a FIRSTMATE_OP message, a reason line "
         "such as `signal: builder.status: done: ...`, `stale: ...`, `check: ...`, "
         "`heartbeat`), and again after a wake_ack notice says so. It presents the wake rows "
         "queued for you (claiming them), what each kind means (`explain`), the crews' status "
         "lines you have not seen (`context`), the last screen lines of crews whose turn ended "
         "(`screens`) and every open decision with the command that answers it (`decisions`). "
         "Handle all of it, then call " + ACK_HOW + ". Nothing is consumed before that: an "
         "interrupted turn just drains again. `ack` is null when there is nothing to "
         "acknowledge. Same as `fm wake drain --json`.",
         (), wake_drain),
    Tool("wake_ack",
         "Acknowledge a wake once you have handled everything wake_drain presented: pass the "
         "`through` and `generation` from that drain's `ack`. It consumes only rows that drain "
         "presented to you, up to `through`; rows that arrived since wait for the next "
         "wake_drain, and the recovery episode closes once nothing remains. A `through` beyond "
         "what was presented is refused and nothing is consumed. Read `confirmation`, or the "
         "`notices` when something went otherwise than asked (a newer episode, rows left: drain "
         "again). Same as `fm wake drain --ack-through SEQ --recovery-generation GEN --json`.",
         (Param("through", "integer", "the `through` of wake_drain's `ack`: the highest row "
                "it presented (0 when only the episode needs acknowledging)", required=True,
                minimum=0),
          Param("generation", "string", "the `generation` of wake_drain's `ack`: the recovery "
                "episode it named", required=True)),
         wake_ack, idempotent=True),
    Tool("crew_list",
         "List every registered crew: its name, harness, pane and the pane's state (live, "
         "dead, gone, unknown, remote), its last status line with its age, and how many "
         "decisions it has open. Changes nothing, except that a crew registered by a position "
         "is bound to the pane there. Same as `fm crew list --json`.",
         (), crew_list, idempotent=True),
    Tool("crew_peek",
         "Read the last lines of a crew's screen (its tmux pane, scrollback included, escape "
         "sequences and controls removed): to see what a crew is doing when its status line is "
         "not enough, after a stale or turn-end wake, or before steering it. Reads only the "
         "pane the crew is bound to, running the program it was bound with; refused, nothing "
         "read, when the pane is gone or runs another program. A pane whose harness ended "
         "shows its last screen, with a note. Same as `fm crew peek NAME -n LINES`.",
         (NAME, Param("lines", "integer", "how many lines, 1 to 1000", default=20, minimum=1,
                      maximum=1000)),
         crew_peek, read_only=True, idempotent=True),
    Tool("crew_steer",
         "Tell a crew what to do next: types one instruction into its pane, then Enter. The "
         "text is typed literally as one line (line breaks become spaces, control characters "
         "are dropped, at most 16000 bytes). Refused, nothing typed, when the crew's pane is "
         "gone, its program ended, or the pane runs another program. To answer a question a "
         "crew asked with needs-decision, use crew_answer. Same as `fm crew steer NAME TEXT`.",
         (NAME, Param("text", "string", "the instruction", required=True)),
         crew_steer),
    Tool("crew_answer",
         "Answer a crew's open decision (wake_drain's `decisions`, crew_list's "
         "`open_decisions`): records `answered: key=KEY <answer>` in the crew's status log, "
         "which closes the decision, and with send=true also types that line into the crew's "
         "pane so the crew reads it (the pane is checked first, as for crew_steer: a refusal "
         "records nothing). A key that is not open is refused, naming the open keys. Same as "
         "`fm crew answer NAME --key KEY ANSWER [--send]`.",
         (NAME, Param("key", "string", "the decision's key", required=True),
          Param("answer", "string", "the answer, as the crew is to read it",
                required=True),
          Param("send", "boolean", "also type the answer into the crew's pane", default=False)),
         crew_answer),
    Tool("crew_spawn",
         "Start a new crew: harness `harness` (the name of an installed harness plugin) in a "
         "new tmux window, registered with its pane and briefed with `task` and the reporting "
         "protocol, optionally in a new git worktree of branch `worktree`. The crew then "
         "reports on its own and you are woken when it does. Returns its pane and window. Same "
         "as `fm crew spawn NAME --harness H ... -- TASK`.",
         (NAME,
          Param("harness", "string", "the harness that runs the crew: an installed harness "
                "plugin's name", required=True),
          Param("task", "string", "the crew's task: its first prompt, after its name", default=""),
          Param("cwd", "string", "the crew's directory (default: the server's); with "
                "worktree, the repository the worktree is made from"),
          Param("worktree", "string", "work in a new git worktree of this branch (made from "
                "HEAD when new) at <home>/worktrees/NAME"),
          Param("window_name", "string", "the tmux window's name (default: the crew's name)"),
          Param("session", "string", "the tmux session (default: $FM_CREW_SESSION, else "
                "firstmate)"),
          Param("harness_args", "strings", "more arguments for the harness, before the prompt",
                default=()),
          Param("fm_command", "string", "the fm the crew's hooks and brief run, as a command "
                "line (default: this installation's, by absolute path)")),
         crew_spawn),
    Tool("crew_stop",
         "Stop a crew for good: keeps its last screen and scrollback in its pane log, ends its "
         "pane (the window closes with it) and unregisters it; its status log stays. A pane "
         "that runs another program than the crew's is left alone and the crew stays "
         "registered (refused). Same as `fm crew stop NAME`.",
         (NAME,), crew_stop, destructive=True),
)

BY_NAME = {tool.name: tool for tool in TOOLS}


__all__ = ["BY_NAME", "TOOLS", "Tool"]
