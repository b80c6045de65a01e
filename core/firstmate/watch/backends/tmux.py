"""The default crew backend: tmux panes read with ``tmux capture-pane``.

Settings (environment): ``FM_TMUX`` the tmux binary (default ``tmux``); ``FM_TMUX_SOCKET`` a
server socket, passed as ``-S PATH`` when it contains a ``/`` and as ``-L NAME`` otherwise
(default: tmux's own choice, i.e. ``$TMUX`` or the default server); ``FM_TMUX_TIMEOUT`` seconds
any one tmux call may take (default 5; a call that overruns is killed and reads as "no pane");
``FM_BUSY_RE`` the busy marker (below).

**Busy** means positive evidence that the crew's agent is inside a turn: one of the last
:data:`BUSY_TAIL_LINES` non-blank lines of the pane matches ``FM_BUSY_RE`` (case-insensitive).
The default is the union of the installed plugins' ``HarnessInfo.busy_markers`` (the interrupt
hints each harness's TUI shows only while it works), given by the watcher that builds the
backend; with none declared, :data:`DEFAULT_BUSY_RE`, the common interrupt hints. A pane that
cannot be read is never busy: absence of evidence is not work.

**Literal arguments.** tmux parses its own command line: an argument ending in ``;`` ends a
command (tmux's separator) unless the ``;`` is escaped as ``\\;``, and some options are expanded
as formats (``#(cmd)`` runs a command, ``#{…}`` is replaced) — ``new-window`` and
``new-session``'s ``-n``, ``-s`` and ``-c`` among them (tmux 3.3a; ``-t``, ``-F`` values fm
writes itself, ``send-keys -l`` text and a new pane's command words are not expanded). Every
argument fm hands tmux goes through :func:`literal` (:meth:`TmuxBackend.command` does it), and
every expanded option value through :func:`literal_format` as well (``#`` doubled), so tmux can
only take a name, a path or a text as it is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from firstmate.base import stopsignals
from firstmate.base.envnum import env_float
from firstmate.watch.backends.tmuxcall import TmuxCall

if TYPE_CHECKING:
    from firstmate.watch.backends.panebatch import CaptureBatch

DEFAULT_BUSY_RE = r"esc to (?:interrupt|cancel)|esc interrupt|ctrl\+c to (?:interrupt|stop)"
BUSY_TAIL_LINES = 12
DEFAULT_TIMEOUT = 5.0
#: One ``list-panes -a`` line per pane (TAB-separated): its stable id and its process (pid, and
#: whether it ended in a pane kept by remain-on-exit), what changes when its visible text does
#: (the window's last activity, the pane's history size, cursor and size), then the positions
#: it may have been registered under (``session:window.pane`` by window index and by name,
#: ``session:window`` for the window's active pane). The window name comes last: it is the one
#: field that may itself hold a TAB.
LISTING_FORMAT = ("#{pane_id}\t#{pane_pid}\t#{pane_dead}\t"
                  "#{window_activity}.#{history_size}.#{cursor_x}.#{cursor_y}."
                  "#{pane_width}x#{pane_height}\t"
                  "#{window_index}\t#{pane_index}\t#{pane_active}\t#{session_name}\t#{window_name}")
#: One pane's facts, as ``display-message`` prints them for a target (:meth:`TmuxBackend.resolve`)
#: and ``new-window -P`` for the pane it made; read from the end, after the names (a window
#: name may hold a TAB or a line break).
FACT_FORMAT = "#{session_name}\t#{window_name}\t#{pane_id}\t#{pane_pid}\t#{pane_dead}"
#: What tmux says when no server listens on the socket: then no pane exists.
NO_SERVER = ("no server running", "error connecting to")
#: What tmux says when the session a window is asked for does not exist.
NO_SESSION = "can't find session"
#: Pane states :meth:`TmuxBackend.pane_state` names.
LIVE, DEAD, GONE, UNKNOWN = "live", "dead", "gone", "unknown"


def literal(arg: str) -> str:
    """*arg* as tmux's command parser passes it on unchanged: a trailing ``;`` escaped."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


#: A run of ``#`` that tmux's format expansion turns into half as many: one not followed by
#: ``[`` (a run followed by ``[`` is a style, which tmux copies as it is).
_HASHES = re.compile(r"#+(?![#\[])")


def literal_format(value: str) -> str:
    """An option value tmux expands as a format, so that it expands to *value* itself: each
    ``#`` doubled (``#(cmd)`` would run a command, ``#{…}`` be replaced), except in a run
    of them before ``[``, which tmux keeps as it is. :func:`literal` still applies on top."""
    return _HASHES.sub(lambda found: found.group(0) * 2, value)


