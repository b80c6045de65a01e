"""``fm crew spawn``, ``steer``, ``stop`` and ``list`` against a real tmux server on a private
socket, with a stand-in harness plugin (tests/core/fakecrew) whose agent records how it was
started and runs its crew-mode turn-end command as a harness's hook would."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from firstmate.app.crewbrief import brief
from firstmate.app.crewspawn import worktree_path
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.watch.backends.tmux import TmuxBackend
from fleet_support import Fleet, spawned

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")


def test_spawn_registers_briefs_and_records_turn_ends(fleet: Fleet) -> None:
    project = fleet.tmp / "project"
    project.mkdir()
    done = spawned(fleet, "w1", "--cwd", str(project), "--harness-arg=--flag=1", "--",
                   "fix", "the", "login", "bug")
    member = crew.get(fleet.home, "w1")
    assert member.pane.startswith("%") and f"pane {member.pane}" in done.stdout
    assert "note: a fake crew asks nothing" in done.stdout
    assert crew.harness(fleet.home, "w1") == "fakecrew"
    record = fleet.started("w1")
    # The crew's environment: the spawner's, with the crew's identity and the plugin's additions;
    # without the spawner's pane and the variables the plugin said must not leak.
    env = record["env"]
    assert env["FM_CREW"] == "w1" and env["FM_HOME"] == str(fleet.home.root)
    assert env["FAKECREW_ADDED"] == "yes" and "FAKECREW_SECRET" not in env
    assert env["PWD"] == str(project) and record["cwd"] == str(project)
    assert env["TMUX_PANE"] == member.pane  # its own pane, not the spawner's %424242
    assert env["FAKECREW_DIR"] == fleet.env["FAKECREW_DIR"]
    # The brief reached the harness as its first prompt, with the absolute fm and the protocol.
    argv = record["argv"]
    assert "--flag=1" in argv
    first = argv[argv.index("--") + 1]
    assert "fix the login bug" in first and 'crew status w1 "<verb>: <note>"' in first
    assert os.path.isabs(first.split("crew status w1")[0].split()[-1])
    for verb in ("done:", "needs-decision: key=", "blocked", "failed", "working:"):
        assert verb in first
    # The agent followed the brief (a status line) and its turn-end hook recorded the turn end.
    eventually("the crew's turn-end marker", lambda: crew.turn_signature(fleet.home, "w1"))
    last = eventually("the crew's first status line", lambda: crew.last_line(fleet.home, "w1"))
    assert last.text == "working: started"
    # The crew-mode config is the crew's own, private, and the environment never rested on disk.
    config = fleet.home.state / "crew-launch" / "w1" / "crew" / "fakecrew.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["turn_ended"][-3:] == ["crew", "turn-ended", "w1"]
    assert not any(b"s3cret" in p.read_bytes() for p in config.parent.parent.rglob("*")
                   if p.is_file())
    assert not list(project.iterdir())  # nothing was written into the project


def test_steer_types_into_the_pane_and_list_shows_the_fleet(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--", "task one")
    eventually("the first turn", lambda: fleet.turns("w1"))
    done = fleet.fm("crew", "steer", "w1", "next: run", "the tests")
    assert done.returncode == 0, done.stderr
    eventually("the steered line", lambda: "next: run the tests" in fleet.turns("w1"))
    listed = json.loads(fleet.fm("crew", "list", "--json").stdout)["crews"]
    assert [(e["name"], e["harness"], e["pane_state"]) for e in listed] == [
        ("w1", "fakecrew", "live")]
    assert listed[0]["last_status"]["text"] == "working: started"
    assert 0 <= listed[0]["last_status"]["age_seconds"] < 60
    fleet.fm("crew", "add", "byhand", "--pane", "%999999")
    lines = fleet.fm("crew", "list").stdout.splitlines()
    assert lines[0].startswith("byhand\t-\t%999999 gone\t-\t(no status yet)")
    name, harness, pane, age, text = lines[1].split("\t")
    assert (name, harness, pane.split()[1], text) == ("w1", "fakecrew", "live", "working: started")
    assert age.endswith("s") or age.endswith("m")
    # The harness quits: its pane stays (remain-on-exit) but is dead, and steering is refused.
    fleet.fm("crew", "steer", "w1", "quit")
    eventually("the pane to show its program ended",
               lambda: fleet.backend().pane_state(crew.get(fleet.home, "w1").pane) == "dead")
    assert "dead" in fleet.fm("crew", "list").stdout.splitlines()[1]
    refused = fleet.fm("crew", "steer", "w1", "anything")
    assert refused.returncode == 1 and "has ended" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_stop_ends_the_window_keeps_the_logs_and_unregisters(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--window-name", "builder", "--session", "crews", "--", "task")
    eventually("the first status line", lambda: crew.last_line(fleet.home, "w1"))
    pane = crew.get(fleet.home, "w1").pane
    windows = fleet.tmux("list-windows", "-a", "-F", "#{session_name}:#{window_name}").stdout
    assert "crews:builder" in windows
    done = fleet.fm("crew", "stop", "w1")
    assert done.returncode == 0, done.stderr
    assert f"ended pane {pane}" in done.stdout
    assert fleet.backend().pane_state(pane) == "gone"
    assert not crew.exists(fleet.home, "w1") and crew.harness(fleet.home, "w1") is None
    assert "fakecrew> " in (fleet.home.crew_dir / "w1.pane-log").read_text()
    assert (fleet.home.crew_dir / "w1.status").read_text().endswith("working: started\n")
    assert (fleet.home.crew_dir / "w1.turn-ended").exists()
    assert not (fleet.home.state / "crew-launch" / "w1").exists()
    again = fleet.fm("crew", "stop", "w1")
    assert again.returncode == 2 and "unknown crew" in again.stderr
    # A new crew of that name starts clean.
    spawned(fleet, "w1", "--", "second task")
    assert crew.harness(fleet.home, "w1") == "fakecrew"
    assert not (fleet.home.crew_dir / "w1.pane-log").exists()
    # Removing the registration takes the spawned crew's launch files too.
    assert (fleet.home.state / "crew-launch" / "w1").is_dir()
    assert fleet.fm("crew", "remove", "w1").returncode == 0
    assert not (fleet.home.state / "crew-launch" / "w1").exists()


def test_steer_and_stop_when_the_pane_is_gone(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--", "task")
    pane = crew.get(fleet.home, "w1").pane
    fleet.tmux("kill-pane", "-t", pane)
    refused = fleet.fm("crew", "steer", "w1", "hello")
    assert refused.returncode == 1 and f"pane {pane} is gone" in refused.stderr
    done = fleet.fm("crew", "stop", "w1")
    assert done.returncode == 0 and "already gone" in done.stdout
    assert not crew.exists(fleet.home, "w1")


def test_a_typed_first_prompt_waits_for_the_harness(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--", "typed task", FAKECREW_MODE="type")
    record = fleet.started("w1")
    assert "--" not in record["argv"]
    [first] = eventually("the typed brief", lambda: fleet.turns("w1"))
    assert "typed task" in first and "\\n" not in first  # one line, as typed
    eventually("the crew's report", lambda: crew.last_line(fleet.home, "w1"))


def test_spawn_refusals_are_one_line(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--", "task")
    cases = [
        (("w1",), {}, 3, "already registered"),
        (("w2",), {"FAKECREW_MODE": "refuse"}, 2, "Fake Crew cannot be launched as a crew"),
        (("w2",), {"FAKECREW_MODE": "missing"}, 2, "no-such-fakecrew-binary"),
        (("w2", "--cwd", str(fleet.tmp / "nowhere")), {}, 2, "does not exist"),
        (("w2", "--worktree", "feature"), {}, 2, "is not inside a git repository"),
        (("bad name",), {}, 2, "invalid crew name"),
    ]
    for args, extra, code, needle in cases:
        done = fleet.fm("crew", "spawn", *args, "--harness", "fakecrew", "--", "t", **extra)
        assert done.returncode == code and needle in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    unknown = fleet.fm("crew", "spawn", "w3", "--harness", "nosuchharness", "--", "t")
    assert unknown.returncode == 5 and "fm plugin add nosuchharness" in unknown.stderr
    # Nothing was left behind by the refusals: one crew, one window.
    assert [c.name for c in crew.list(fleet.home)] == ["w1"]
    panes = fleet.tmux("list-panes", "-a", "-F", "#{pane_id}").stdout.split()
    assert panes == [crew.get(fleet.home, "w1").pane]


def _repo(fleet: Fleet) -> Path:
    repo = fleet.tmp / "repo"
    repo.mkdir()
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "root"],
                 ["branch", "existing"]):
        subprocess.run(["git", *args], cwd=repo, env={**os.environ, **git}, check=True)
    return repo


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


def test_a_projects_own_home_holds_its_crews_worktrees_and_every_worktree_finds_it(
        fleet: Fleet) -> None:
    repo = _repo(fleet)
    (repo / ".firstmate").mkdir()  # the project's own home (fm install makes it so)
    done = fleet.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--worktree", "fresh",
                    "--", "task", cwd=repo, FM_HOME="")
    assert done.returncode == 0, done.stderr
    where = repo / ".firstmate" / "worktrees" / "w1"
    record = fleet.started("w1")
    assert record["cwd"] == str(where) and record["env"]["FM_HOME"] == str(repo / ".firstmate")
    # From the crew's worktree, and from a worktree of the project anywhere else, without
    # FM_HOME: the project's home.
    other = fleet.tmp / "elsewhere"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "side", str(other)], cwd=repo,
                   check=True)
    (other / "deep").mkdir()
    for here, source in ((where, "project"), (other / "deep", "project"), (repo, "found")):
        status = fleet.fm("status", "--json", cwd=here, FM_HOME="")
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert (data["home"], data["home_source"]) == (str(repo / ".firstmate"), source)
    assert [c.name for c in crew.list(Home(repo / ".firstmate"))] == ["w1"]
    assert not crew.list(fleet.home)


def test_worktree_makes_a_branch_checkout_in_the_home(fleet: Fleet) -> None:
    repo = _repo(fleet)
    spawned(fleet, "w1", "--cwd", str(repo), "--worktree", "fresh", "--", "task")
    done = fleet.fm("crew", "spawn", "w2", "--harness", "fakecrew", "--worktree", "existing",
                    "--", "task", cwd=repo)
    assert done.returncode == 0, done.stderr
    for name, branch in (("w1", "fresh"), ("w2", "existing")):
        # A home that is not this project's own keeps each project's crews apart.
        where = worktree_path(fleet.home, name, repo)
        assert where.parent.parent == fleet.home.root / "worktrees"
        assert where.parent.name.startswith("repo-") and where.name == name
        assert fleet.started(name)["cwd"] == str(where)
        head = subprocess.run(["git", "branch", "--show-current"], cwd=where,
                              capture_output=True, text=True, check=True).stdout.strip()
        assert head == branch
    taken = fleet.fm("crew", "spawn", "w1x", "--harness", "fakecrew", "--worktree", "other",
                     "--", "t", cwd=repo)
    assert taken.returncode == 0, taken.stderr
    fleet.fm("crew", "stop", "w1")
    again = fleet.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--worktree", "third",
                     "--", "t", cwd=repo)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_a_failed_worktree_spawn_leaves_nothing_and_its_retry_starts(fleet: Fleet) -> None:
    repo = _repo(fleet)
    where = worktree_path(fleet.home, "w1", repo)
    for branch in ("fresh", "existing"):
        failed = fleet.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--worktree", branch,
                          "--", "t", cwd=repo, FAKECREW_MODE="missing")
        assert failed.returncode == 2 and "no-such-fakecrew-binary" in failed.stderr
        assert not where.exists() and str(where) not in _git(repo, "worktree", "list")
        assert not crew.exists(fleet.home, "w1")
    # The branch made for the failed spawn went with it; the one that was there stays.
    assert _git(repo, "branch", "--list", "fresh") == ""
    assert "existing" in _git(repo, "branch", "--list", "existing")
    spawned(fleet, "w1", "--worktree", "fresh", "--", "t", cwd=repo)
    assert fleet.started("w1")["cwd"] == str(where)


def test_a_worktree_left_by_a_spawn_that_never_finished_is_taken_over(fleet: Fleet) -> None:
    repo = _repo(fleet)
    where = worktree_path(fleet.home, "w1", repo)
    _git(repo, "worktree", "add", "-b", "fresh", str(where))  # (as a killed spawn leaves it)
    (where / "work.txt").write_text("kept")
    refused = fleet.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--worktree", "other",
                       "--", "t", cwd=repo)
    assert refused.returncode == 2 and "already exists" in refused.stderr
    done = spawned(fleet, "w1", "--worktree", "fresh", "--", "t", cwd=repo)
    assert "was already there on branch fresh" in done.stdout
    assert fleet.started("w1")["cwd"] == str(where) and (where / "work.txt").read_text() == "kept"
    # A failure now leaves the taken-over worktree as it was.
    fleet.fm("crew", "stop", "w1")
    failed = fleet.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--worktree", "fresh",
                      "--", "t", cwd=repo, FAKECREW_MODE="missing")
    assert failed.returncode == 2 and (where / "work.txt").read_text() == "kept"


def test_answer_send_types_the_line_the_brief_promises(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--", "task")
    eventually("the first turn", lambda: fleet.turns("w1"))
    assert fleet.fm("crew", "status", "w1", "needs-decision: key=db which one?").returncode == 0
    done = fleet.fm("crew", "answer", "w1", "--key", "db", "--send", "postgres;")
    assert done.returncode == 0, done.stderr
    eventually("the typed answer", lambda: len(fleet.turns("w1")) == 2)
    assert fleet.turns("w1")[1] == "answered: key=db postgres;"
    assert 'starts with "answered: key=<key>"' in fleet.turns("w1")[0]


def test_the_brief_names_the_protocol() -> None:
    text = brief("w7", "  ship it  ", ["/opt/fm env/bin/fm"])
    assert "'/opt/fm env/bin/fm' crew status w7 \"<verb>: <note>\"" in text
    assert "YOUR TASK\nship it\n" in text
    assert "key=" in text and "fm arm" in text
    assert "no task was given" in brief("w7", "", ["/x/fm"])


def test_the_backend_reports_no_server_and_no_tmux(tmp_path: Path) -> None:
    quiet = TmuxBackend.from_env({"FM_TMUX_SOCKET": f"fm-none-{os.getpid()}"})
    assert quiet.pane_states() == {} and quiet.pane_state("%1") == "gone"
    assert quiet.kill_pane("%1") is False and quiet.history("%1") is None
    missing = TmuxBackend.from_env({"FM_TMUX": str(tmp_path / "no-tmux")})
    assert missing.pane_states() is None and missing.pane_state("%1") == "unknown"
    assert missing.new_window("s", "w", str(tmp_path), ["true"]) is None
    assert "not found" in (missing.last_error or "")
