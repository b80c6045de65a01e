"""``fm crew peek`` and ``fm crew attach`` as a user meets them: crews in panes of a private tmux
server (``FM_TMUX_SOCKET``, fleet_support), a terminal that is a pane of another private server
(term_support), typed into and read back. Only the pane a crew is bound to is ever read or
joined; every other one is refused in one line naming the fix."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from firstmate.store import crew
from firstmate.testing.procs import DEADLINE, eventually
from firstmate.watch.backends import screen
from firstmate.watch.backends.tmux import GONE, LIVE, UNKNOWN, TmuxBackend, literal
from fleet_support import Fleet
from term_support import PROMPT, Pane, terminal

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")

SECRET = "another-programs-secret"


def window(fleet: Fleet, name: str, script: str) -> str:
    """A window *name* of session ``fleet`` running *script* (sh); its pane's id."""
    exists = fleet.tmux("has-session", "-t", "=fleet").returncode == 0
    if exists:
        made = fleet.tmux("new-window", "-d", "-t", "=fleet:", "-n", name, "-P", "-F",
                          "#{pane_id}", "sh", "-c", script)
    else:
        made = fleet.tmux("new-session", "-d", "-s", "fleet", "-n", name, "-x", "100", "-y",
                          "30", "-P", "-F", "#{pane_id}", "sh", "-c", script)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def showing(fleet: Fleet, pane: str, text: str) -> str:
    eventually(f"pane {pane} to show {text!r}",
               lambda: text in fleet.tmux("capture-pane", "-p", "-t", pane).stdout)
    return pane


def add(fleet: Fleet, name: str, target: str) -> None:
    done = fleet.fm("crew", "add", name, "--pane", target)
    assert done.returncode == 0, done.stderr


