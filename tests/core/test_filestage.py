"""Staged file changes (firstmate.plugin.filestage): all of a transaction's files change, or none
does, and nothing fm staged is left behind either way. Real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from firstmate.plugin import filestage


def leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*")
            if filestage.STAGE_TAG in p.name or filestage.KEEP_TAG in p.name]


def test_a_transaction_commits_every_change_together(tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("old")
    mine.chmod(0o640)
    gone = tmp_path / "gone" / "x.json"
    gone.parent.mkdir()
    gone.write_text("{}")
    with filestage.transaction():
        filestage.write(mine, b"new", mode=0o640)
        assert filestage.write(tmp_path / "a" / "b" / "new.txt", b"fresh")
        filestage.remove(gone, prune_upto=tmp_path)
        with filestage.transaction():  # a nested block joins the outer one
            assert filestage.write(tmp_path / "mine.txt.bak", b"old", exclusive=True)
        # Nothing is in place yet, but reads inside see what is staged.
        assert mine.read_text() == "old" and gone.exists()
        assert filestage.pending(mine) == (True, b"new")
        assert not filestage.exists(gone) and filestage.exists(tmp_path / "a" / "b" / "new.txt")
        assert not filestage.write(tmp_path / "mine.txt.bak", b"other", exclusive=True)
    assert mine.read_text() == "new" and stat.S_IMODE(mine.stat().st_mode) == 0o640
    assert (tmp_path / "a" / "b" / "new.txt").read_text() == "fresh"
    assert (tmp_path / "mine.txt.bak").read_text() == "old"
    assert not gone.parent.exists()  # the directory it left empty went with it
    assert leftovers(tmp_path) == []


def test_a_failure_inside_changes_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("old")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(RuntimeError), filestage.transaction():
        filestage.write(mine, b"new")
        filestage.write(tmp_path / "new" / "deep" / "f", b"x")
        filestage.remove(mine)
        raise RuntimeError("the plugin failed halfway")
    assert mine.read_text() == "old"
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_failure_while_putting_files_in_place_puts_back_the_ones_already_replaced(
        tmp_path: Path) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text("first, the user's")
    first.chmod(0o600)
    second.write_text("second, the user's")
    with pytest.raises(Exception, match="nothing was changed"), filestage.transaction():
        filestage.write(first, b"first, ours", mode=0o600)
        filestage.write(second, b"second, ours")
        # The second target turns into a directory that is not empty after staging: its
        # rename fails once the first file is already in place.
        second.unlink()
        second.mkdir()
        (second / "inside").write_text("x")
    assert first.read_text() == "first, the user's"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert (second / "inside").read_text() == "x"
    assert leftovers(tmp_path) == []


def test_outside_a_transaction_each_change_is_made_at_once(tmp_path: Path) -> None:
    target = tmp_path / "d" / "f"
    assert filestage.write(target, b"one") and target.read_bytes() == b"one"
    filestage.write(target, b"two")
    assert target.read_bytes() == b"two"
    filestage.remove(target, prune_upto=tmp_path)
    assert not target.parent.exists() and leftovers(tmp_path) == []
    # A failure (a directory name too long) leaves no directory made for it.
    with pytest.raises(OSError):
        filestage.write(tmp_path / "made" / ("x" * 300) / "f", b"")
    assert os.listdir(tmp_path) == []
