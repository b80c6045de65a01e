"""``fm wake drain`` and its acknowledgement: the attrs-free fast path (firstmate.fast.drainpath)
against the full path, state by state.

Each scenario arranges one home, copies it, and runs the same commands on both copies: once as
``fm`` runs them (the fast path, recording whether it completed or handed over), once with the
fast path switched off (the full path). Output (stdout, stderr, exit status, byte for byte),
every table's rows and every file under ``state/crew/`` (the drain cursors above all) must be
identical, after naming each freshly minted recovery generation by its order of appearance (the
two copies mint different random ones) and a cursor's inode by the status log it points into.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from firstmate.fast import drainview
from firstmate.fast.crewview import (
    DECISIONS_FOOTER,
    EARLIER,
    HISTORICAL,
    INCOMPLETE,
    LATEST,
    UNREAD_HEADER,
)
from firstmate.fast.drainpath import PRESENTATION_LOCK
from firstmate.store import crew
from firstmate.store.home import Home
from hypothesis import given
from hypothesis import strategies as st
from wakeq_support import child_env, fm, insert_row, raw, set_episode

#: Runs ``fm`` with the fast path either in place (recording each entry's answer in a file) or
#: switched off.
RUNNER = """
import sys
from firstmate.fast import drainpath
mode, flag = sys.argv[1], sys.argv[2]
def wrap(name):
    orig = getattr(drainpath, name)
    def run(*args):
        if mode == "full":
            return False
        done = orig(*args)
        with open(flag, "a") as fh:
            fh.write(f"{name}={done}\\n")
        return done
    setattr(drainpath, name, run)
wrap("drain")
wrap("acknowledge")
from firstmate.cli.main import main
sys.exit(main(sys.argv[3:]))
"""

ACK = re.compile(r"WAKE_ACK_REQUIRED: after handling completes run fm wake drain (.*)$", re.M)
#: Names minted per run: recovery generations, and the ids of appended rows (their markers).
MINTED = re.compile(r"\b\d+\.\d+\.[0-9a-f]{8}\b|\b\d{20}-\d+-[0-9a-f]{8}\b")
#: Columns that hold the time of the run, not its outcome (a row appended during a scenario
#: is stamped with its own time on each copy).
CLOCK = {("episode", "updated_at"), ("set_aside", "at"), ("wakes", "at")}

Outputs = list[tuple[int, str, str]]


@attrs.frozen
class Arrange:
    """A step that changes the home between commands (the same on both copies)."""

    fn: Callable[[Home], None]


#: A step: the fm arguments to run given the outputs so far, or an arrangement.
Step = Callable[[Outputs], list[str]] | Arrange


def drain(_: Outputs) -> list[str]:
    return ["wake", "drain"]


def ack(index: int = -1, through: Callable[[int], int] = lambda n: n,
        generation: str | None = None) -> Callable[[Outputs], list[str]]:
    """The acknowledgement the drain at *index* printed, its cutoff changed by *through* and
    its generation replaced by *generation* when given."""

    def step(outputs: Outputs) -> list[str]:
        drains = [err for _, _, err in outputs if "WAKE_ACK_REQUIRED" in err]
        found = ACK.search(drains[index])
        assert found is not None
        args = found.group(1).split()
        args[1] = str(through(int(args[1])))
        if generation is not None:
            args[3] = generation
        return ["wake", "drain", *args]

    return step


def append(kind: str, key: str, payload: str) -> Callable[[Outputs], list[str]]:
    return lambda _: ["wake", "append", kind, key, payload]


def run(home: Home, mode: str, flag: Path, args: list[str],
        env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, mode, str(flag), *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=child_env(home, **(env or {})))
    return proc.returncode, proc.stdout, proc.stderr


def dump(home: Home) -> list[str]:
    conn = sqlite3.connect(str(home.db))
    try:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]
        lines = []
        for table in tables:
            cur = conn.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description]
            keep = [i for i, col in enumerate(cols) if (table, col) not in CLOCK]
            lines += sorted(f"{table}: {[row[i] for i in keep]!r}" for row in cur)
        return lines
    finally:
        conn.close()


def crew_files(home: Home) -> list[str]:
    """Every entry of ``state/crew/``: a symlink's target, a file's mode and bytes (a drain
    cursor's inode named when it is its status log's), a directory as such."""
    entries = []
    for path in sorted(home.crew_dir.iterdir()):
        st_ = path.lstat()
        if path.is_symlink():
            entries.append(f"{path.name} -> {os.readlink(path)}")
        elif path.is_dir():
            entries.append(f"{path.name}/")
        elif stat.S_ISFIFO(st_.st_mode):
            entries.append(f"{path.name} |")
        else:
            data = path.read_bytes()
            if path.name.endswith(crew.DRAIN_CURSOR):
                # The turn-end signature a mark covers (the copies' markers have their own
                # inodes and, once touched after the copy, their own times).
                words = data.split()
                if len(words) == 5:
                    marker = path.with_name(path.name[: -len(crew.DRAIN_CURSOR)] + crew.TURN_ENDED)
                    now = marker.exists() and b" ".join(words[2:]) == crew.marker_signature(
                        marker.lstat()).encode()
                    data = b" ".join(words[:2]) + (b" <turn now>\n" if now else b" <turn before>\n")
                log = path.with_name(path.name[: -len(crew.DRAIN_CURSOR)] + crew.STATUS)
                inode, _, rest = data.partition(b" ")
                if log.exists() and not log.is_symlink() and inode == str(log.stat().st_ino).encode():
                    data = b"<status inode> " + rest
            entries.append(f"{path.name} {oct(st_.st_mode)} {data!r}")
    return entries


def normalised(text: str) -> str:
    names: dict[str, str] = {}
    return MINTED.sub(lambda m: names.setdefault(m.group(0), f"<gen{len(names) + 1}>"), text)


@attrs.frozen
class Scenario:
    name: str
    arrange: Callable[[Home], None]
    steps: tuple[Step, ...]
    #: What the fast path answered at each drain or acknowledgement, in order.
    fast: tuple[bool, ...]
    #: The environment of every command (FM_CAPTAIN_RE ...).
    env: tuple[tuple[str, str], ...] = ()
    #: Text the commands print (stdout or stderr, on both paths): what the scenario is about.
    shows: tuple[str, ...] = ()


def nothing(_: Home) -> None:
    pass


def rows(*triples: tuple[str, str, str]) -> Callable[[Home], None]:
    def arrange(home: Home) -> None:
        for kind, key, payload in triples:
            assert fm(home, "wake", "append", kind, key, payload).returncode == 0

    return arrange


def raw_rows(count: int, episode: tuple[str, str, str] | None) -> Callable[[Home], None]:
    """*count* rows inserted behind the API's back, under *episode* (None: no episode row)."""

    def arrange(home: Home) -> None:
        for seq in range(1, count + 1):
            insert_row(home, seq, "signal", f"k{seq % 2}", f"p{seq}")
        if episode is not None:
            set_episode(home, *episode)

    return arrange