def fm(fleet: Fleet, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """fm with no terminal on stdin and not inside tmux."""
    env = {k: v for k, v in {**fleet.env, **extra}.items() if k not in ("TMUX", "TMUX_PANE")}
    return subprocess.run([sys.executable, "-m", "firstmate", *args], cwd=fleet.tmp, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=DEADLINE * 3, check=False)


def one_line_refusal(done: subprocess.CompletedProcess[str], code: int, *parts: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == "" and done.stderr.startswith("fm: ")
    assert done.stderr.count("\n") == 1, done.stderr
    for part in parts:
        assert part in done.stderr, done.stderr


# --- peek -------------------------------------------------------------------------------------


NUMBERED = "for i in $(seq 1 40); do echo line-$i; done; "


def test_peek_prints_the_last_lines_of_the_crews_screen_cleaned(fleet: Fleet) -> None:
    # A format character (a right-to-left override, a zero-width space) on the screen would
    # make the printed line read differently from what it is.
    pane = window(fleet, "d1", NUMBERED + "printf 'tail \\342\\200\\256evil\\342\\200\\213 "
                  "end\\n'; exec sleep 100000")
    showing(fleet, pane, "tail")
    add(fleet, "d1", "fleet:d1")
    done = fm(fleet, "crew", "peek", "d1", "-n", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "line-39\nline-40\ntail evil end\n" and done.stderr == ""
    default = fm(fleet, "crew", "peek", "d1")
    assert default.stdout.splitlines() == [f"line-{i}" for i in range(22, 41)] + ["tail evil end"]
    # (the scrollback counts: the window is 30 lines high and 41 were written)
    assert fm(fleet, "crew", "peek", "d1", "--lines", "41").stdout.splitlines()[0] == "line-1"


@pytest.mark.parametrize("count", ["0", "1001", "many", "-3"])
def test_peek_takes_a_number_of_lines_from_1_to_1000(fleet: Fleet, count: str) -> None:
    done = fm(fleet, "crew", "peek", "d1", "-n", count)
    one_line_refusal(done, 2, "fm: crew peek: ", "run 'fm crew peek --help'")


def test_peek_reads_nothing_from_a_pane_that_is_not_the_crews(fleet: Fleet) -> None:
    gone = window(fleet, "d1", "exec sleep 100000")
    other = window(fleet, "d2", f"echo {SECRET}; exec sleep 100000")
    showing(fleet, other, SECRET)
    add(fleet, "d1", gone)
    fleet.tmux("kill-pane", "-t", gone)
    one_line_refusal(fm(fleet, "crew", "peek", "d1"), 1, f"crew 'd1''s pane {gone} is gone; "
                     "nothing was read - fm crew stop d1 unregisters it")
    # A crew bound to a pane id that now runs another program (a restarted server reuses ids).
    crew.add(fleet.home, "d3", other, pid=1, started=None)
    done = fm(fleet, "crew", "peek", "d3")
    one_line_refusal(done, 1, "now runs another program (pid", "not the registered 1)",
                     f"fm crew add d3 --pane {other} --replace")
    assert SECRET not in done.stderr


def test_peek_shows_a_crew_whose_harness_ended_its_last_screen(fleet: Fleet) -> None:
    pane = window(fleet, "d1", "exec sleep 100000")
    add(fleet, "d1", pane)
    fleet.tmux("set-option", "-w", "-t", pane, "remain-on-exit", "on")
    # The program waits for a line once it has spoken: tmux can drop the output of a program
    # that ends before tmux read it, and the test is about the screen, not that race.
    fleet.tmux("respawn-pane", "-k", "-t", pane, "sh", "-c", "echo last words; read line")
    eventually("the program to speak",
               lambda: "last words" in fleet.tmux("capture-pane", "-p", "-t", pane).stdout)
    fleet.tmux("send-keys", "-t", pane, "Enter")
    eventually("the program to end",
               lambda: fleet.tmux("display-message", "-p", "-t", pane,
                                "#{pane_dead}").stdout.strip() == "1")
    crew.add(fleet.home, "d1", pane, replace=True)  # (its program changed: bind it again)
    # What tmux writes on a dead pane's screen, and when, is tmux's own (3.3a may write its
    # "Pane is dead" line after it reports the pane dead, scrolling the screen by a line): the
    # peek is asked until the program's last words are in it, and it must never fail meanwhile.

    def peeked() -> subprocess.CompletedProcess[str] | None:
        done = fm(fleet, "crew", "peek", "d1", "-n", "40")
        assert done.returncode == 0, done.stderr
        return done if "last words" in done.stdout else None

    done = eventually("the peek to show the program's last words", peeked)
    assert done.stderr == f"crew: note: the harness in d1's pane {pane} has ended; this is its " \
                          "last screen\n"


def test_peek_binds_a_registration_by_position_first(fleet: Fleet) -> None:
    pane = window(fleet, "d1", "echo hello-d1; exec sleep 100000")
    showing(fleet, pane, "hello-d1")
    crew.add(fleet.home, "d1", "fleet:d1")  # by position, as written before panes were bound
    done = fm(fleet, "crew", "peek", "d1")
    assert done.returncode == 0 and "hello-d1" in done.stdout, done.stderr
    assert crew.get(fleet.home, "d1").pane == pane


def test_the_screen_reader_reads_only_the_bound_pane(fleet: Fleet) -> None:
    """The helper a drain and fm top share: one tmux call reads and checks the pane."""
    pane = window(fleet, "d1", "printf '%0500d\\n' 7; echo second; exec sleep 100000")
    showing(fleet, pane, "second")
    add(fleet, "d1", pane)
    backend = fleet.backend()
    member = crew.get(fleet.home, "d1")
    got = screen.tail(backend, member, 2, width=50)
    assert (got.state, got.read) == (LIVE, True)
    assert got.lines == ("0" * 49 + "…", "second")  # (a wrapped row of 100 zeros, cut)
    assert len(screen.tail(backend, member, 10**9).lines) <= screen.MAX_LINES
    unbound = crew.Crew("d9", "fleet:d1", 0.0)
    assert screen.tail(backend, unbound, 5) == screen.Tail("d9", "fleet:d1", GONE, why=(
        "is a position no pane is bound to yet (fm crew list binds it)"))
    other = crew.Crew("d1", pane, 0.0, pid=1)
    assert screen.tail(backend, other, 5).replaced and not screen.tail(backend, other, 5).lines
    broken = TmuxBackend.from_env({**fleet.env, "FM_TMUX": str(fleet.tmp / "no-tmux")})
    assert screen.tail(broken, member, 5).state == UNKNOWN
    fleet.tmux("set-option", "-w", "-t", pane, "remain-on-exit", "on")
    fleet.tmux("kill-pane", "-t", pane)
    assert screen.tail(backend, member, 5).state == GONE


# --- attach -----------------------------------------------------------------------------------


@pytest.fixture
def desk(fleet: Fleet) -> Iterator[Pane]:
    """The user's terminal: a shell in a pane of another private tmux server, outside tmux as
    far as that shell knows (no TMUX), with the fleet's FM_HOME and FM_TMUX_SOCKET."""
    keep = ("PATH", "PYTHONPATH", "FM_HOME", "FM_TMUX_SOCKET", "FIRSTMATE_KEYS_DIR")
    env = {k: fleet.env[k] for k in keep if k in fleet.env}
    yield from terminal({**env, "HOME": str(fleet.tmp)}, width=100, height=30, prefix="fmdesk")


def fm_line(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "firstmate", *args])


def clients(fleet: Fleet) -> list[str]:
    """The fleet server's clients, as ``session pane``."""
    out = fleet.tmux("list-clients", "-F", "#{session_name} #{pane_id}").stdout
    return [line for line in out.splitlines() if line]


def test_attach_from_a_terminal_outside_tmux_opens_the_crews_pane(fleet: Fleet,
                                                                  desk: Pane) -> None:
    window(fleet, "d1", "exec sleep 100000")
    d2 = showing(fleet, window(fleet, "d2", "echo this-is-d2; exec sleep 100000"), "this-is-d2")
    add(fleet, "d2", "fleet:d2")
    desk.type(f"{fm_line('crew', 'attach', 'd2')}; echo ATTACH-ENDED $?")
    eventually("a client of the crews' server on d2's pane",
               lambda: clients(fleet) == [f"fleet {d2}"] or None)
    desk.wait_for(lambda s: "this-is-d2" in s, "d2's screen in the terminal")
    assert fleet.tmux("display-message", "-p", "-t", "fleet:", "#{window_name}").stdout.strip() \
        == "d2"  # its window was selected
    fleet.tmux("detach-client", "-s", "=fleet")  # (the user's prefix key, then d)
    desk.wait_for(lambda s: "ATTACH-ENDED 0" in s, "the shell once detached")
    assert clients(fleet) == []


def test_attach_inside_tmux_on_the_crews_server_switches_that_client(fleet: Fleet,
                                                                     desk: Pane) -> None:
    d1 = window(fleet, "d1", "echo this-is-d1; exec sleep 100000")
    add(fleet, "d1", d1)
    # The user works in a session of the crews' server itself: its shell has TMUX set by tmux.
    env = [f"-e{k}={fleet.env[k]}" for k in ("PYTHONPATH", "FM_HOME", "FM_TMUX_SOCKET")]
    made = fleet.tmux("new-session", "-d", "-s", "work", *env, "env", f"PS1={PROMPT}", "sh")
    assert made.returncode == 0, made.stderr
    desk.type(f"tmux -L {shlex.quote(fleet.socket)} attach-session -t =work")
    eventually("the terminal attached to session work",
               lambda: [c for c in clients(fleet) if c.startswith("work ")] or None)
    desk.wait_for(lambda s: PROMPT.strip() in s, "work's shell")
    desk.type(fm_line("crew", "attach", "d1"))
    eventually("the client switched to d1", lambda: clients(fleet) == [f"fleet {d1}"] or None)
    work = fleet.tmux("capture-pane", "-p", "-t", "=work:").stdout
    assert f"crew: switched this tmux client to d1 (pane {d1})" in work


def test_attach_inside_another_tmux_opens_the_crews_server_nested(fleet: Fleet,
                                                                   desk: Pane) -> None:
    """FM_TMUX_SOCKET names the crews' server: a terminal inside another tmux server still
    reaches it (a bare ``tmux attach`` would ask the other server)."""
    d1 = showing(fleet, window(fleet, "d1", "echo this-is-d1; exec sleep 100000"), "this-is-d1")
    add(fleet, "d1", d1)
    outer = desk.tmux("display-message", "-p", "-t", desk.target, "#{socket_path}")
    desk.type(f"TMUX={shlex.quote(outer.stdout.strip())},1,0 {fm_line('crew', 'attach', 'd1')}")
    eventually("a nested client on d1", lambda: clients(fleet) == [f"fleet {d1}"] or None)
    desk.wait_for(lambda s: "this-is-d1" in s, "d1's screen in the terminal")
    fleet.tmux("detach-client", "-s", "=fleet")
    shown = desk.wait_for(lambda s: s.rstrip().endswith(PROMPT.strip()), "the shell again")
    assert "this terminal is inside another tmux server" in shown


def test_attach_refuses_a_pane_not_the_crews_and_a_missing_terminal(fleet: Fleet) -> None:
    d1 = window(fleet, "d1", "exec sleep 100000")
    d2 = window(fleet, "d2", "exec sleep 100000")
    add(fleet, "d1", d1)
    add(fleet, "d2", d2)
    one_line_refusal(fm(fleet, "crew", "attach", "d2"), 1, "needs a terminal",
                     "fm crew peek d2")
    fleet.tmux("kill-pane", "-t", d1)
    one_line_refusal(fm(fleet, "crew", "attach", "d1"), 1, f"pane {d1} is gone",
                     "nothing was attached - fm crew stop d1")
    one_line_refusal(fm(fleet, "crew", "attach", "d3"), 2, "unknown crew 'd3'")
    assert clients(fleet) == []


def test_peek_hands_tmux_a_position_as_it_is(fleet: Fleet) -> None:
    """A registration by position ending in ; (tmux's command separator) names its window."""
    pane = window(fleet, literal("w;"), "echo hostile-window; exec sleep 100000")
    showing(fleet, pane, "hostile-window")
    crew.add(fleet.home, "d1", "fleet:w;")
    done = fm(fleet, "crew", "peek", "d1")
    assert done.returncode == 0 and "hostile-window" in done.stdout, done.stderr
    assert crew.get(fleet.home, "d1").pane == pane
