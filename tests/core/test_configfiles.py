"""Config-file merging for installers: user entries survive, ours come and go exactly."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.plugin import installkeep
from firstmate.plugin.configfiles import (
    BACKUP_SUFFIX,
    ConfigFileError,
    block_markers,
    command_owner,
    command_words,
    hook_command,
    install_result,
    is_ours,
    parse_json,
    remove_block,
    remove_flat_hooks,
    remove_grouped_hooks,
    require_project,
    update_json,
    update_text,
    upsert_block,
    upsert_flat_hook,
    upsert_grouped_hook,
    vacant,
)
from firstmate.plugin.harness import InstallOptions
from firstmate.store.home import Home
from hypothesis import given
from hypothesis import strategies as st

OWNED = command_owner("claude")
OURS_STOP = {"type": "command", "command": "fm hook claude stop", "asyncRewake": True,
             "timeout": 28800}
OURS_START = {"type": "command", "command": "fm hook claude session-start", "timeout": 30}

#: A user's settings: comment-free JSON, their own hooks (one sharing our event), other keys,
#: non-ASCII text and 4-space indentation.
USER_SETTINGS = """{
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)", "Read(~/notes/ü.md)"], "deny": []},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5}]}
        ]
    },
    "env": {"EMPTY": ""}
}
"""


def install(doc: dict[str, Any]) -> dict[str, Any]:
    upsert_grouped_hook(doc, "SessionStart", OURS_START, OWNED)
    return upsert_grouped_hook(doc, "Stop", OURS_STOP, OWNED)


def uninstall(doc: dict[str, Any]) -> dict[str, Any]:
    return remove_grouped_hooks(doc, OWNED)


@contextlib.contextmanager
def kept(root: Path, *, dry_run: bool = False) -> Iterator[Home]:
    """One install's or uninstall's session, keeping what it changes in a home under *root*."""
    home = Home(root / "fm-home").ensure()
    with installkeep.session(home, root, dry_run=dry_run):
        yield home


def merge(path: Path, **kw: Any) -> Any:
    return update_json(path, install, remove_ours=uninstall, **kw)


def unmerge(path: Path, **kw: Any) -> Any:
    return update_json(path, uninstall, remove_ours=uninstall, delete_if_vacant=True, **kw)


# --- ownership -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "fm hook claude stop",
    "fm hook claude stop --home '/tmp/a b'",
    "/opt/venv/bin/fm hook claude stop-failure",
    "FM_HOME=/x fm hook claude session-start",
    "python3 -m firstmate hook claude stop",
    "/venv/bin/python3 -P -m firstmate hook claude stop",
    "exec fm hook claude stop",
])
def test_our_commands_are_recognised(command: str) -> None:
    assert is_ours(command, "claude")


@pytest.mark.parametrize("command", [
    "fm hook cursor stop",  # another harness's entry is not ours to touch
    "echo fm hook claude stop",  # an echo is the user's
    "myfm hook claude stop",
    "fm hooks claude stop",
    "notify-send done",
    "fm hook 'unbalanced",
    "",
    # A user's compound command that also runs ours is the user's: never replaced or removed.
    "fm hook claude stop; notify-send done",
    "fm hook claude stop && notify-send done",
    "fm hook claude stop|tee log",
    "fm hook claude stop > /tmp/log",
    "(fm hook claude stop)",
    "fm hook claude stop --home /x --verbose",
    "fm hook claude stop extra",
    "python3 -I -m firstmate hook claude stop",
    "python3 -P -P -m firstmate hook claude stop",
    "python3 -m other hook claude stop",
])
def test_other_commands_are_not_ours(command: str) -> None:
    assert not is_ours(command, "claude")


@pytest.mark.parametrize(("command", "assigned", "argv"), [
    ("fm", {}, ["fm"]),
    ("FM_HOME=/x exec '/opt/my venv/bin/fm' -v", {"FM_HOME": "/x"}, ["/opt/my venv/bin/fm", "-v"]),
    ("A=1 B= env fm", {"A": "1", "B": ""}, ["env", "fm"]),
    ("touch /tmp/x; echo fm", {}, ["touch", "/tmp/x;", "echo", "fm"]),  # words, never a shell
])
def test_a_command_line_splits_into_its_assignments_and_argv(
        command: str, assigned: dict[str, str], argv: list[str]) -> None:
    assert command_words(command) == (assigned, argv)


def test_non_string_commands_are_not_ours() -> None:
    assert not is_ours(None, "claude") and not is_ours(["fm", "hook", "claude"], "claude")
    assert not OWNED({"command": 3}) and not OWNED("fm hook claude stop")


def test_hook_command_quotes_the_home_and_the_executable(tmp_path: Path) -> None:
    home = tmp_path / "my home"
    # fm_command is read like a shell command line: quote a path with spaces.
    opts = InstallOptions("claude", tmp_path, home=home, fm_command="'/opt/my venv/bin/fm'")
    command = hook_command(opts, "stop")
    assert command == f"'/opt/my venv/bin/fm' hook claude stop --home '{home}'"
    assert is_ours(command, "claude")
    plain = hook_command(InstallOptions("claude", tmp_path), "stop-failure")
    assert plain == "fm hook claude stop-failure"
    assert hook_command(InstallOptions("claude", tmp_path, fm_command="python3 -m firstmate"),
                        "stop") == "python3 -m firstmate hook claude stop"


# --- grouped (Claude / Codex / Grok) documents ----------------------------------------------


def test_grouped_merge_keeps_user_entries_and_is_idempotent() -> None:
    user = json.loads(USER_SETTINGS)
    once = install(json.loads(USER_SETTINGS))
    twice = install(json.loads(json.dumps(once)))
    assert once == twice
    assert once["hooks"]["Stop"][0] == user["hooks"]["Stop"][0]
    assert once["hooks"]["Stop"][1] == {"hooks": [OURS_STOP]}
    assert once["hooks"]["PreToolUse"] == user["hooks"]["PreToolUse"]
    assert {k: v for k, v in once.items() if k != "hooks"} == \
        {k: v for k, v in user.items() if k != "hooks"}
    assert uninstall(once) == user


def test_grouped_merge_updates_ours_in_place_and_drops_duplicates() -> None:
    stale = {"type": "command", "command": "fm hook claude stop", "timeout": 5}
    doc = {"hooks": {"Stop": [
        {"hooks": [{"type": "command", "command": "./mine.sh"}, stale]},
        {"hooks": [dict(stale)]},
        {"hooks": []},  # the user's own empty group is not ours to drop
    ]}}
    install(doc)
    stop = doc["hooks"]["Stop"]
    assert stop == [
        {"hooks": [{"type": "command", "command": "./mine.sh"}, OURS_STOP]},
        {"hooks": []},
    ]


def test_grouped_merge_sets_a_matcher_only_on_a_group_of_its_own() -> None:
    doc: dict[str, Any] = {}
    upsert_grouped_hook(doc, "SessionStart", OURS_START, OWNED, matcher="startup|resume")
    assert doc == {"hooks": {"SessionStart": [{"matcher": "startup|resume", "hooks": [OURS_START]}]}}
    upsert_grouped_hook(doc, "SessionStart", OURS_START, OWNED)
    assert doc == {"hooks": {"SessionStart": [{"hooks": [OURS_START]}]}}


def test_grouped_removal_only_drops_what_it_emptied() -> None:
    doc = {"hooks": {"Stop": [{"hooks": []}], "Notification": []}, "x": 1}
    assert remove_grouped_hooks(json.loads(json.dumps(doc)), OWNED) == doc
    only_ours = install({})
    assert remove_grouped_hooks(only_ours, OWNED) == {}


def test_a_wrong_shape_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    for bad in ('{"hooks": []}', '{"hooks": {"Stop": {"hooks": []}}}'):
        path.write_text(bad)
        with pytest.raises(ConfigFileError) as err:
            merge(path)
        assert str(path) in err.value.message and "\n" not in err.value.message
        assert path.read_text() == bad


# --- flat (Cursor) documents -----------------------------------------------------------------


def test_flat_merge_and_removal() -> None:
    owned = command_owner("cursor")
    ours = {"command": "fm hook cursor stop", "loop_limit": None, "timeout": 28800}
    user = {"version": 1, "hooks": {"stop": [{"command": "./user.sh"}], "afterFileEdit": [
        {"command": "./fmt.sh"}]}}
    doc = upsert_flat_hook(json.loads(json.dumps(user)), "stop", ours, owned)
    assert doc["hooks"]["stop"] == [{"command": "./user.sh"}, ours]
    assert upsert_flat_hook(json.loads(json.dumps(doc)), "stop", ours, owned) == doc
    changed = dict(ours, timeout=5)
    assert upsert_flat_hook(json.loads(json.dumps(doc)), "stop", changed, owned)["hooks"]["stop"] \
        == [{"command": "./user.sh"}, changed]
    assert remove_flat_hooks(doc, owned) == user
    assert remove_flat_hooks({"version": 1, "hooks": {"stop": [ours]}}, owned) == {"version": 1}


def test_vacant_means_nothing_but_the_skeleton() -> None:
    skeleton = {"version": 1, "hooks": {}}
    assert vacant({}, skeleton) and vacant({"version": 1}, skeleton)
    assert vacant({"version": 1, "hooks": {"stop": []}}, skeleton)
    assert not vacant({"version": 2}, skeleton)
    assert not vacant({"hooks": {"stop": [{"command": "x"}]}}, skeleton)
    assert not vacant({"model": ""}, {})


# --- files -----------------------------------------------------------------------------------


def test_merge_into_a_users_file_keeps_their_entries_and_its_original_in_the_home(
        tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(USER_SETTINGS)
    os.chmod(path, 0o640)
    with kept(tmp_path) as home:
        change = merge(path)
    assert change.action == "merged"
    assert change.backup is not None and home.state in change.backup.parents
    assert change.backup.read_text() == USER_SETTINGS
    assert not path.with_name("settings.json" + BACKUP_SUFFIX).exists(), "nothing beside it"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    merged = json.loads(path.read_text())
    assert merged == install(json.loads(USER_SETTINGS))
    assert path.read_text().startswith('{\n    "model"'), "the user's indentation is kept"
    first = path.read_bytes()
    with kept(tmp_path):
        again = merge(path)
    assert again.action == "unchanged" and again.backup is None
    assert path.read_bytes() == first, "install twice = the same bytes"
    with kept(tmp_path):
        removed = unmerge(path)
    assert removed.action == "restored"
    assert path.read_text() == USER_SETTINGS, "put back byte for byte"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert not change.backup.exists(), "the kept original goes with the uninstall"


def test_a_file_changed_since_the_install_keeps_the_changes(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(USER_SETTINGS)
    with kept(tmp_path):
        merge(path)
    doc = json.loads(path.read_text())
    doc["model"] = "sonnet"  # the harness or the user changed it meanwhile
    path.write_text(json.dumps(doc, indent=4) + "\n")
    with kept(tmp_path):
        assert unmerge(path).action == "merged"
    assert json.loads(path.read_text()) == {**json.loads(USER_SETTINGS), "model": "sonnet"}


def _edit_and_reinstall(tmp_path: Path, path: Path) -> None:
    """The user adds a key of their own while fm moved (its hook names an older path), so the
    next install rewrites the file, their key included."""
    text = path.read_text().replace('"fm hook claude stop"', '"/old/venv/bin/fm hook claude stop"')
    doc = json.loads(text)
    doc["mine"] = {"kept": True}
    path.write_text(json.dumps(doc, indent=4) + "\n")
    with kept(tmp_path):
        assert merge(path).action == "merged"
    assert json.loads(path.read_text())["mine"] == {"kept": True}


def test_a_change_the_user_made_between_two_installs_survives_the_uninstall(
        tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(USER_SETTINGS)
    with kept(tmp_path):
        merge(path)
    _edit_and_reinstall(tmp_path, path)
    with kept(tmp_path) as home:
        assert unmerge(path).action == "merged", "not the original from before the edit"
    assert json.loads(path.read_text()) == {**json.loads(USER_SETTINGS), "mine": {"kept": True}}
    assert not list((home.state / "installs").iterdir()), "the record goes with the uninstall"


def test_a_file_fm_created_and_the_user_then_added_to_is_kept(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    with kept(tmp_path):
        assert merge(path).action == "created"
    _edit_and_reinstall(tmp_path, path)
    with kept(tmp_path):
        assert unmerge(path, prune_upto=tmp_path).action == "merged"
    assert json.loads(path.read_text()) == {"mine": {"kept": True}}


def test_a_file_the_user_removed_after_the_install_is_not_brought_back(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(USER_SETTINGS)
    with kept(tmp_path):
        merge(path)
    path.unlink()
    with kept(tmp_path):
        assert merge(path).action == "created"
    with kept(tmp_path) as home:
        assert unmerge(path).action == "removed"
    assert not path.exists() and not list((home.state / "installs").iterdir())


def test_an_edit_the_user_undid_still_gets_the_original_back_byte_for_byte(
        tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(USER_SETTINGS)
    with kept(tmp_path):
        merge(path)
    installed = path.read_bytes()
    path.write_text("{}")  # the user empties it, and the next install rewrites it
    with kept(tmp_path):
        assert merge(path).action == "merged"
    path.write_bytes(installed)  # then they think better of it
    with kept(tmp_path):
        assert unmerge(path).action == "restored", "it means what it did before fm"
    assert path.read_text() == USER_SETTINGS


def _approve(path: Path) -> Any:
    return update_json(path, lambda doc: {**doc, "approved": ["x"]}, remove_ours=_disapprove)


def _disapprove(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "approved"}


def test_a_file_two_installers_share_goes_back_byte_for_byte_after_fm_entries_were_edited(
        tmp_path: Path) -> None:
    # Hooks and an approval in one file; the user takes the approval out by hand (and
    # reformats), the next install puts it back. Their own content never changed, so the
    # uninstall, taking out the hooks and then the approval, ends with the original bytes.
    path = tmp_path / "settings.json"
    path.write_text(USER_SETTINGS)
    with kept(tmp_path):
        merge(path)
        _approve(path)
    path.write_text(json.dumps(_disapprove(json.loads(path.read_text())), indent=2))
    with kept(tmp_path):
        assert merge(path).action == "unchanged" and _approve(path).action == "merged"
    with kept(tmp_path) as home:
        assert unmerge(path).action == "merged"
        assert update_json(path, _disapprove, remove_ours=_disapprove,
                           delete_if_vacant=True).action == "restored"
    assert path.read_text() == USER_SETTINGS
    assert not list((home.state / "installs").iterdir())


def test_an_older_fms_backup_beside_the_file_moves_into_the_home(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(USER_SETTINGS)
    legacy = path.with_name("settings.json" + BACKUP_SUFFIX)
    legacy.write_text(USER_SETTINGS)
    path.write_text(json.dumps(install(json.loads(USER_SETTINGS)), indent=2))  # older install
    with kept(tmp_path) as home:
        assert merge(path).action == "unchanged"
    assert not legacy.exists()
    assert [p.read_text() for p in (home.state / "installs").glob("*.orig")] == [USER_SETTINGS]
    with kept(tmp_path):
        assert unmerge(path).action == "restored"
    assert path.read_text() == USER_SETTINGS


def test_an_older_fms_backup_is_put_back_by_an_uninstall(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    legacy = path.with_name("settings.json" + BACKUP_SUFFIX)
    legacy.write_text(USER_SETTINGS)
    path.write_text(json.dumps(install(json.loads(USER_SETTINGS)), indent=2))  # older install
    with kept(tmp_path):
        assert unmerge(path).action == "restored"
    assert path.read_text() == USER_SETTINGS and not legacy.exists()


def test_a_file_that_already_means_the_same_is_left_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    text = json.dumps(install(json.loads(USER_SETTINGS)), separators=(",", ":"))
    path.write_text(text)
    assert merge(path).action == "unchanged"
    assert path.read_text() == text


def test_create_then_remove_leaves_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    path = project / ".claude" / "settings.json"
    created = merge(path)
    assert created.action == "created" and created.backup is None
    assert json.loads(path.read_text()) == install({})
    assert path.read_text().endswith("}\n")
    removed = unmerge(path, prune_upto=project)
    assert removed.action == "removed"
    assert not path.exists() and not path.parent.exists() and project.is_dir()
    assert unmerge(path).action == "unchanged"


def test_a_file_created_then_merged_again_in_one_install_gets_both(tmp_path: Path) -> None:
    # Two installers' entries in one file (hooks, then an MCP approval): the second merges
    # into the file the first created, which exists only as its staged copy until the end.
    project = tmp_path / "project"
    project.mkdir()
    path = project / ".claude" / "settings.json"
    with kept(project) as home:
        assert merge(path).action == "created"
        second = update_json(path, lambda doc: {**doc, "approved": ["x"]},
                             remove_ours=lambda doc: {k: v for k, v in doc.items()
                                                      if k != "approved"})
        assert second.action == "merged"
    assert json.loads(path.read_text()) == {**install({}), "approved": ["x"]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()
    # The uninstall finds the file as the install left it: removed, with its directory.
    with kept(project, dry_run=False):
        assert unmerge(path).action == "removed"
    assert not path.parent.exists() and home.root.is_dir()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_removal_keeps_a_file_the_user_had_first(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"hooks": {"Notification": [{"hooks": [{"type": "command", "command": "x"}]}]}}')
    with kept(tmp_path):
        merge(path)
    # The user deletes their own entry meanwhile; the file still was theirs first.
    doc = json.loads(path.read_text())
    del doc["hooks"]["Notification"]
    path.write_text(json.dumps(doc))
    with kept(tmp_path):
        assert unmerge(path).action == "merged"
    assert json.loads(path.read_text()) == {}


def test_directories_are_removed_only_when_the_install_made_them(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)  # the user's, before the install
    path = project / ".claude" / "settings.json"
    with kept(tmp_path):
        assert merge(path).action == "created"
    with kept(tmp_path):
        assert unmerge(path, prune_upto=project).action == "removed"
    assert (project / ".claude").is_dir(), "a folder that was there before stays"
    deep = project / ".cursor" / "deep" / "hooks.json"
    with kept(tmp_path):
        merge(deep)
    (project / ".cursor" / "notes.txt").write_text("mine\n")  # the user's, after the install
    with kept(tmp_path):
        assert unmerge(deep, prune_upto=project).action == "removed"
    assert not (project / ".cursor" / "deep").exists() and (project / ".cursor").is_dir()


@pytest.mark.parametrize("content", [
    "{ not json", '{"a": 1,}', '{"a": 1} trailing', "[1, 2]", '"text"', "\xff\xfe".encode("latin-1").decode("latin-1"),
])
def test_a_file_we_cannot_parse_is_never_overwritten(tmp_path: Path, content: str) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(content.encode("latin-1") if content.startswith("\xff") else content.encode())
    before = path.read_bytes()
    with pytest.raises(ConfigFileError) as err:
        merge(path)
    message = err.value.message
    assert str(path) in message and "\n" not in message
    assert "move it aside" in message
    assert err.value.exit_code == ExitCode.FAILED
    assert path.read_bytes() == before
    assert not path.with_name(path.name + BACKUP_SUFFIX).exists()


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_text('{\n  "hooks": {\n    "Stop": [,]\n  }\n}\n')
    with pytest.raises(ConfigFileError, match=r"line 3 column"):
        parse_json(path.read_bytes(), path)


def test_empty_file_and_bom_are_read(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("")
    assert merge(path).action == "merged"
    path.write_bytes(b'\xef\xbb\xbf{"model": "x"}')
    change = merge(path)
    assert json.loads(path.read_text())["model"] == "x" and change.action == "merged"


def test_dry_run_writes_nothing_but_reports(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "settings.json"
    assert merge(path, dry_run=True).action == "created"
    assert not path.parent.exists()
    path.parent.mkdir()
    path.write_text(USER_SETTINGS)
    with kept(tmp_path, dry_run=True):
        change = merge(path, dry_run=True)
    assert change.action == "merged" and change.backup is not None
    assert path.read_text() == USER_SETTINGS and not change.backup.exists()


def test_a_symlinked_config_is_edited_where_it_points(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text(USER_SETTINGS)
    link = tmp_path / "settings.json"
    link.symlink_to(real)
    merge(link)
    assert link.is_symlink()
    assert json.loads(real.read_text()) == install(json.loads(USER_SETTINGS))


def test_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "settings.json").write_text("{}")
    os.chmod(locked, 0o500)
    try:
        with pytest.raises(ConfigFileError, match="cannot write"):
            merge(locked / "settings.json")
    finally:
        os.chmod(locked, 0o700)


def test_a_file_in_place_of_the_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / ".claude").write_text("not a directory")
    with pytest.raises(ConfigFileError) as err:
        merge(tmp_path / ".claude" / "settings.json")
    assert ".claude" in err.value.message and "\n" not in err.value.message


def test_a_directory_in_place_of_the_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "settings.json").mkdir()
    with pytest.raises(ConfigFileError, match="is a directory"):
        merge(tmp_path / "settings.json")


@given(st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k != "hooks"),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.text(max_size=5), inner, max_size=3), max_leaves=8),
    max_size=5))
def test_any_user_document_survives_install_and_uninstall(user: dict[str, Any]) -> None:
    once = install(json.loads(json.dumps(user)))
    assert install(json.loads(json.dumps(once))) == once
    assert uninstall(once) == user


# --- text blocks -----------------------------------------------------------------------------

BODY = "## Firstmate\n\nRun `fm checkpoint --seconds 180`.\n"


@pytest.mark.parametrize("original", ["", "# Agents\n\nMine.\n", "# Agents\n", "no newline"])
def test_block_insert_is_idempotent_and_removable(original: str) -> None:
    once = upsert_block(original, BODY)
    assert upsert_block(once, BODY) == once
    begin, end = block_markers()
    assert once.count(begin) == 1 and once.count(end) == 1 and BODY.strip() in once
    restored = remove_block(once)
    if original.endswith("\n") or not original:
        assert restored == original
    else:
        assert restored == original + "\n"


def test_block_is_replaced_in_place_with_user_text_around_it() -> None:
    begin, end = block_markers()
    text = f"# Top\n\n{begin}\nold body\n{end}\n\n## Mine after\n"
    updated = upsert_block(text, BODY)
    assert updated == f"# Top\n\n{begin}\n{BODY.strip()}\n{end}\n\n## Mine after\n"
    assert remove_block(updated) == "# Top\n\n## Mine after\n"


def test_named_blocks_do_not_touch_each_other() -> None:
    text = upsert_block(upsert_block("", "one", "firstmate-codex"), "two", "firstmate-grok")
    assert remove_block(text, "firstmate-codex") == upsert_block("", "two", "firstmate-grok")


@pytest.mark.parametrize("damaged", [
    "<!-- firstmate:begin -->\nbody\n",
    "body\n<!-- firstmate:end -->\n",
    "<!-- firstmate:end -->\n<!-- firstmate:begin -->\n",
    "<!-- firstmate:begin -->\n<!-- firstmate:end -->\n<!-- firstmate:begin -->\n<!-- firstmate:end -->\n",
])
def test_a_damaged_block_is_an_error_and_the_file_stays(tmp_path: Path, damaged: str) -> None:
    path = tmp_path / "AGENTS.md"
    path.write_text(damaged)
    with pytest.raises(ConfigFileError, match="stray marker"):
        update_text(path, lambda t: upsert_block(t, BODY), remove_ours=remove_block)
    assert path.read_text() == damaged


def test_text_file_lifecycle(tmp_path: Path) -> None:
    path = tmp_path / "AGENTS.md"
    path.write_text("# Agents\n\nMine.\n")
    with kept(tmp_path):
        change = update_text(path, lambda t: upsert_block(t, BODY), remove_ours=remove_block)
    assert change.action == "merged" and change.backup is not None
    first = path.read_bytes()
    assert update_text(path, lambda t: upsert_block(t, BODY),
                       remove_ours=remove_block).action == "unchanged"
    assert path.read_bytes() == first
    with kept(tmp_path):
        gone = update_text(path, remove_block, remove_ours=remove_block, delete_if_vacant=True)
    assert gone.action == "restored" and path.read_text() == "# Agents\n\nMine.\n"
    ours_only = tmp_path / "rules.md"
    assert update_text(ours_only, lambda t: upsert_block(t, BODY),
                       remove_ours=remove_block).action == "created"
    assert not ours_only.with_name("rules.md" + BACKUP_SUFFIX).exists()
    assert update_text(ours_only, remove_block, remove_ours=remove_block,
                       delete_if_vacant=True).action == "removed"
    assert not ours_only.exists()


# --- results and projects --------------------------------------------------------------------


def test_install_result_lists_only_files_that_exist_or_changed(tmp_path: Path) -> None:
    absent = unmerge(tmp_path / "nothing.json")
    created = merge(tmp_path / "made.json")
    result = install_result("claude", [absent, created], ["note"], False)
    assert result.changes == (created,) and result.changed and result.written == (created.path,)
    assert result.notes == ("note",)


def test_require_project_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(FirstmateError) as err:
        require_project(InstallOptions("claude", tmp_path / "missing"))
    assert err.value.exit_code == ExitCode.USAGE and "does not exist" in err.value.message
    (tmp_path / "file").write_text("")
    with pytest.raises(FirstmateError, match="is not a directory"):
        require_project(InstallOptions("claude", tmp_path / "file"))
    assert require_project(InstallOptions("claude", tmp_path)) == tmp_path


def test_user_level_entries_are_ours_only_for_their_project(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    command = f"/v/bin/fm hook cursor stop --project {one}"
    assert is_ours(command, "cursor", one)
    assert not is_ours(command, "cursor", two)
    assert not is_ours(command, "cursor")  # a project's own file holds no --project entries
    assert is_ours(f"/v/bin/fm hook cursor stop --home /h --project {one}", "cursor", one)
    assert not is_ours(f"/v/bin/fm hook cursor stop --project {one} --project {two}", "cursor",
                       one)
    assert not is_ours(f"/v/bin/fm hook cursor stop --project {one} extra", "cursor", one)