@attrs.frozen
class PaneFact:
    """What tmux says of one pane: its stable id, its program's pid, whether that program ended
    (the pane kept by remain-on-exit), and where it is (its session's and window's names)."""

    pane: str
    pid: int
    dead: bool
    session: str = ""
    window: str = ""


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_fact(out: str) -> PaneFact | None:
    """The :data:`FACT_FORMAT` line that ends *out* as a :class:`PaneFact`; None when it is not
    one."""
    head, *tail = out.rstrip("\n").rsplit("\t", 3)
    if len(tail) != 3:
        return None
    pane, pid, dead = tail
    if not (pane[:1] == "%" and _digits(pane[1:]) and _digits(pid) and dead in ("0", "1")):
        return None
    session, _, window = head.rpartition("\n")[2].partition("\t")
    return PaneFact(pane, int(pid), dead == "1", session, window)


class PaneListing(dict[str, str]):
    """One ``list-panes -a``: {pane name: change signature} for every name a pane may be
    registered under (:attr:`ids` maps each name to the pane's id), and :attr:`facts`, each
    pane's :class:`PaneFact` by id. A pane id tmux listed twice (a window name holding a line
    break can forge one) is left out: what it is cannot be told."""

    def __init__(self) -> None:
        super().__init__()
        self.facts: dict[str, PaneFact] = {}
        self.ids: dict[str, str] = {}


def parse_listing(out: str) -> PaneListing:
    """``list-panes`` output in :data:`LISTING_FORMAT` as a :class:`PaneListing`."""
    found = PaneListing()
    twice: set[str] = set()
    for line in out.splitlines():
        parts = line.split("\t", 8)
        if len(parts) != 9:
            continue
        pane_id, pid, dead, body, index, pane, active, session, window = parts
        if not (pane_id[:1] == "%" and _digits(pane_id[1:]) and _digits(pid)
                and dead in ("0", "1") and _digits(index) and _digits(pane)):
            continue
        if pane_id in found.facts:
            twice.add(pane_id)
            continue
        found.facts[pane_id] = PaneFact(pane_id, int(pid), dead == "1", session, window)
        signature = f"{body}.{dead}"
        names = [pane_id, f"{session}:{index}.{pane}", f"{session}:{window}.{pane}"]
        if active == "1":
            names += [f"{session}:{index}", f"{session}:{window}"]
        for name in names:
            found.setdefault(name, signature)
            found.ids.setdefault(name, pane_id)
    for pane_id in twice:
        del found.facts[pane_id]
        for name in [name for name, known in found.ids.items() if known == pane_id]:
            del found.ids[name]
            found.pop(name, None)
    return found


def busy_pattern(markers: Sequence[str]) -> str:
    """One pattern matching any of *markers* (each a regex fragment; duplicates and fragments
    that do not compile are left out); :data:`DEFAULT_BUSY_RE` when none is left."""
    kept: list[str] = []
    for marker in markers:
        if marker and marker not in kept:
            try:
                re.compile(marker)
            except re.error:
                continue
            kept.append(marker)
    return "|".join(f"(?:{marker})" for marker in kept) or DEFAULT_BUSY_RE


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error:
        return re.compile(DEFAULT_BUSY_RE, re.IGNORECASE)


def parse_signatures(out: str) -> dict[str, str]:
    """``list-panes`` output in :data:`LISTING_FORMAT` as {pane name: signature} (a
    :class:`PaneListing`, which also carries each pane's facts)."""
    return parse_listing(out)


@attrs.define(eq=False)
class Listing(TmuxCall):
    """A ``list-panes`` call under way (:meth:`TmuxBackend.start_signatures`); a call answered
    "no server running" gives an empty listing (no pane exists)."""

    def result(self) -> PaneListing | None:
        """The listing, once :meth:`step` said the call is over; None when it failed."""
        if self.over and self.code != 0 and any(text in self.said for text in NO_SERVER):
            return PaneListing()
        if not (self.over and self.code == 0):
            return None
        return parse_listing(self.output.decode("utf-8", "replace"))