def sql(*statements: str) -> Callable[[Home], None]:
    def arrange(home: Home) -> None:
        with raw(home) as conn:
            for statement in statements:
                conn.execute(statement)

    return arrange


def both(*arrangements: Callable[[Home], None]) -> Callable[[Home], None]:
    def arrange(home: Home) -> None:
        for one in arrangements:
            one(home)

    return arrange


ONE = rows(("signal", "t1.status", "signal: t1 done"))
DUPES = rows(("signal", "t1.status", "first"), ("stale", "t2", "stale"), ("heartbeat", "a", "hb1"),
             ("signal", "t1.status", "second"), ("heartbeat", "b", "hb2"), ("check", "t1.status", "c"),
             ("signal", "t3.status", "odd\u00e9 text"))
#: DUPES in printable ASCII: the lines SQLite builds are shown as they are.
PLAIN_DUPES = rows(("signal", "t1.status", "first"), ("heartbeat", "a", "hb1"), ("stale", "t2", "s"),
                   ("signal", "t1.status", "second"), ("heartbeat", "b", "hb2"),
                   ("check", "t1.status", "c"), ("stale", "t2", "s2"))
EPISODES = [("pending", "downtime", "gen-a"), ("announced", "downtime", "gen-a"),
            ("announced", "handling", "gen-a"), ("pending", "handling", "gen-a"),
            ("acked", "downtime", "gen-a")]


def _crew(home: Home) -> None:
    (home.state / "crew").mkdir(exist_ok=True)
    (home.state / "crew" / "alpha.pane").write_text("%1\n")


T0 = 1_700_000_000.0


def crews(**logs: list[str]) -> Callable[[Home], None]:
    """Register each crew and append its status lines (stamped a second apart, in order)."""

    def arrange(home: Home) -> None:
        for name, lines in logs.items():
            crew.add(home, name, f"%{len(name)}")
            for i, line in enumerate(lines):
                crew.append_status(home, name, line, now=T0 + i)

    return arrange


def status(name: str, *lines: str, at: float = T0 + 100) -> Callable[[Home], None]:
    """More status lines for a registered crew."""

    def arrange(home: Home) -> None:
        for i, line in enumerate(lines):
            crew.append_status(home, name, line, now=at + i)

    return arrange


def crew_file(name: str, data: bytes, mode: str = "ab") -> Callable[[Home], None]:
    """Bytes written straight into ``state/crew/NAME`` (a hand-written log, a cursor)."""

    def arrange(home: Home) -> None:
        with open(home.crew_dir / name, mode) as fh:
            fh.write(data)

    return arrange


def fifo(name: str) -> Arrange:
    """``state/crew/NAME`` replaced by a FIFO (a step after the copy: copying one would wait)."""

    def arrange(home: Home) -> None:
        (home.crew_dir / name).unlink(missing_ok=True)
        os.mkfifo(home.crew_dir / name)

    return Arrange(arrange)


