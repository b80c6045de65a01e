"""The crew registry and status logs: real files, and the real ``fm crew`` command line."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.base.errors import ConflictError, StateError, UsageError
from firstmate.fast import crewreport
from firstmate.store import crew
from firstmate.store.home import Home
from hypothesis import given
from hypothesis import strategies as st

CORE = str(Path(__file__).resolve().parents[2] / "core")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def fm(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_HOME=str(home.root))
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_add_list_remove_round_trip(home: Home) -> None:
    added = crew.add(home, "w1", "fleet:1.0")
    crew.add(home, "w0", "%7")
    assert [c.name for c in crew.list(home)] == ["w0", "w1"]
    assert crew.get(home, "w1").pane == "fleet:1.0" == added.pane
    crew.append_status(home, "w1", "working: x")
    crew.mark_turn_ended(home, "w1")
    for p in home.crew_dir.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    crew.remove(home, "w1")
    assert [c.name for c in crew.list(home)] == ["w0"]
    assert not [p for p in home.crew_dir.iterdir() if p.name.startswith("w1.")]


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "a b", "x" * 65, "é", "a\nb"])
def test_bad_names_are_usage_errors(home: Home, name: str) -> None:
    with pytest.raises(UsageError, match="invalid crew name"):
        crew.add(home, name, "p")


def test_readding_is_idempotent_but_a_new_pane_needs_replace(home: Home) -> None:
    crew.add(home, "w1", "a:1")
    crew.append_status(home, "w1", "working: keep me")
    assert crew.add(home, "w1", "a:1").pane == "a:1"
    with pytest.raises(ConflictError, match="--replace"):
        crew.add(home, "w1", "b:2")
    assert crew.add(home, "w1", "b:2", replace=True).pane == "b:2"
    assert crew.last_line(home, "w1") is not None  # --replace keeps the logs


def test_a_fresh_registration_starts_clean(home: Home) -> None:
    crew.add(home, "w1", "a:1")
    crew.append_status(home, "w1", "needs-decision: key=k old question")
    crew.remove(home, "w1")
    # Leftovers of an earlier crew (e.g. a cursor a watcher wrote during the removal) are cleared.
    (home.crew_dir / "w1.signal-cursor").write_text("1 999\n")
    crew.add(home, "w1", "a:1")
    assert crew.open_decisions(home, "w1") == []
    assert not (home.crew_dir / "w1.signal-cursor").exists()


def test_status_for_an_unknown_crew_names_fm_crew_add(home: Home) -> None:
    with pytest.raises(UsageError, match="fm crew add ghost --pane TARGET"):
        crew.append_status(home, "ghost", "done: x")
    with pytest.raises(UsageError, match="fm crew add"):
        crew.mark_turn_ended(home, "ghost")


@pytest.mark.parametrize("args", [["steer", "alpah", "go"], ["stop", "alpah"],
                                  ["status", "alpah", "done: x"], ["turn-ended", "alpah"],
                                  ["answer", "alpah", "--key", "k", "yes"], ["remove", "alpah"]])
def test_a_mistyped_crew_name_names_the_registered_crew_it_is_closest_to(
        home: Home, args: list[str]) -> None:
    crew.add(home, "alpha", "%1")
    crew.add(home, "bravo", "%2")
    done = fm(home, "crew", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("fm: unknown crew 'alpah'; did you mean 'alpha'? register it first "
                           "with: fm crew add alpah --pane TARGET\n")
    far = fm(home, "crew", args[0], "zulu", *args[2:])
    assert far.stderr == "fm: unknown crew 'zulu'; register it first with: fm crew add zulu --pane TARGET\n"


def test_status_lines_are_stamped_and_neutralised(home: Home) -> None:
    crew.add(home, "w1", "p")
    crew.append_status(home, "w1", "done:\x1b[31m red\x1b[0m\tand\nmore\r\x07", now=1234.5)
    raw = (home.crew_dir / "w1.status").read_text()
    assert raw == "1234.500\tdone: red and more\n"
    line = crew.last_line(home, "w1")
    assert line is not None and line.text == "done: red and more" and line.at == 1234.5
    assert line.verb == "done"
    with pytest.raises(UsageError, match="empty status line"):
        crew.append_status(home, "w1", " \x1b[0m\t ")


def test_long_status_lines_are_cut(home: Home) -> None:
    crew.add(home, "w1", "p")
    crew.append_status(home, "w1", "progress: " + "é" * 5000)
    line = crew.last_line(home, "w1")
    assert line is not None and len(line.text.encode()) <= crew.MAX_STATUS_BYTES


@given(st.text(max_size=300))
def test_clean_text_is_one_printable_line(text: str) -> None:
    clean = crew.clean_text(text)
    assert not any(ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F for ch in clean)
    assert len(clean.encode()) <= crew.MAX_STATUS_BYTES


def test_symlinked_status_log_is_refused_and_not_followed(home: Home, tmp_path: Path) -> None:
    crew.add(home, "w1", "p")
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (home.crew_dir / "w1.status").symlink_to(victim)
    with pytest.raises(StateError, match="symlink"):
        crew.append_status(home, "w1", "done: x")
    with pytest.raises(StateError, match="symlink"):
        crew.read_span(home.crew_dir / "w1.status")
    assert victim.read_text() == "untouched\n"


def test_symlinked_registration_is_refused(home: Home, tmp_path: Path) -> None:
    (tmp_path / "fake").write_text("evil:0\n")
    (home.crew_dir / "w9.pane").symlink_to(tmp_path / "fake")
    with pytest.raises(StateError, match="symlink"):
        crew.get(home, "w9")


def test_each_turn_end_changes_the_marker_signature(home: Home) -> None:
    crew.add(home, "w1", "p")
    assert crew.turn_signature(home, "w1") is None
    seen = set()
    for _ in range(crewreport.TURN_MARKER_MAX // 10):
        crew.mark_turn_ended(home, "w1")
        sig = crew.turn_signature(home, "w1")
        assert sig is not None and sig[0] not in seen
        seen.add(sig[0])
    assert (home.crew_dir / "w1.turn-ended").stat().st_size <= crewreport.TURN_MARKER_MAX


def test_decisions_fold_until_answered(home: Home) -> None:
    crew.add(home, "w1", "p")
    crew.append_status(home, "w1", "needs-decision: key=db postgres or sqlite?")
    crew.append_status(home, "w1", "working: meanwhile on docs")
    crew.append_status(home, "w1", "needs-decision: [key=name] call it fm?")
    crew.append_status(home, "w1", "needs-decision: merge now?")
    crew.append_status(home, "w1", "needs-decision: key=db postgres, sqlite or duckdb?")
    found = {d.key: d for d in crew.open_decisions(home, "w1")}
    assert list(found) == ["name", "line4", "db"]
    assert found["db"].note == "postgres, sqlite or duckdb?" and found["db"].keyed
    assert not found["line4"].keyed
    closed = crew.answer(home, "w1", "db", "postgres")
    assert closed.key == "db"
    assert [d.key for d in crew.open_decisions(home, "w1")] == ["name", "line4"]
    crew.answer(home, "w1", "line4", "yes, merge")
    assert [d.key for d in crew.open_decisions(home, "w1")] == ["name"]
    with pytest.raises(UsageError, match=r"no open decision with key 'db'.*open: name"):
        crew.answer(home, "w1", "db", "again")
    with pytest.raises(UsageError, match="invalid decision key"):
        crew.answer(home, "w1", "bad key", "x")
    # The captain's answers are not what the crew last said.
    last = crew.last_line(home, "w1")
    assert last is not None and last.text.startswith("needs-decision: key=db")


def test_a_partial_last_line_is_left_for_later(home: Home) -> None:
    crew.add(home, "w1", "p")
    crew.append_status(home, "w1", "working: a", now=1.0)
    with open(home.crew_dir / "w1.status", "a") as fh:
        fh.write("2.0\tdone: hal")
    span = crew.read_span(home.crew_dir / "w1.status")
    assert span is not None and [line.text for line in span.lines] == ["working: a"]
    with open(home.crew_dir / "w1.status", "a") as fh:
        fh.write("f\n")
    again = crew.read_span(home.crew_dir / "w1.status", span.end, inode=span.inode)
    assert again is not None and [(line.at, line.text) for line in again.lines] == [(2.0, "done: half")]


def test_lines_written_by_hand_are_read_without_a_stamp(home: Home) -> None:
    crew.add(home, "w1", "p")
    with open(home.crew_dir / "w1.status", "a") as fh:
        fh.write("blocked: from a shell\n")
    line = crew.last_line(home, "w1")
    assert line is not None and line.at is None and line.text == "blocked: from a shell"


def test_a_replaced_log_restarts_the_cursor(home: Home) -> None:
    crew.add(home, "w1", "p")
    crew.append_status(home, "w1", "working: a long line " + "x" * 100)
    span = crew.read_span(home.crew_dir / "w1.status")
    assert span is not None
    (home.crew_dir / "w1.status").unlink()
    crew.append_status(home, "w1", "done: b")
    again = crew.read_span(home.crew_dir / "w1.status", span.end, inode=span.inode)
    assert again is not None and [line.text for line in again.lines] == ["done: b"]


# --- the command line ------------------------------------------------------------------------


def test_cli_round_trip(home: Home) -> None:
    out = fm(home, "crew", "add", "w1", "--pane", "fleet:1.0")
    assert out.returncode == 0 and out.stdout == "crew: added w1 (pane fleet:1.0)\n"
    assert fm(home, "crew", "status", "w1", "needs-decision: key=k ship it?").returncode == 0
    assert fm(home, "crew", "turn-ended", "w1").returncode == 0
    listed = json.loads(fm(home, "crew", "list", "--json").stdout)["crews"]
    assert listed[0]["name"] == "w1" and listed[0]["pane"] == "fleet:1.0"
    assert listed[0]["last_status"]["text"] == "needs-decision: key=k ship it?"
    assert listed[0]["open_decisions"] == 1
    assert "1 open decision" in fm(home, "crew", "list").stdout
    out = fm(home, "crew", "answer", "w1", "--key", "k", "yes, ship")
    assert out.returncode == 0, out.stderr
    assert crew.open_decisions(home, "w1") == []
    assert fm(home, "crew", "remove", "w1").stdout == "crew: removed w1\n"
    assert "no crews registered" in fm(home, "crew", "list").stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("crew", "status", "ghost", "done: x"), "fm crew add ghost --pane TARGET"),
        (("crew", "status", "w1"),
         "fm: crew status: the following arguments are required: TEXT; run 'fm crew status --help'"),
        (("crew", "add", "w1"), "--pane"),
        (("crew", "add", "bad name", "--pane", "p"), "invalid crew name"),
        # (a name starting with - is an option to every other command: nothing could address it)
        (("crew", "add", "--pane", "p", "--", "-rf"), "invalid crew name '-rf'"),
        (("crew", "add", "--pane", "p", "--", "-"), "not starting with . or -"),
        (("crew", "frobnicate"), "invalid choice: 'frobnicate'"),
        (("crew", "answer", "w1", "--key", "nope", "x"), "no open decision"),
        (("crew", "turn-ended"), "crew turn-ended: the following arguments are required: NAME"),
    ],
)
def test_cli_errors_are_one_line_with_exit_2(home: Home, args: tuple[str, ...], needle: str) -> None:
    crew.add(home, "w1", "p")
    out = fm(home, *args)
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("fm: ")
    assert needle in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_conflicting_pane_exits_3(home: Home) -> None:
    crew.add(home, "w1", "a:1")
    out = fm(home, "crew", "add", "w1", "--pane", "b:2")
    assert out.returncode == 3 and "--replace" in out.stderr
    out = fm(home, "crew", "add", "w1", "--pane", "b:2", "--replace")
    assert out.returncode == 0 and "now watches pane b:2 (was a:1)" in out.stdout


def test_fm_crew_status_stays_light(home: Home) -> None:
    crew.add(home, "w1", "p")
    probe = (
        "import sys\n"
        "from firstmate.cli.main import main\n"
        "rc = main(['crew', 'status', 'w1', 'working: quick'])\n"
        "heavy = sorted(m for m in ('psutil', 'pluggy', 'argparse', 'portalocker', 'sqlite3') if m in sys.modules)\n"
        "print(rc, ','.join(heavy))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_HOME=str(home.root))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         timeout=60, check=True)
    assert out.stdout.strip() == "0", out.stdout


# --- the pane check of fm crew add (a real tmux server on a private socket) ------------------


def fm_with(home: Home, extra: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_HOME=str(home.root), **extra)
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    if shutil.which("tmux") is None:
        pytest.skip("the tmux binary is not installed")
    socket = f"fmtest-crew-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    started = subprocess.run([*tmux, "new-session", "-d", "-s", "fleet", "sh", "-c", "exec sleep 100000"],
                             capture_output=True, text=True, timeout=30, check=False)
    assert started.returncode == 0, started.stderr
    try:
        yield socket
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30, check=False)


def warning(name: str, pane: str, why: str) -> str:
    return (f"crew: warning: tmux has no pane {pane} ({why}); {name} is registered anyway: start "
            f"the crew in that pane, or fix it with fm crew add {name} --pane TARGET --replace\n")


@pytest.mark.tmux
def test_cli_add_asks_tmux_for_the_pane_and_warns_but_registers_a_missing_one(
    home: Home, tmux_socket: str
) -> None:
    on_server = {"FM_TMUX_SOCKET": tmux_socket}
    listed = subprocess.run(["tmux", "-L", tmux_socket, "list-panes", "-a", "-F",
                             "#{pane_id} #{pane_pid}"], capture_output=True, text=True,
                            timeout=30, check=True).stdout.split()
    out = fm_with(home, on_server, "crew", "add", "w0", "--pane", "fleet:0.0")
    # Bound to the pane's stable id and its program; the target given is kept as a label.
    assert (out.returncode, out.stdout, out.stderr) == (
        0, f"crew: added w0 (pane {listed[0]} [fleet:0.0])\n", "")
    w0 = crew.get(home, "w0")
    assert (w0.pane, w0.label, w0.pid) == (listed[0], "fleet:0.0", int(listed[1]))
    again = fm_with(home, on_server, "crew", "add", "w0", "--pane", listed[0])
    assert again.stdout == f"crew: w0 is already registered (pane {listed[0]} [fleet:0.0])\n"
    out = fm_with(home, on_server, "crew", "add", "w1", "--pane", "nosuch:0.9")
    assert (out.returncode, out.stdout) == (0, "crew: added w1 (pane nosuch:0.9)\n")
    assert out.stderr == warning("w1", "nosuch:0.9", "can't find session: nosuch")
    out = fm_with(home, on_server, "crew", "add", "w2", "--pane", "fleet:0.9")
    assert out.returncode == 0
    assert out.stderr == warning("w2", "fleet:0.9", "can't find pane: 9")
    assert [c.name for c in crew.list(home)] == ["w0", "w1", "w2"]  # registered all the same
    # The fix the warning names clears it.
    out = fm_with(home, on_server, "crew", "add", "w1", "--pane", "fleet:0.0", "--replace")
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.tmux
def test_cli_add_warns_when_no_tmux_server_answers_for_the_socket(home: Home) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("the tmux binary is not installed")
    unused = {"FM_TMUX_SOCKET": f"fmtest-none-{os.getpid()}-{uuid.uuid4().hex[:8]}"}
    out = fm_with(home, unused, "crew", "add", "w1", "--pane", "fleet:0.0")
    assert out.returncode == 0 and crew.get(home, "w1").pane == "fleet:0.0"
    assert out.stderr.startswith("crew: warning: tmux has no pane fleet:0.0 (")
    assert out.stderr.endswith("fix it with fm crew add w1 --pane TARGET --replace\n")
    assert out.stderr.count("\n") == 1


def test_cli_add_without_tmux_only_notes_that_the_pane_was_not_checked(home: Home, tmp_path: Path) -> None:
    missing = tmp_path / "no-tmux"
    out = fm_with(home, {"FM_TMUX": str(missing)}, "crew", "add", "w1", "--pane", "%1")
    assert (out.returncode, out.stdout) == (0, "crew: added w1 (pane %1)\n")
    assert out.stderr == (f"crew: note: pane %1 was not checked (tmux binary '{missing}' not "
                          "found (set FM_TMUX))\n")
