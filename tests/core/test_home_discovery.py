"""Which home, read from the file system alone: project homes found from every directory and
linked worktree (``.git`` read, never ``git`` run), and a ``state/`` that counts only with this
user's mark (firstmate.base.homeroot, gitroot, homemark)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from firstmate.base import gitroot, homemark
from firstmate.base.errors import StateError
from firstmate.base.homeroot import find_home, locate

GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *args], cwd=root, env={**os.environ, **GIT}, check=True)
    return root


def env(tmp_path: Path) -> dict[str, str]:
    return {"FIRSTMATE_KEYS_DIR": str(tmp_path / "keys")}


def test_a_linked_worktree_leads_to_its_main_worktree(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "b", str(linked)], cwd=repo,
                   check=True)
    (linked / "a" / "b").mkdir(parents=True)
    assert gitroot.worktree_root(str(linked / "a" / "b")) == str(linked)
    assert gitroot.linked_main_root(str(linked)) == str(repo)
    assert gitroot.linked_main_root(str(repo)) is None
    assert gitroot.project_root(str(linked / "a")) == str(repo)
    assert gitroot.common_dir(str(linked)) == str(repo / ".git")
    (repo / ".firstmate").mkdir()
    assert locate({}, str(linked / "a" / "b")) == (str(repo / ".firstmate"), "project", str(repo))
    assert locate({}, str(repo / ".git")) == (str(repo / ".firstmate"), "found", str(repo))


def test_a_stray_git_file_cannot_borrow_another_projects_home(repo: Path,
                                                              tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "b", str(linked)], cwd=repo,
                   check=True)
    (repo / ".firstmate").mkdir()
    impostor = tmp_path / "impostor"
    impostor.mkdir()
    # Pointing at the real worktree's record, which does not point back here.
    (impostor / ".git").write_text((linked / ".git").read_text())
    assert gitroot.linked_main_root(str(impostor)) is None
    assert locate({"HOME": str(tmp_path)}, str(impostor))[1] == "default"


def test_a_state_counts_only_with_this_users_mark_for_this_path(repo: Path,
                                                                tmp_path: Path) -> None:
    keys = env(tmp_path)
    root = str(repo / ".firstmate")
    (repo / ".firstmate").mkdir()
    assert find_home(keys, str(repo))[1] == "found"  # the empty directory is set up...
    assert homemark.verdict(root, keys) == "ok"  # ...and marked
    (repo / ".firstmate" / "state" / "crew" / "alpha.pane").write_text("%1\n")
    # Copied to another path: the mark names the old one.
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    assert homemark.verdict(str(copy / ".firstmate"), keys) == "foreign"
    with pytest.raises(StateError, match="will not act on it") as refused:
        find_home(keys, str(copy))
    assert "\n" not in str(refused.value)
    # The same state under another user's keys is foreign too; with no mark at all, missing.
    assert homemark.verdict(root, {"FIRSTMATE_KEYS_DIR": str(tmp_path / "other")}) == "foreign"
    os.unlink(homemark.mark_path(root))
    assert homemark.verdict(root, keys) == "missing"
    with pytest.raises(StateError, match="carries no mark"):
        find_home(keys, str(repo))
    # Named by FM_HOME, it is yours by your word: marked, then found again.
    assert find_home({**keys, "FM_HOME": root}, str(tmp_path))[1] == "env"
    assert find_home(keys, str(repo))[:2] == (root, "found")


def test_a_state_holding_nothing_is_marked_wherever_it_is_found(repo: Path,
                                                                tmp_path: Path) -> None:
    keys = env(tmp_path)
    for sub in ("state/crew", "state/logs", "config"):
        (repo / ".firstmate" / sub).mkdir(parents=True)
    assert homemark.vacant(str(repo / ".firstmate"))
    assert find_home(keys, str(repo))[1] == "found"
    assert homemark.verdict(str(repo / ".firstmate"), keys) == "ok"


def test_a_hook_never_sets_up_an_empty_home(repo: Path, tmp_path: Path) -> None:
    (repo / ".firstmate").mkdir()
    find_home(env(tmp_path), str(repo), adopt=False)
    assert list((repo / ".firstmate").iterdir()) == []