def symlink(name: str, target: str) -> Callable[[Home], None]:
    """``state/crew/NAME`` as a relative symlink to *target* beside it (made first)."""

    def arrange(home: Home) -> None:
        (home.crew_dir / target).write_bytes(b"1700000000.000\tdone: through a link\n")
        (home.crew_dir / name).unlink(missing_ok=True)
        os.symlink(target, home.crew_dir / name)

    return arrange


def shrink(name: str, keep: int) -> Callable[[Home], None]:
    """Cut a status log to its first *keep* bytes, in place (the same inode)."""

    def arrange(home: Home) -> None:
        path = home.crew_dir / name
        data = path.read_bytes()[:keep]
        with open(path, "r+b") as fh:
            fh.truncate(0)
            fh.write(data)

    return arrange


def turns(*names: str) -> Callable[[Home], None]:
    """A turn end of each crew (as its harness hook records one)."""

    def arrange(home: Home) -> None:
        for name in names:
            crew.mark_turn_ended(home, name, now=T0 + 50)

    return arrange


def signals(*keys: str) -> Callable[[Home], None]:
    return rows(*[("signal", key, f"signal: {key}") for key in keys])


TEAM = crews(alpha=["working: parsing", "blocked: no network", "done: parser"],
             beta=["needs-decision: key=db postgres or sqlite?", "working: docs meanwhile"])
DECISIONS = crews(alpha=["needs-decision: key=a first?", "needs-decision: [key=b] second?",
                         "needs-decision: no key at all", "answered: key=a yes",
                         "needs-decision: key=b second, reworded", "NEEDS-DECISION: KEY=c loud",
                         "needs-decision: key=a asked again", "Answered: [KEY=c] quiet",
                         "needs-decision:    ", "answered: key=zz nobody asked"])
CAPTAIN = crews(alpha=["working: a", "done: step one", "PR ready for review", "answered: key=z ok",
                       "merged into main", "shipped the docs", "working: next"],
                beta=["checks green", "working: b"])
LONG = crews(alpha=[f"needs-decision: key=k{i:02d} " + "x" * 300 for i in range(40)],
             beta=[f"done: part {i} " + "\u00e9" * 150 for i in range(60)],
             gamma=[f"blocked: {i} " + "y" * 90 for i in range(30)],
             delta=[f"working: {i} " + "z" * 200 for i in range(60)])
HOSTILE = both(crews(alpha=["working: before"]), crew_file("alpha.status", b"".join([
    b"1700000001.5\tdone: \x1b[31mred\x1b[0m and \x1b]0;title\x07 osc\n",
    b"needs-decision: key=h \xff\xfe not utf-8\n",
    "1700000002\tblocked: line\u2028separated\u2029paragraph\n".encode(),
    b"\x00\x07 bell and nul\n", b"\r\n", b"   \n", b"failed: carriage\rreturn split\n",
    "\u0661\u0662\tdone: a stamp in Arabic-Indic digits\n".encode(),
    "needs-decision: [key=\u017fix] folded key\n".encode(),
    "\u212aEY=x needs-decision: folded\n".encode(),
    "ANSWERED: key=h \u2014 dash\n".encode(),
    "1700000003.123456789\tmerged: caf\u00e9 \U0001f680\n".encode(),
    "\u0085needs-decision: key=nel after NEL\n".encode(),
    b"1700000004.0\tdone: no newline yet"])))


def _grant(home: Home) -> None:
    assert fm(home, "wake", "grant", "activate", str(os.getpid()), "grant-1").returncode == 0