def run_held(argv: Sequence[str], timeout: float,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """*argv* run to its end within *timeout* seconds, its output captured; the child is
    killed on the timeout or on a stop signal's exception, and a stop that lands while it is
    started waits until it is ours to kill (never an orphan left mid-fork)."""
    with stopsignals.held():
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=None if env is None else dict(env))
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@attrs.define(eq=False)
class TmuxBackend:
    tmux: str = "tmux"
    socket: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    busy_re: re.Pattern[str] = attrs.field(factory=lambda: _compile(DEFAULT_BUSY_RE))
    name: str = "tmux"
    last_error: str | None = None
    #: The exit status of the last tmux call, None when it could not run at all (no binary, a
    #: timeout): tells "tmux said no" apart from "tmux could not be asked".
    last_exit: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], markers: Sequence[str] = ()) -> TmuxBackend:
        """The backend *env* configures; *markers* are busy-marker fragments (the plugins'),
        the default busy pattern when ``FM_BUSY_RE`` is unset. A bare binary name is looked
        up on ``PATH`` once, here, not at every call."""
        tmux = env.get("FM_TMUX", "").strip() or "tmux"
        if "/" not in tmux:
            tmux = shutil.which(tmux, path=env.get("PATH")) or tmux
        return cls(
            tmux=tmux,
            socket=env.get("FM_TMUX_SOCKET", "").strip() or None,
            timeout=env_float(env, "FM_TMUX_TIMEOUT", DEFAULT_TIMEOUT),
            busy_re=_compile(env.get("FM_BUSY_RE", "").strip() or busy_pattern(markers)),
        )

    def command(self, *args: str) -> list[str]:
        """The full argv of one tmux call against the configured server, every argument
        :func:`literal`."""
        return self.sequence(args)

    def sequence(self, *commands: Sequence[str]) -> list[str]:
        """The argv of one tmux call running *commands* in order (tmux stops at the first that
        fails), every argument :func:`literal`."""
        argv = [self.tmux]
        if self.socket:
            argv += ["-S", self.socket] if "/" in self.socket else ["-L", self.socket]
        for number, words in enumerate(commands):
            argv += [";"] if number else []
            argv += [literal(word) for word in words]
        return argv

    def run(self, *args: str) -> str | None:
        """stdout of one bounded tmux call, or None (with :attr:`last_error` saying why)."""
        return self.run_sequence(args)

    def run_sequence(self, *commands: Sequence[str]) -> str | None:
        """stdout of one bounded tmux call running *commands* (:meth:`sequence`), or None."""
        self.last_exit = None
        what = commands[0][0] if commands and commands[0] else "call"
        try:
            done = run_held(self.sequence(*commands), self.timeout)
        except FileNotFoundError:
            self.last_error = f"tmux binary {self.tmux!r} not found (set FM_TMUX)"
            return None
        except subprocess.TimeoutExpired:
            self.last_error = f"tmux {what} timed out after {self.timeout:g}s"
            return None
        except OSError as exc:
            self.last_error = f"tmux could not run: {exc.strerror}"
            return None
        self.last_exit = done.returncode
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            self.last_error = detail[0] if detail else f"tmux {what} exited {done.returncode}"
            return None
        self.last_error = None
        return done.stdout.decode("utf-8", "replace")

    def capture(self, target: str) -> str | None:
        return self.run("capture-pane", "-p", "-t", target)

    def has_pane(self, target: str) -> bool | None:
        """Whether the server has *target*, looked up exactly as :meth:`capture` looks it up:
        False when tmux answered no (no such session, window or pane, or no server running),
        None when it could not be asked (:attr:`last_error` says why)."""
        if self.capture(target) is not None:
            return True
        return None if self.last_exit is None else False

    def signatures(self) -> dict[str, str] | None:
        """Every pane's change signature, by both of its names, from one tmux call; None when
        the server cannot be asked (then every pane is captured). Equal signatures at two
        looks mean the visible text has most likely not changed: a caller that acts on "it
        did not change" confirms with :meth:`capture` first."""
        return self.listing()

    def listing(self) -> PaneListing | None:
        """Every pane of the server from one ``list-panes -a`` (:class:`PaneListing`): empty
        when no server runs (no pane exists); None when tmux cannot be asked (see
        last_error)."""
        out = self.run("list-panes", "-a", "-F", LISTING_FORMAT)
        if out is None:
            return PaneListing() if self._no_server() else None
        return parse_listing(out)

    def start_signatures(self) -> Listing | None:
        """:meth:`signatures` as a call under way, so the caller can answer something else while
        tmux works (at 500 panes the listing takes tens of milliseconds); None when tmux cannot
        be started."""
        try:
            proc = subprocess.Popen(
                self.command("list-panes", "-a", "-F", LISTING_FORMAT),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        except OSError as exc:
            self.last_error = f"tmux could not run: {exc.strerror}"
            return None
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        return Listing(proc, time.monotonic() + self.timeout)

    def start_captures(self, panes: Sequence[str]) -> CaptureBatch | None:
        """:meth:`capture` of each of *panes* (pane ids) through one tmux call, under way
        (:mod:`firstmate.watch.backends.panebatch`); None when tmux cannot be started."""
        from firstmate.watch.backends import panebatch

        return panebatch.start(self, panes)

    def busy(self, target: str) -> bool:
        content = self.capture(target)
        return content is not None and self.busy_in(content)

    def busy_in(self, content: str) -> bool:
        """Whether already-captured *content* shows the busy marker near its bottom."""
        tail: Sequence[str] = [line for line in content.splitlines() if line.strip()][-BUSY_TAIL_LINES:]
        return any(self.busy_re.search(line) for line in tail)

    def send(self, target: str, text: str) -> bool:
        """Type *text* literally into the pane and press Enter, in one tmux call; False (see
        last_error) on failure."""
        return self.run_sequence(["send-keys", "-t", target, "-l", "--", text],
                                 ["send-keys", "-t", target, "Enter"]) is not None

    # --- crew panes (fm crew add, spawn, steer, stop, list) --------------------------------

    def resolve(self, target: str) -> PaneFact | None:
        """The pane *target* names (any tmux target: ``%12``, ``session:window.pane``, ...) as
        tmux resolves it now, or None (see last_error; :attr:`last_exit` None when tmux could
        not be asked). ``display-message`` alone falls back to another pane for a target that
        names none, so a capture of the same target, which does not, goes first."""
        out = self.run_sequence(["capture-pane", "-p", "-S", "0", "-E", "0", "-t", target],
                                ["display-message", "-p", "-t", target, FACT_FORMAT])
        fact = None if out is None else parse_fact(out)
        if out is not None and fact is None:
            self.last_error = f"tmux did not describe pane {target}"
        return fact

    def capture_bound(self, pane: str, pid: int) -> str | None:
        """:meth:`capture` of the pane *pane* (an id) only while its program is still *pid*, in
        one tmux call; None when it cannot be read or runs another program."""
        out = self.run_sequence(["capture-pane", "-p", "-t", pane],
                                ["display-message", "-p", "-t", pane, "#{pane_id}\t#{pane_pid}"])
        if out is None:
            return None
        content, _, last = out.rstrip("\n").rpartition("\n")
        if last != f"{pane}\t{pid}":
            self.last_error = f"pane {pane} no longer runs the program it was registered with"
            return None
        return content + "\n"

    def pane_states(self) -> dict[str, str] | None:
        """Every pane of the server by each of its names (as :meth:`signatures` names them):
        :data:`LIVE`, or :data:`DEAD` when its program ended and the pane was kept. Empty when
        no server runs (no pane exists); None when tmux cannot be asked (see last_error)."""
        found = self.listing()
        if found is None:
            return None
        return {name: DEAD if found.facts[pane].dead else LIVE
                for name, pane in found.ids.items()}

    def pane_state(self, target: str) -> str:
        """:data:`LIVE`, :data:`DEAD`, :data:`GONE` (no such pane) or :data:`UNKNOWN` (tmux
        could not be asked)."""
        states = self.pane_states()
        if states is None:
            return UNKNOWN
        return states.get(target, GONE)

    def _no_server(self) -> bool:
        return any(text in (self.last_error or "") for text in NO_SERVER)

    def new_window(self, session: str, name: str, cwd: str,
                   argv: Sequence[str]) -> PaneFact | None:
        """Start *argv* (run directly, no shell) in a new window *name* of *session*, in *cwd*,
        creating the session (detached) when it does not exist; the new pane's facts (its id,
        ``%12``, its program's pid, the session and window names tmux gave), or None (see
        last_error). Every name and the path reach tmux literally (:func:`literal_format`). The
        window keeps its pane when the program ends (remain-on-exit), so a crew that quit still
        shows its last screen."""
        window = ("-d", "-n", literal_format(name), "-c", literal_format(cwd), "-P", "-F",
                  FACT_FORMAT, "--", *argv)
        out = self.run("new-window", "-t", f"={session}:", *window)
        if out is None and (self._no_server() or NO_SESSION in (self.last_error or "")):
            out = self.run("new-session", "-d", "-s", literal_format(session), "-x", "200",
                           "-y", "50", *window)
            if out is None and "duplicate session" in (self.last_error or ""):
                out = self.run("new-window", "-t", f"={session}:", *window)  # lost a race
        fact = None if out is None else parse_fact(out)
        if fact is None:
            if out is not None:
                self.last_error = f"tmux did not name the new pane (it printed {out[:40]!r})"
            return None
        self.run("set-option", "-w", "-t", fact.pane, "remain-on-exit", "on")
        return fact

    def kill_pane(self, target: str) -> bool:
        """End the pane and its program (its window closes with its last pane); False (see
        last_error) when it could not, a pane already gone included."""
        return self.run("kill-pane", "-t", target) is not None

    def history(self, target: str, lines: int = 10000) -> str | None:
        """The pane's last *lines* of scrollback and screen, wrapped lines joined; None when
        it cannot be read."""
        return self.run("capture-pane", "-p", "-J", "-S", f"-{max(1, lines)}", "-t", target)
