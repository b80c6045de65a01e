"""One fleet per project, as a user meets it: real git projects, real ``fm`` processes, a
scratch ``HOME``. ``fm install`` gives a project its own home at its root, kept out of git and
found from every directory and worktree of the project; a hand-made ``.firstmate/`` is set up; a
cloned project's state is never acted on; nothing fm writes shows up in ``git status`` or puts a
machine path into a file git would commit, and an uninstall puts the user's files back byte for
byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.testing import DEADLINE, fm_command

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True,
                                               check=False).returncode != 0,
                                reason="git is needed for git projects")

GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}
HARNESSES = ("claude", "cursor", "codex", "grok", "pi", "omp", "opencode")


class User:
    """A user with a scratch home directory, running fm as harnesses and shells do."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "user"
        self.home.mkdir()
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("FM_", "FIRSTMATE_", "CLAUDE_", "CODEX_", "CURSOR_", "GIT_",
                                     "XDG_"))}
        self.env = {**keep, **GIT_ID, "HOME": str(self.home),
                    "FIRSTMATE_KEYS_DIR": str(tmp / "keys"), "FM_TMUX": str(tmp / "no-tmux")}

    def fm(self, *args: str, cwd: Path, stdin: str = "",
           **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(fm_command(*args), cwd=cwd, env={**self.env, **extra},
                              input=stdin, capture_output=True, text=True,
                              timeout=DEADLINE * 4, check=False)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def git(self, *args: str, cwd: Path) -> str:
        done = subprocess.run(["git", *args], cwd=cwd, env=self.env, capture_output=True,
                              text=True, timeout=DEADLINE, check=True)
        return done.stdout

    def project(self, name: str, files: dict[str, str] | None = None) -> Path:
        """A git project with *files* committed."""
        root = self.tmp / name
        root.mkdir()
        self.git("init", "-q", "-b", "main", cwd=root)
        for rel, text in (files or {"README.md": "hello\n"}).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        self.git("add", "-A", cwd=root)
        self.git("commit", "-q", "-m", "start", cwd=root)
        return root

    def status(self, cwd: Path, **extra: str) -> dict[str, object]:
        done = self.fm("status", "--json", cwd=cwd, **extra)
        assert done.returncode == 0, done.stderr
        value: dict[str, object] = json.loads(done.stdout)
        return value


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


def porcelain(user: User, project: Path) -> str:
    return user.git("status", "--porcelain", "--untracked-files=all", cwd=project)


def committable(user: User, project: Path) -> dict[str, bytes]:
    """Every file git would commit (tracked, or untracked and not ignored), with its bytes."""
    listed = user.git("ls-files", "-z", "--cached", "--others", "--exclude-standard",
                      cwd=project)
    return {rel: (project / rel).read_bytes() for rel in listed.split("\0")
            if rel and (project / rel).is_file()}


def machine_paths(user: User) -> list[str]:
    """What no committed file may name: this Python's environment, the user's home, the keys."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    return [venv, sys.prefix, str(user.home), str(user.tmp / "keys")]


# --- one fleet per project ---------------------------------------------------------------


def test_two_projects_get_two_fleets_found_from_every_directory(user: User) -> None:
    one, two = user.project("one"), user.project("two")
    for project in (one, two):
        done = user.fm("install", "claude", cwd=project)
        assert done.returncode == 0, done.stderr
        assert f"created a new home at {project / '.firstmate'}" in done.stderr
        assert porcelain(user, project) == "", "nothing of fm's shows up in git status"
    added = user.fm("crew", "add", "alpha", "--pane", "%1", cwd=one)
    assert added.returncode == 0, added.stderr
    assert "alpha" in user.fm("crew", "list", cwd=one).stdout
    assert "alpha" not in user.fm("crew", "list", cwd=two).stdout
    (one / "src" / "deep").mkdir(parents=True)
    status = user.status(one / "src" / "deep")
    assert status["home"] == str(one / ".firstmate") and status["home_source"] == "found"
    text = user.fm("status", cwd=one / "src").stdout.splitlines()[0]
    assert text == (f"home: {one / '.firstmate'} (found at {one}, the nearest .firstmate/ at "
                    "or above the current directory)")
    # A linked worktree of the project, outside it, finds the project's home.
    linked = user.tmp / "one-feature"
    user.git("worktree", "add", "-q", "-b", "feature", str(linked), cwd=one)
    status = user.status(linked)
    assert (status["home"], status["home_source"]) == (str(one / ".firstmate"), "project")
    assert porcelain(user, linked) == ""
    # Outside any project: the default home; FM_HOME wins everywhere.
    outside = user.tmp / "outside"
    outside.mkdir()
    assert user.status(outside)["home_source"] == "default"
    named = user.status(one, FM_HOME=str(user.tmp / "named"))
    assert (named["home"], named["home_source"]) == (str(user.tmp / "named"), "env")


def test_a_project_an_older_fm_installed_keeps_its_home_until_moved(user: User) -> None:
    project = user.project("old")
    default = user.home / ".firstmate"
    # As an older fm did: the default home, with the hooks' record in it.
    older = user.fm("install", "claude", cwd=project, FM_HOME=str(default))
    assert older.returncode == 0, older.stderr
    assert user.fm("crew", "add", "alpha", "--pane", "%1", cwd=project).returncode == 0
    again = user.fm("install", "claude", cwd=project)
    assert again.returncode == 0, again.stderr
    assert "keeps the home" in again.stderr and "mkdir" in again.stderr
    assert not (project / ".firstmate").exists(), "a running fleet is never split"
    assert user.status(project)["home"] == str(default)
    # The move the note names: an own home, then the install again.
    (project / ".firstmate").mkdir()
    moved = user.fm("install", "claude", cwd=project)
    assert moved.returncode == 0, moved.stderr
    assert user.status(project)["home"] == str(project / ".firstmate")
    assert porcelain(user, project) == ""


def test_a_hand_made_firstmate_directory_is_set_up(user: User) -> None:
    project = user.project("handmade")
    (project / ".firstmate").mkdir()
    listed = user.fm("crew", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert f"created a new home at {project / '.firstmate'}" in listed.stderr
    assert (project / ".firstmate" / "state" / "home.mark").is_file()
    assert user.fm("crew", "list", cwd=project).stderr == ""  # set up once


def test_a_cloned_projects_state_is_never_acted_on(user: User) -> None:
    upstream = user.project("upstream")
    crew = upstream / ".firstmate" / "state" / "crew"
    crew.mkdir(parents=True)
    (crew / "evil.pane").write_text("%0\n")  # a registration naming a pane to type into
    clone = user.tmp / "clone"
    subprocess.run(["cp", "-a", str(upstream), str(clone)], check=True)
    stop = json.dumps({"session_id": "s", "transcript_path": "/t", "cwd": str(clone),
                       "hook_event_name": "Stop", "stop_hook_active": False})
    for args in (("crew", "list"), ("status",), ("wake", "append", "signal", "k", "x"),
                 ("hook", "claude", "stop"), ("install", "claude")):
        done = user.fm(*args, cwd=clone, stdin=stop)
        assert done.returncode == 4, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and "will not act on it" in done.stderr, args
    assert not (clone / ".claude").exists()
    # The fixes it names both work: adopting it (FM_HOME names it), or setting it aside.
    adopted = user.tmp / "adopted"
    subprocess.run(["cp", "-a", str(upstream), str(adopted)], check=True)
    fix = user.fm("status", cwd=adopted, FM_HOME=str(adopted / ".firstmate"))
    assert fix.returncode == 0 and user.fm("crew", "list", cwd=adopted).returncode == 0
    os.rename(clone / ".firstmate" / "state", clone / ".firstmate" / "state.foreign")
    fresh = user.fm("install", "claude", cwd=clone)
    assert fresh.returncode == 0, fresh.stderr
    assert "evil" not in user.fm("crew", "list", cwd=clone).stdout


def test_a_home_git_tracks_is_refused_by_install(user: User) -> None:
    project = user.project("tracked", {".firstmate/config/notes": "committed\n"})
    done = user.fm("install", "claude", cwd=project)
    assert done.returncode == 4 and "git tracks files under" in done.stderr, done.stderr
    assert "rm -r --cached .firstmate" in done.stderr


# --- nothing machine-specific in what a project commits ---------------------------------


@pytest.mark.parametrize("harness", HARNESSES)
def test_an_install_leaves_git_clean_and_no_machine_path_in_committed_files(
        user: User, harness: str) -> None:
    project = user.project(f"p-{harness}")
    before = committable(user, project)
    done = user.fm("install", harness, cwd=project)
    assert done.returncode == 0, done.stderr
    assert porcelain(user, project) == "", f"fm install {harness} shows in git status"
    files = committable(user, project)
    assert files == before
    for rel, data in files.items():
        for path in machine_paths(user):
            assert path.encode() not in data, f"{rel} names {path}"
    # The hooks still name this machine's fm by absolute path (where git never looks).
    written = [p for p in project.rglob("*") if p.is_file() and ".git" not in p.parts
               and ".firstmate" not in p.parts] + \
        [p for p in user.home.rglob("*") if p.is_file() and ".firstmate" not in p.parts]
    assert any(b" hook " + harness.encode() in p.read_bytes() or b'"bridge"' in p.read_bytes()
               for p in written), "no hook or launcher was written"
    gone = user.fm("uninstall", harness, cwd=project)
    assert gone.returncode == 0, gone.stderr
    assert porcelain(user, project) == ""
    assert committable(user, project) == before
    assert sorted(p.name for p in project.iterdir()) == [".firstmate", ".git", "README.md"]


#: Team files a project commits for each hook harness, in their own formatting.
TEAM_FILES = {
    "claude": {".claude/settings.json": '{"permissions":{"allow":["Bash(make:*)"]}}\n'},
    "cursor": {".cursor/hooks.json": '{\n\t"version": 1,\n\t"hooks": {"afterFileEdit": '
                                     '[{"command": "./fmt.sh"}]}\n}\n'},
    "codex": {".codex/hooks.json": '{"hooks": {"Stop": [{"hooks": [{"type": "command", '
                                   '"command": "./check.sh"}]}]}}\n',
              "AGENTS.md": "# Team\n\nRun make test.\n"},
    "grok": {".grok/hooks/team.json": '{"hooks": {}}\n'},
}


@pytest.mark.parametrize("harness", sorted(TEAM_FILES))
def test_team_files_a_project_commits_are_not_touched(user: User, harness: str) -> None:
    project = user.project(f"team-{harness}", {"README.md": "x\n", **TEAM_FILES[harness]})
    done = user.fm("install", harness, cwd=project)
    assert done.returncode == 0, done.stderr
    changed = porcelain(user, project)
    for rel in TEAM_FILES[harness]:
        data = (project / rel).read_bytes()
        for path in machine_paths(user):
            assert path.encode() not in data, f"{rel} names {path}"
        if rel.endswith(".json"):
            assert (project / rel).read_text() == TEAM_FILES[harness][rel], rel
    if harness == "codex":
        # The Codex protocol is team-neutral text in AGENTS.md; nothing else changes.
        assert changed == " M AGENTS.md\n"
    else:
        assert changed == ""
    assert user.fm("uninstall", harness, cwd=project).returncode == 0
    assert porcelain(user, project) == ""


def test_personal_settings_are_put_back_byte_for_byte(user: User) -> None:
    project = user.project("mine")
    local = project / ".claude" / "settings.local.json"
    local.parent.mkdir()
    mine = b'{ "permissions" : {"allow": ["Bash(ls:*)"]},\n"model":"opus" }'
    local.write_bytes(mine)
    os.chmod(local, 0o600)
    before = porcelain(user, project)
    assert user.fm("install", "claude", cwd=project).returncode == 0
    assert porcelain(user, project) == "", "the personal file fm merged into is kept out of git"
    assert b"hook claude stop" in local.read_bytes()
    assert user.fm("uninstall", "claude", cwd=project).returncode == 0
    assert local.read_bytes() == mine and oct(local.stat().st_mode & 0o777) == "0o600"
    assert porcelain(user, project) == before
    assert not list(project.rglob("*.fm-backup"))


@pytest.mark.parametrize("harness,user_file", [("cursor", ".cursor/hooks.json"),
                                               ("codex", ".codex/hooks.json")])
def test_user_level_hooks_answer_only_for_their_project(user: User, harness: str,
                                                        user_file: str) -> None:
    one, two = user.project("one"), user.project("two")
    for project in (one, two):
        assert user.fm("install", harness, cwd=project).returncode == 0
    hooks = user.home / user_file
    commands = [h["command"] for groups in json.loads(hooks.read_text())["hooks"].values()
                for g in groups for h in (g.get("hooks", [g]))]
    assert any(f"--project {one}" in c for c in commands)
    assert any(f"--project {two}" in c for c in commands)
    # A session elsewhere: the hook answers nothing, and touches no home.
    other = user.project("other")
    stop = json.dumps({"hook_event_name": "Stop", "turn_id": "t", "cwd": str(other),
                       "cursor_version": "2", "conversation_id": "c", "workspace_roots": [
                           str(other)]})
    argv = [c for c in commands if f"--project {one}" in c and " stop " in c + " "]
    done = subprocess.run(["/bin/sh", "-c", argv[0]], input=stop, cwd=other,
                          env={**user.env, "CURSOR_PROJECT_DIR": str(other)},
                          capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not (other / ".firstmate").exists() and not (user.home / ".firstmate").exists()
    assert user.fm("uninstall", harness, cwd=one).returncode == 0
    left = hooks.read_text()
    assert str(one) not in left and str(two) in left
    assert user.fm("uninstall", harness, cwd=two).returncode == 0
    assert not hooks.exists() and not hooks.parent.exists(), "fm made them: fm removes them"


def test_a_users_own_user_level_hooks_file_is_put_back_byte_for_byte(user: User) -> None:
    hooks = user.home / ".cursor" / "hooks.json"
    hooks.parent.mkdir()
    mine = b'{"version":1,"hooks":{"stop":[{"command":"~/bin/ding"}]}}'
    hooks.write_bytes(mine)
    one, two = user.project("one"), user.project("two")
    for project in (one, two):
        assert user.fm("install", "cursor", cwd=project).returncode == 0
    assert b"--project" in hooks.read_bytes() and b"~/bin/ding" in hooks.read_bytes()
    for project in (two, one):
        assert user.fm("uninstall", "cursor", cwd=project).returncode == 0
    assert hooks.read_bytes() == mine