SCENARIOS = [
    Scenario("empty queue, no episode", nothing, (drain, drain), (True, True),
             shows=(drainview.NOTHING,)),
    # What the episode behind a drain means, in plain words, on both paths.
    Scenario("rows a watcher start resurfaced", raw_rows(3, ("announced", "downtime", "gen-a")),
             (drain, drain, ack()), (True, True, True),
             shows=("RECOVERY: what is below waited while no watcher was running (or after a "
                    "wake that was not acknowledged), so nothing woke you for it; the oldest row "
                    "was queued at " + str(drainview.stamp(1)),)),
    Scenario("a resurface with nothing queued", both(TEAM, lambda h: set_episode(
        h, "announced", "handling", "gen-a")), (drain, ack()), (True, True),
             shows=("RECOVERY: no watcher was running for a while; nothing was queued meanwhile",
                    DECISIONS_FOOTER)),
    Scenario("a delivered wake whose rows an earlier drain took",
             lambda h: set_episode(h, "pending", "handling", "gen-a"), (drain, ack()), (True, True),
             shows=("NOTHING NEW: the wake that brought you here was already drained",
                    "WAKE ACKNOWLEDGED: no rows to consume; recovery episode gen-a closed; "
                    "nothing else is queued.\n")),
    Scenario("a watcher that stopped with nothing queued",
             lambda h: set_episode(h, "pending", "downtime", "gen-a"), (drain, ack()), (True, True),
             shows=("NOTHING QUEUED: the watcher stopped since your last acknowledgement",)),
    Scenario("empty queue, ack of a made-up generation", nothing,
             (drain, lambda _: ["wake", "drain", "--ack-through", "0", "--recovery-generation",
                                "made-up"]), (True, True),
             shows=("recovery generation made-up was never printed by a drain",)),
    Scenario("one row, drain and ack", ONE, (drain, ack()), (True, True)),
    Scenario("duplicates and heartbeats", DUPES, (drain, ack()), (True, True)),
    Scenario("duplicates and heartbeats in plain text", PLAIN_DUPES, (drain, ack()), (True, True)),
    Scenario("drain twice, then ack", DUPES, (drain, drain, ack()), (True, True, True)),
    Scenario("drain, ack, drain again: nothing left", ONE, (drain, ack(), drain, drain),
             (True, True, True, True)),
    *[Scenario(f"rows under {':'.join(ep)}", raw_rows(3, ep), (drain, ack()), (True, True))
      for ep in EPISODES],
    *[Scenario(f"no rows under {':'.join(ep)}", both(nothing, lambda h, ep=ep: set_episode(h, *ep)),
               (drain, drain), (True, True)) for ep in EPISODES],
    Scenario("episode-only ack", lambda h: set_episode(h, "pending", "downtime", "gen-a"),
             (drain, ack()), (True, True)),
    Scenario("rows without an episode row", raw_rows(2, None), (drain, ack()), (True, True)),
    Scenario("ack beyond the presented rows", ONE, (drain, ack(through=lambda n: n + 5)),
             (True, False)),
    Scenario("ack of an unknown generation", ONE, (drain, ack(generation="nobody-printed-it")),
             (True, True), shows=("(1 row(s) consumed), but recovery generation nobody-printed-it",)),
    Scenario("ack of an unknown generation below a presented row", DUPES,
             (drain, ack(through=lambda n: n - 2, generation="nobody-printed-it"), drain, ack()),
             (True, True, True, True), shows=("so the episode stays open: run fm wake drain",)),
    Scenario("ack below every presented row", ONE,
             (drain, ack(), append("signal", "t2.status", "later"), drain,
              ack(through=lambda n: n - 1)), (True, True, True, True)),
    Scenario("ack naming an older printed generation", ONE,
             (drain, ack(), append("signal", "t2.status", "later"), drain, ack(index=0)),
             (True, True, True, True)),
    Scenario("ack after the episode moved on", ONE,
             (drain, Arrange(lambda h: set_episode(h, "pending", "handling", "moved-on")), ack()),
             (True, True)),
    Scenario("rows appended between drain and ack", ONE,
             (drain, append("stale", "w1", "stale: w1"), ack(), drain, ack()),
             (True, True, True, True)),
    Scenario("text to clean: TABs, line breaks, escapes, non-ASCII", sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (1, 1, 'signal', 'a' || char(9) || 'b', 'p')",
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (2, 1, 'stale', 'k', 'x' || char(10) || 'y')",
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (3, 1, 'check', 'k' || char(27) || '[31m', 'r')",
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (4, 1, 'signal', 'caf' || char(233), 'n' || char(8232))"),
        (drain, ack()), (True, True)),
    Scenario("partial ack", DUPES, (drain, ack(through=lambda n: n - 2), ack()), (True, True, True)),
    # States the fast path hands over (nothing changed) to the full path:
    Scenario("a grant", both(ONE, _grant), (drain, ack()), (False, False)),
    Scenario("a branch-claimed row", sql(
        "INSERT INTO wakes (seq, at, kind, key, payload, claim) VALUES (7, 1, 'signal', 'b', 'p', 'branch')"),
        (drain,), (False,)),
    Scenario("an unusable row", both(ONE, sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (9, 'x', 'bogus', '', NULL)")),
        (drain, ack()), (False, True)),
    Scenario("an unusable row at acknowledgement", ONE, (drain, Arrange(sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (9, 'x', 'bogus', '', NULL)")), ack()),
        (True, False)),
    Scenario("an undecodable row", both(ONE, sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (9, 1, 'signal', 'u', CAST(x'ff41' AS TEXT))")),
        (drain, ack()), (False, True)),
    Scenario("a time that is not a number, the row otherwise usable", both(ONE, sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (9, 'soon', 'signal', 'k', 'p')")),
        (drain, ack()), (False, True)),
    Scenario("a claim naming neither actor is main's to take", sql(
        "INSERT INTO wakes (seq, at, kind, key, payload, claim) VALUES (3, 1.5, 'signal', 'k', 'p', 'x')"),
        (drain, ack()), (True, True)),
    Scenario("a key of whitespace only", sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (3, 1, 'signal', char(9), 'p')"),
        (drain,), (False,)),
    Scenario("a key of non-ASCII whitespace only", sql(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (3, 1, 'signal', char(12288), 'p')"),
        (drain,), (False,)),
    Scenario("an invalid episode", both(ONE, lambda h: set_episode(h, "bogus", "downtime", "g")),
             (drain, ack()), (False, True)),
    # Registered crews: the fast path presents their status itself.
    Scenario("a crew registered with nothing else", both(ONE, _crew), (drain, ack()), (True, True)),
    Scenario("crews with status lines", both(TEAM, signals("alpha.status")), (drain, ack()),
             (True, True), shows=(EARLIER + "alpha.status: blocked: no network",
                                  LATEST + "alpha.status: done: parser", UNREAD_HEADER,
                                  "beta [key=db] needs-decision: postgres or sqlite?")),
    Scenario("crews and no rows", TEAM, (drain, drain), (True, True),
             shows=(UNREAD_HEADER, DECISIONS_FOOTER)),
    Scenario("crews under an open episode, no rows",
             both(TEAM, lambda h: set_episode(h, "pending", "downtime", "gen-a")), (drain, ack()),
             (True, True), shows=(UNREAD_HEADER,)),
    Scenario("unread lines since a cursor, then a second drain presenting nothing new",
             both(TEAM, signals("alpha.status")),
             (drain, ack(), Arrange(status("alpha", "working: more", "done: again")),
              append("signal", "alpha.status", "signal: alpha.status"), drain, drain, ack()),
             (True, True, True, True, True),
             shows=("alpha working: more\n", LATEST + "alpha.status: done: again")),
    Scenario("a cursor of another inode", both(TEAM, crew_file("alpha.drain-cursor", b"1 40\n", "wb"),
                                               signals("alpha.status")), (drain, drain), (True, True),
             shows=("alpha working: parsing",)),
    Scenario("a cursor that is not one", both(TEAM, crew_file("beta.drain-cursor", b"junk\xff", "wb")),
             (drain, drain), (True, True), shows=("beta working: docs meanwhile",)),
    Scenario("a shrunk log", both(TEAM, signals("alpha.status")),
             (drain, Arrange(shrink("alpha.status", 20)), Arrange(status("alpha", "done: anew")),
              drain), (True, True), shows=("alpha worki\n", LATEST + "alpha.status: done: anew")),
    Scenario("decisions open, answered, re-asked, keyless", both(DECISIONS, signals("alpha.status")),
             (drain, ack(), drain), (True, True, True),
             shows=("alpha [key=line3] needs-decision: no key at all\n"
                    "alpha [key=b] needs-decision: second, reworded\n"
                    "alpha [key=a] needs-decision: asked again\n"
                    "alpha [key=line9] needs-decision:\n",)),
    # A registered crew's turn end is shown with its screen, read by the full path (here: no
    # tmux server, so one line says so).
    Scenario("turn-end rows with and without a status row of the same crew",
             both(TEAM, crews(gamma=[]), crews(delta=["working: d"]),
                  signals("alpha.turn-ended", "alpha.status", "beta.turn-ended", "gamma.turn-ended",
                          "delta.turn-ended", "ghost.status", "ghost.turn-ended", "alpha.status")),
             (drain,), (False,),
             shows=(LATEST + "beta.status: working: docs meanwhile" + HISTORICAL,
                    LATEST + "gamma.turn-ended: (no status line reported)" + HISTORICAL)),
    Scenario("captain-relevant earlier lines", both(CAPTAIN, signals("alpha.status", "beta.status")),
             (drain,), (True,), shows=(EARLIER + "alpha.status: PR ready for review",
                                       EARLIER + "beta.status: checks green")),
    Scenario("a custom captain pattern", both(CAPTAIN, signals("alpha.status", "beta.status")),
             (drain,), (True,), env=(("FM_CAPTAIN_RE", "shipped|WORKING"),),
             shows=(EARLIER + "alpha.status: shipped the docs", "alpha merged into main")),
    Scenario("an invalid captain pattern", both(CAPTAIN, signals("alpha.status")), (drain,), (True,),
             env=(("FM_CAPTAIN_RE", "(unclosed"),), shows=(EARLIER + "alpha.status: done: step one",)),
    Scenario("byte caps: many long lines", both(LONG, signals("alpha.status", "beta.status",
                                                                "gamma.turn-ended")),
             (drain, drain), (False, False),
             shows=("wake annotation: 112 more omitted (byte cap)", "more omitted (byte cap)\n"
                    "OPEN DECISIONS (", "OPEN DECISIONS: 22 more omitted (byte cap)")),
    Scenario("hostile text", both(HOSTILE, signals("alpha.status")), (drain, drain), (True, True),
             shows=("alpha [key=\u017fix] needs-decision: folded key", "[key=nel] needs-decision",
                    "merged: caf\u00e9 \U0001f680", "alpha bell and nul")),
    Scenario("a crew with no status file", both(TEAM, crews(gamma=[]),
                                                signals("gamma.status", "gamma.turn-ended")),
             (drain,), (False,), shows=(LATEST + "gamma.turn-ended: (no status line reported)\n",
                                        "SCREEN gamma (pane %5): not read: ")),
    Scenario("a turn end of a crew not registered stays on the fast path",
             both(TEAM, signals("ghost.turn-ended", "alpha.status")), (drain, ack()), (True, True),
             shows=("  #1 signal: ghost.turn-ended\n",)),
    Scenario("a turn-end key on a row of another kind stays on the fast path",
             both(TEAM, rows(("stale", "alpha.turn-ended", "stale: alpha"))), (drain,), (True,)),
    Scenario("a dotted crew name", both(crews(**{"a.b": ["done: dotted"], "a": ["working: a"]}),
                                        signals("a.b.status", "a.status")), (drain,), (True,),
             shows=(LATEST + "a.b.status: done: dotted", LATEST + "a.status: working: a")),
    Scenario("turn ends shown with the crews' lines, then a later one and more lines",
             both(TEAM, turns("alpha", "beta"), signals("alpha.status")),
             (drain, Arrange(turns("alpha")), drain, Arrange(status("beta", "done: more")), drain,
              drain), (True, True, True, True), shows=("beta done: more\n",)),
    Scenario("a turn end with no line of the crew's own to show",
             both(crews(alpha=["answered: key=q fine"]), turns("alpha")), (drain, drain),
             (True, True)),
    # Crew files the full path reads another way: the fast path hands over, changing nothing.
    Scenario("a symlinked status log", both(TEAM, symlink("alpha.status", "elsewhere"),
                                            signals("alpha.status")), (drain, ack()), (True, True),
             shows=(INCOMPLETE,)),
    Scenario("a symlinked drain cursor", both(TEAM, symlink("beta.drain-cursor", "elsewhere")),
             (drain, drain), (True, True), shows=(INCOMPLETE,)),
    Scenario("a symlinked registration", both(TEAM, symlink("gamma.pane", "elsewhere")),
             (drain,), (True,), shows=(INCOMPLETE,)),
    Scenario("a status log that is a directory",
             both(TEAM, crews(gamma=[]), lambda h: (h.crew_dir / "gamma.status").mkdir()),
             (drain,), (True,), shows=(INCOMPLETE,)),
    Scenario("a status log that is a FIFO", both(TEAM, signals("alpha.status")),
             (fifo("alpha.status"), drain, drain),
             (True, True), shows=(INCOMPLETE,)),
    Scenario("a drain cursor that is a FIFO",
             both(TEAM, signals("beta.status")),
             (fifo("beta.drain-cursor"), drain),
             (True,), shows=(INCOMPLETE,)),
    Scenario("a registration that is a directory",
             both(TEAM, lambda h: (h.crew_dir / "gamma.pane").mkdir()), (drain,), (True,),
             shows=(INCOMPLETE,)),
    Scenario("a registration whose name is not a crew's (the full path skips it)",
             both(TEAM, crew_file(".hidden.pane", b"%9\n"), signals("alpha.status")),
             (drain, drain), (True, True), shows=(EARLIER + "alpha.status: blocked: no network",)),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_fast_and_full_paths_agree(scenario: Scenario, fm_home: Home, tmp_path: Path) -> None:
    with raw(fm_home):
        pass  # the database exists at the current schema
    scenario.arrange(fm_home)
    homes = {}
    for mode in ("fast", "full"):
        root = tmp_path / mode / "home"
        shutil.copytree(fm_home.root, root, symlinks=True)
        homes[mode] = Home(root)
    transcripts: dict[str, Outputs] = {"fast": [], "full": []}
    for mode, home in homes.items():
        flag = tmp_path / f"{mode}.flag"
        for step in scenario.steps:
            if isinstance(step, Arrange):
                step.fn(home)
            else:
                transcripts[mode].append(run(home, mode, flag, step(transcripts[mode]),
                                             dict(scenario.env)))
    fast_flag = tmp_path / "fast.flag"
    answered = fast_flag.read_text().split() if fast_flag.exists() else []
    assert tuple(word.endswith("=True") for word in answered) == scenario.fast, answered
    assert not (tmp_path / "full.flag").exists()
    sides = {mode: normalised("\n".join([repr(transcripts[mode]), *dump(home), *crew_files(home)]))
             for mode, home in homes.items()}
    assert sides["fast"].splitlines() == sides["full"].splitlines()
    # Every scenario did something to compare: a drain printed or exited.
    assert transcripts["fast"]
    printed = "".join(out + err for _, out, err in transcripts["fast"])
    assert [text for text in scenario.shows if text not in printed] == []


#: Never on the drain's or the acknowledgement's path (the project's classes, the heavy imports).
FORBIDDEN = ("attr", "attrs", "psutil", "pluggy", "argparse", "portalocker", "importlib.metadata")


def imported(home: Home, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "firstmate", *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=child_env(home))
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    return proc, names


def test_drain_and_ack_of_a_thousand_rows_import_no_attrs(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "heartbeat", "setup", "hb").returncode == 0
    with raw(fm_home) as conn:
        conn.executemany("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, 1, 'signal', ?, ?)",
                         [(seq, f"crew{seq % 40}.status", f"signal: {seq}") for seq in range(2, 1202)])
    drained, names = imported(fm_home, "wake", "drain")
    assert drained.returncode == 0, drained.stderr
    assert "firstmate.fast.drainpath" in names  # the measurement saw the path
    assert sorted(n for n in FORBIDDEN if n in names) == []
    assert "re" not in names and "firstmate.fast.crewview" not in names  # no crews: not needed
    assert len(drained.stdout.splitlines()) == 43  # 40 keys and the heartbeat, two headers
    found = ACK.search(drained.stderr)
    assert found is not None and found.group(1).startswith("--ack-through 1201 ")
    acked, names = imported(fm_home, "wake", "drain", *found.group(1).split())
    assert acked.returncode == 0, acked.stderr
    assert "firstmate.fast.drainpath" in names
    assert sorted(n for n in FORBIDDEN if n in names) == []
    with raw(fm_home) as conn:
        assert conn.execute("SELECT count(*) FROM wakes").fetchone() == (0,)
        assert conn.execute("SELECT status FROM episode").fetchone() == ("acked",)


def test_a_drain_presenting_crews_imports_no_attrs_and_no_re(fm_home: Home) -> None:
    crews(**{f"crew{i}": ["working: on it", "done: part one", f"needs-decision: key=k{i} which way?",
                          "answered: key=zz fine", "blocked: caf\u00e9 \u2014 waiting"]
             for i in range(5)})(fm_home)
    with raw(fm_home) as conn:
        conn.executemany("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, 1, 'signal', ?, ?)",
                         [(seq, f"crew{seq % 7}.status", f"signal: {seq}") for seq in range(1, 1201)])
    drained, names = imported(fm_home, "wake", "drain")
    assert drained.returncode == 0, drained.stderr
    assert "firstmate.fast.crewview" in names  # the fast path presented them
    assert sorted(n for n in FORBIDDEN if n in names) == []
    # Printable text in any script is judged without the patterns.
    assert "re" not in names
    assert "crew4 [key=k4] needs-decision: which way?" in drained.stdout.splitlines()
    assert LATEST + "crew0.status: blocked: caf\u00e9 \u2014 waiting" in drained.stdout.splitlines()
    assert all((fm_home.crew_dir / f"crew{i}.drain-cursor").exists() for i in range(5))


def test_rows_presentation_and_ack_line_keep_their_order_across_the_streams(
        fm_home: Home, tmp_path: Path) -> None:
    # As a terminal shows them (one stream): the rows' section, the presentation, then the
    # acknowledgement line last, on both paths.
    both(TEAM, signals("alpha.status", "beta.status"))(fm_home)
    merged = {}
    for mode in ("fast", "full"):
        home = Home(tmp_path / mode / "home")
        shutil.copytree(fm_home.root, home.root, symlinks=True)
        proc = subprocess.run([sys.executable, "-c", RUNNER, mode, str(tmp_path / f"{mode}.flag"),
                               "wake", "drain"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=120, check=False, env=child_env(home))
        assert proc.returncode == 0, proc.stdout
        merged[mode] = normalised(proc.stdout).splitlines()
    assert (tmp_path / "fast.flag").read_text() == "drain=True\n"
    assert merged["fast"] == merged["full"]
    assert [line.split(" (")[0].split(":")[0] for line in merged["fast"]][:4] == [
        "SIGNALS", "  #1 signal", "  #2 signal", "wake annotation"]
    assert merged["fast"][-1] == ("WAKE_ACK_REQUIRED: after handling completes run fm wake drain "
                                  "--ack-through 2 --recovery-generation <gen1>")


FIELD = st.text(st.sampled_from("ab \t\n\r\x1b[\x00\x7f\u00e9\u2028\x85"), max_size=8)
KIND = st.sampled_from(["signal", "stale", "check", "heartbeat"])


@given(st.lists(st.tuples(st.integers(1, 2**63 - 1), KIND, FIELD, FIELD), max_size=6))
def test_rows_text_is_each_sections_header_and_its_rows_lines(
        rows: list[tuple[int, str, str, str]]) -> None:
    expected = "".join(drainview.header(kind, len(group)) + "\n"
                       + "".join(drainview.line(*row) + "\n" for row in group)
                       for kind, group in drainview.sections(rows))
    assert "".join(drainview.pieces(rows)) == expected
    # Every row is shown once, in its kind's section, in the order given; sections in order.
    shown = [row for _kind, group in drainview.sections(rows) for row in group]
    assert sorted(shown) == sorted(rows)
    order = [drainview.ORDER.index(kind) for kind, _group in drainview.sections(rows)]
    assert order == sorted(set(order))
    text = "".join(drainview.pieces(rows))
    assert "\t" not in text and "\x1b" not in text and "\r" not in text
    assert text.count("\n") == len(rows) + len(drainview.sections(rows))


def test_a_row_names_its_key_only_when_its_payload_does_not() -> None:
    assert drainview.line(3, "signal", "alpha.status", "signal: alpha.status: done: x") == (
        "  #3 signal: alpha.status: done: x")
    assert drainview.line(4, "signal", "t1.status", "first") == "  #4 [t1.status] first"
    assert drainview.line(5, "stale", "a\tb", "x\ny \x1b[31mred") == "  #5 [a b] x y red"


def test_pieces_split_at_row_boundaries_and_clean_only_the_piece_that_needs_it() -> None:
    per = drainview.PIECE_ROWS
    rows = [(seq, "signal", f"k{seq}.status", f"signal: row {seq}") for seq in range(1, 2 * per + 6)]
    rows[per + 3] = (per + 4, "signal", "hostile\tkey", "line\nbreak \x1b[31m")
    pieces = list(drainview.pieces(rows))
    assert [piece.count("\n") for piece in pieces] == [1, per, per, 5]
    assert pieces[0] == drainview.header("signal", len(rows)) + "\n"
    assert "".join(pieces[1:]) == "".join(drainview.line(*row) + "\n" for row in rows)
    assert pieces[2].splitlines()[3] == "  #1004 [hostile key] line break "
    assert "\x1b" not in pieces[2] and pieces[1] == "".join(f"  #{s} [{y}] {p}\n"
                                                           for s, _k, y, p in rows[:per])


def test_fast_path_locks_name_their_holder_and_refuse_a_second_taker(fm_home: Home) -> None:
    from firstmate.base import ownerlock
    from firstmate.store.locks import FileLock

    path = str(fm_home.lock_path("queue"))
    fd = ownerlock.try_acquire(path, "queue", str(fm_home.root))
    assert fd is not None
    try:
        holder = FileLock(fm_home.lock_path("queue"), role="queue", home=fm_home.root).holder()
        assert holder is not None and holder.verified and holder.pid == os.getpid()
        assert holder.role == "queue"
        assert ownerlock.try_acquire(path, "queue", str(fm_home.root)) is None
        assert ownerlock.try_acquire(path, "queue", str(fm_home.root), 0.05) is None
    finally:
        ownerlock.release(fd)
    again = ownerlock.try_acquire(path, "queue", str(fm_home.root), 0.05)
    assert again is not None
    ownerlock.release(again)
    assert FileLock(fm_home.lock_path("queue"), role="queue", home=fm_home.root).holder() is None


def test_a_held_presentation_lock_hands_the_drain_to_the_full_path(fm_home: Home, tmp_path: Path) -> None:
    from firstmate.store.locks import FileLock

    ONE(fm_home)
    lock = FileLock(fm_home.lock_path(PRESENTATION_LOCK), role=PRESENTATION_LOCK, home=fm_home.root)
    lock.acquire(0)
    try:
        flag = tmp_path / "flag"
        proc = subprocess.run([sys.executable, "-c", RUNNER, "fast", str(flag), "wake", "drain"],
                              capture_output=True, text=True, timeout=120, check=False,
                              env=child_env(fm_home, FM_STATUS_PRESENTATION_LOCK_TIMEOUT="1"))
    finally:
        lock.release()
    assert proc.returncode == 0, proc.stderr
    assert flag.read_text() == "drain=False\n"
    assert proc.stdout.splitlines() == [
        drainview.header("signal", 1), "  #1 [t1.status] signal: t1 done",
        f"STATUS PRESENTATION SKIPPED: lock remains held by live pid {os.getpid()} after 1s; "
        "retry on the next drain."]
    assert "WAKE_ACK_REQUIRED" in proc.stderr


def test_the_fast_path_names_what_the_store_names() -> None:
    from firstmate.app import drain_context
    from firstmate.fast import drainpath
    from firstmate.store import crew

    assert drainpath.PRESENTATION_LOCK == drain_context.LOCK_NAME
    assert drainpath.CREW_PANE == crew.PANE


def test_drain_and_ack_as_commands_print_everything_and_leave_the_database_file_whole(
        fm_home: Home, tmp_path: Path) -> None:
    # As the harness runs them (the process leaves without its teardown once its lines are
    # out): every line arrives, in order, and the closed connection checkpointed, so the
    # database file alone holds the outcome and no write-ahead log is left behind.
    for key in ("a", "b", "a"):
        assert fm(fm_home, "wake", "append", "signal", key, f"signal: {key}").returncode == 0
    drained = fm(fm_home, "wake", "drain")
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.splitlines() == [drainview.header("signal", 2), "  #3 signal: a",
                                           "  #2 signal: b"]
    found = ACK.search(drained.stderr)
    assert found is not None, drained.stderr
    wal = Path(f"{fm_home.db}-wal")
    assert not wal.exists()
    acked = fm(fm_home, "wake", "drain", *found.group(1).split())
    generation = found.group(1).split()[3]
    assert (acked.returncode, acked.stdout, acked.stderr) == (
        0, f"WAKE ACKNOWLEDGED through row 3: 3 rows consumed; recovery episode {generation} "
           "closed; nothing else is queued.\n", "")
    assert not wal.exists()
    copy = tmp_path / "copy.db"
    copy.write_bytes(fm_home.db.read_bytes())
    conn = sqlite3.connect(str(copy))
    try:
        assert conn.execute("SELECT count(*) FROM wakes").fetchone()[0] == 0
        assert conn.execute("SELECT status FROM episode WHERE id = 1").fetchone()[0] == "acked"
    finally:
        conn.close()
