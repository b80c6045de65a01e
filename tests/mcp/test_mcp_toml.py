"""Registering ``fm mcp`` in a TOML file (Codex's and Grok's ``[mcp_servers.firstmate]``):
our table is a block of its own, appended, replaced in place or cut out, the rest of the file
kept byte for byte (comments, order, quoting); every edit is proven by parsing the result, and
a file or table fm cannot edit safely is refused in one line with nothing written."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import attrs
import pytest
from firstmate.plugin import installkeep, mcpinstall, tomltable
from firstmate.plugin.configfiles import ConfigFileError
from firstmate.plugin.harness import InstallOptions, InstallResult
from firstmate.plugin.mcpinstall import McpServerSpec
from firstmate.plugin.textblocks import ShapeError
from firstmate.store.home import Home

TOML = McpServerSpec(harness="fake", path=".fake/config.toml", key="mcp_servers", toml=True,
                     by_hand="fake mcp add firstmate -- {argv}")

USERS = '''\
# my settings
model = "o3"   # the fast one

[mcp_servers.db]
command = 'db-server'
args = ["--port", "5432"]

# profiles below
[profiles.deep]
model = "o3-pro"
'''


def _install(options: InstallOptions, *, removing: bool = False) -> InstallResult:
    home = Home(options.project.parent / "home")
    home.ensure()
    with installkeep.session(home, options.project, dry_run=options.dry_run):
        return mcpinstall.around(TOML, options, removing=removing, files=lambda: InstallResult(
            options.harness, (), (), options.dry_run))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".fake").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    return project


def _config(project: Path) -> Path:
    return project / ".fake" / "config.toml"


def test_our_table_is_appended_and_everything_else_keeps_its_bytes(project: Path) -> None:
    _config(project).write_text(USERS)
    options = InstallOptions("fake", project, home=project / "h", fm_command="/venv/bin/fm")
    result = _install(options)
    assert result.mcp and result.merged == (_config(project),)
    text = _config(project).read_text()
    assert text == USERS + (f'\n[mcp_servers.firstmate]\ncommand = "/venv/bin/fm"\n'
                            f'args = ["mcp", "--home", "{project / "h"}"]\n')
    doc = tomllib.loads(text)
    assert doc["mcp_servers"]["db"] == {"command": "db-server", "args": ["--port", "5432"]}
    assert "/.fake/config.toml" in (project / ".git" / "info" / "exclude").read_text()
    assert not _install(options).changed  # (idempotent: the same bytes)
    # Taken out again: the file goes back byte for byte.
    assert _install(options, removing=True).changes[0].action == "restored"
    assert _config(project).read_text() == USERS


def test_a_stale_table_is_replaced_in_place_beside_the_users_later_tables(
        project: Path) -> None:
    _config(project).write_text(USERS)
    _install(InstallOptions("fake", project, fm_command="/old/fm"))
    # The user adds a table after ours.
    edited = _config(project).read_text() + '\n# mine\n[mcp_servers.later]\ncommand = "later"\n'
    _config(project).write_text(edited)
    assert _install(InstallOptions("fake", project, fm_command="/venv/bin/fm")).changed
    assert _config(project).read_text() == edited.replace('"/old/fm"', '"/venv/bin/fm"')


def test_an_uninstall_cuts_out_only_our_table_when_the_user_edited_the_file(
        project: Path) -> None:
    _config(project).write_text(USERS)
    options = InstallOptions("fake", project, fm_command="/venv/bin/fm")
    _install(options)
    edited = _config(project).read_text().replace('model = "o3-pro"', 'model = "o4"') + \
        '\n[mcp_servers.later]\ncommand = "later"\n'
    _config(project).write_text(edited)
    assert _install(options, removing=True).merged == (_config(project),)
    assert _config(project).read_text() == USERS.replace('model = "o3-pro"', 'model = "o4"') + \
        '\n[mcp_servers.later]\ncommand = "later"\n'


def test_a_file_fm_made_is_removed_with_its_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    options = InstallOptions("fake", project, fm_command="/venv/bin/fm")
    assert _install(options).written == (_config(project),)
    assert _install(options, removing=True).removed == (_config(project),)
    assert not (project / ".fake").exists()


def test_a_dry_run_writes_nothing(project: Path) -> None:
    _config(project).write_text(USERS)
    result = _install(InstallOptions("fake", project, fm_command="/venv/bin/fm", dry_run=True))
    assert [c.action for c in result.changes] == ["merged"]
    assert _config(project).read_text() == USERS


@pytest.mark.parametrize("fm_command", [
    '/home/o\'brien/"q"/fm', "/tmp/back\\slash/fm", "/tmp/ünï/fm", "/tmp/tab\there/fm",
])
def test_a_hostile_path_is_written_as_a_toml_string_that_reads_back_exactly(
        project: Path, fm_command: str) -> None:
    import shlex

    _install(InstallOptions("fake", project, fm_command=shlex.quote(fm_command)))
    entry = tomllib.loads(_config(project).read_text())["mcp_servers"]["firstmate"]
    assert entry == {"command": fm_command, "args": ["mcp"]}


@pytest.mark.parametrize(("text", "words"), [
    ('[mcp_servers.firstmate]\ncommand = "my-own"\n', "a server of your own, not fm mcp"),
    ('mcp_servers.firstmate.command = "/o/fm"\nmcp_servers.firstmate.args = ["mcp"]\n',
     "not written as one block fm can edit safely"),
    ('[mcp_servers]\nfirstmate = {command = "/o/fm", args = ["mcp"]}\n',
     "not written as one block fm can edit safely"),
    ('[mcp_servers.firstmate]\ncommand = "/o/fm"\nargs = ["mcp"]\n[mcp_servers.firstmate.env]\n'
     'A = "1"\n', "not written as one block fm can edit safely"),
    ("mcp_servers = 3\n", "'mcp_servers' is not a table"),
    ("model = o3\n", "is not valid TOML"),
])
def test_what_fm_cannot_edit_safely_is_refused_in_one_line_and_nothing_written(
        project: Path, text: str, words: str) -> None:
    _config(project).write_text(text)
    with pytest.raises(ConfigFileError, match=words) as caught:
        _install(InstallOptions("fake", project, fm_command="/venv/bin/fm"))
    assert "\n" not in str(caught.value)
    assert _config(project).read_text() == text


def test_a_header_line_inside_a_multiline_string_is_never_taken_for_our_table() -> None:
    text = 'notes = """\n[mcp_servers.firstmate]\ncommand = "x"\n"""\n'
    body = {"command": "/venv/bin/fm", "args": ["mcp"]}
    added = tomltable.upsert(text, "mcp_servers", "firstmate", body, mcpinstall.ours)
    assert tomllib.loads(added)["notes"] == '[mcp_servers.firstmate]\ncommand = "x"\n'
    assert tomllib.loads(added)["mcp_servers"]["firstmate"] == body
    # Two lines that look like our header: fm proves nothing, so it refuses to cut.
    with pytest.raises(ShapeError, match=r"edit or remove \[mcp_servers\.firstmate\] by hand"):
        tomltable.remove(added, "mcp_servers", "firstmate", mcpinstall.ours)


def test_a_file_git_tracks_is_left_alone_with_the_command_to_add_it_by_hand(
        project: Path) -> None:
    _config(project).write_text(USERS)
    subprocess.run(["git", "-C", str(project), "add", ".fake/config.toml"], check=True)
    result = _install(InstallOptions("fake", project, fm_command="/venv/bin/fm"))
    assert not result.mcp and not result.changes and _config(project).read_text() == USERS
    assert "fake mcp add firstmate -- /venv/bin/fm mcp" in result.notes[-1]


def test_the_spec_is_data_like_the_json_ones() -> None:
    assert attrs.evolve(TOML, path="x.toml").toml and not McpServerSpec("h", "x.json", "k").toml
