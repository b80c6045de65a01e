"""Registering ``fm mcp`` with a harness (firstmate.plugin.mcpinstall), from a spec of the
shape each plugin declares: merged beside the user's servers, idempotent, the same entry point
and home as the hooks, kept out of git, never written into a file git tracks, taken out exactly
by an uninstall; the install record remembers it and the wake text then names the tools."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import attrs
import pytest
from firstmate.base.waketext import NEXT_STEP, compose
from firstmate.plugin import installkeep, installrecord, mcpinstall
from firstmate.plugin.configfiles import ConfigFileError, update_json
from firstmate.plugin.harness import InstallOptions, InstallResult
from firstmate.plugin.mcpinstall import McpApproval, McpServerSpec
from firstmate.store.home import Home

#: The two shapes harnesses use: ``command`` + ``args``, and one ``command`` list.
PAIR = McpServerSpec(harness="fake", path=".fake/mcp.json", key="mcpServers",
                     head={"type": "stdio"}, notes=("approve it once",),
                     by_hand="fake mcp add firstmate -- {argv}")
LIST = McpServerSpec(harness="fake", path="fake.json", key="mcp", argv_command=True,
                     head={"type": "local"}, tail={"enabled": True})


#: A harness that asks before it starts a project server: the install approves it in the file
#: its hooks go to.
ASKS = attrs.evolve(PAIR, approval=McpApproval(".fake/settings.json", "approved"))


def _files(options: InstallOptions) -> InstallResult:
    return InstallResult(options.harness, (), ("the hooks' note",), options.dry_run)


def _hooks(options: InstallOptions, *, removing: bool = False) -> InstallResult:
    """The harness's own entries in the approval's file, in the same transaction."""
    def add(doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "hooks": {"Stop": "fm hook fake stop"}}

    def remove(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k != "hooks"}

    change = update_json(options.project / ".fake" / "settings.json",
                         remove if removing else add, remove_ours=remove,
                         dry_run=options.dry_run, delete_if_vacant=removing,
                         prune_upto=options.project, personal=True)
    return InstallResult(options.harness, (change,), (), options.dry_run)


def _install(spec: McpServerSpec, options: InstallOptions, *, removing: bool = False,
             hooks: bool = False) -> InstallResult:
    """The spec's server added or taken out around the harness's own files (*hooks*: its
    entries in the approval's file, else none)."""
    home = Home(options.project.parent / "home")
    home.ensure()
    with installkeep.session(home, options.project, dry_run=options.dry_run):
        return mcpinstall.around(spec, options, removing=removing,
                                 files=lambda: _hooks(options, removing=removing) if hooks
                                 else _files(options))


def _doc(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    return project


def test_the_entry_runs_the_hooks_entry_point_with_mcp_and_the_pinned_home(
        project: Path) -> None:
    options = InstallOptions("fake", project, home=project / "h", fm_command="/venv/bin/fm")
    result = _install(PAIR, options)
    assert result.mcp and result.written == (project / ".fake" / "mcp.json",)
    assert result.notes == ("the hooks' note", "approve it once")
    assert _doc(project / ".fake" / "mcp.json") == {"mcpServers": {"firstmate": {
        "type": "stdio", "command": "/venv/bin/fm", "args": ["mcp", "--home", str(project / "h")]}}}
    # Personal (it names this machine's fm): kept out of git.
    assert "/.fake/mcp.json" in (project / ".git" / "info" / "exclude").read_text()
    again = _install(PAIR, options)
    assert again.mcp and not again.changed


def test_a_command_list_shape_and_the_users_servers_kept(project: Path) -> None:
    (project / "fake.json").write_text(json.dumps(
        {"theme": "x", "mcp": {"mine": {"type": "local", "command": ["mine"]}}}, indent=2))
    options = InstallOptions("fake", project, fm_command="/venv/bin/fm")
    assert _install(LIST, options).merged == (project / "fake.json",)
    assert _doc(project / "fake.json") == {"theme": "x", "mcp": {
        "mine": {"type": "local", "command": ["mine"]},
        "firstmate": {"type": "local", "command": ["/venv/bin/fm", "mcp"], "enabled": True}}}
    # The user adds a server after the install; the uninstall takes out exactly ours.
    doc = _doc(project / "fake.json")
    doc["mcp"]["later"] = {"command": ["later"]}
    (project / "fake.json").write_text(json.dumps(doc))
    removed = _install(LIST, options, removing=True)
    assert not removed.mcp and removed.merged == (project / "fake.json",)
    assert _doc(project / "fake.json") == {"theme": "x", "mcp": {
        "mine": {"type": "local", "command": ["mine"]}, "later": {"command": ["later"]}}}


def test_an_uninstall_removes_a_file_it_made_and_its_directory(project: Path) -> None:
    options = InstallOptions("fake", project, fm_command="/venv/bin/fm")
    _install(PAIR, options)
    assert _install(PAIR, options, removing=True).removed == (project / ".fake" / "mcp.json",)
    assert not (project / ".fake").exists()


def test_a_dry_run_writes_nothing_and_says_what_would_change(project: Path) -> None:
    options = InstallOptions("fake", project, fm_command="/venv/bin/fm", dry_run=True)
    result = _install(PAIR, options)
    assert [c.action for c in result.changes] == ["created"]
    assert not (project / ".fake").exists()


def test_a_file_git_tracks_is_left_alone_with_the_command_to_add_it_by_hand(
        project: Path) -> None:
    (project / ".fake").mkdir()
    shared = project / ".fake" / "mcp.json"
    shared.write_text('{"mcpServers": {}}\n')
    subprocess.run(["git", "-C", str(project), "add", ".fake/mcp.json"], check=True)
    result = _install(PAIR, InstallOptions("fake", project, fm_command="/venv/bin/fm"))
    assert not result.mcp and not result.changes
    assert shared.read_text() == '{"mcpServers": {}}\n'
    note = result.notes[-1]
    assert "git tracks .fake/mcp.json" in note and "fake mcp add firstmate -- /venv/bin/fm mcp" \
        in note


def test_an_interpreter_entry_point_is_recognised_and_updated_in_place(project: Path) -> None:
    options = InstallOptions("fake", project, fm_command="/venv/bin/python -P -m firstmate")
    _install(LIST, options)
    assert _doc(project / "fake.json")["mcp"]["firstmate"]["command"] == [
        "/venv/bin/python", "-P", "-m", "firstmate", "mcp"]
    assert _install(LIST, InstallOptions("fake", project, fm_command="/venv/bin/fm")).changed
    assert _doc(project / "fake.json")["mcp"]["firstmate"]["command"] == ["/venv/bin/fm", "mcp"]
    assert _install(LIST, options, removing=True).removed == (project / "fake.json",)


def test_a_server_of_the_users_own_named_firstmate_is_refused_in_one_line(
        project: Path) -> None:
    (project / "fake.json").write_text(json.dumps({"mcp": {"firstmate": {"command": ["x"]}}}))
    with pytest.raises(ConfigFileError, match="a server of your own, not fm mcp; rename it"):
        _install(LIST, InstallOptions("fake", project, fm_command="/venv/bin/fm"))
    assert _doc(project / "fake.json") == {"mcp": {"firstmate": {"command": ["x"]}}}


def test_a_malformed_servers_object_is_refused_and_nothing_written(project: Path) -> None:
    (project / "fake.json").write_text('{"mcp": ["not", "an", "object"]}')
    with pytest.raises(ConfigFileError, match="'mcp' is not an object"):
        _install(LIST, InstallOptions("fake", project, fm_command="/venv/bin/fm"))
    assert (project / "fake.json").read_text() == '{"mcp": ["not", "an", "object"]}'


def test_without_the_sdk_nothing_is_registered_and_a_note_says_how_to_add_it(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from firstmate.plugin import mcpsdk

    monkeypatch.setattr(mcpsdk, "sdk_missing", lambda: "mcp: not installed")
    result = _install(PAIR, InstallOptions("fake", project, fm_command="/venv/bin/fm"))
    assert not result.mcp and not result.changes and not (project / ".fake").exists()
    assert "not registered: this fm has no MCP SDK" in result.notes[-1]
    assert "then rerun fm install fake" in result.notes[-1]


def test_the_install_record_remembers_the_server_and_older_records_still_verify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    home = Home(tmp_path / "home")
    home.ensure()
    project = tmp_path / "p"
    assert not installrecord.mcp_installed(home, "fake")
    installrecord.remember(home, InstallOptions("fake", project), fm_command_given=False)
    assert not installrecord.mcp_installed(home, "fake")  # (a record without the server)
    installrecord.remember(home, InstallOptions("fake", project),
                           fm_command_given=False, mcp=True)
    assert installrecord.mcp_installed(home, "fake")
    assert not installrecord.mcp_installed(home, "other")
    entry = json.loads(installrecord.path(home, "fake").read_text())["installs"][0]
    entry["mcp"] = False  # (edited by hand: its MAC no longer verifies)
    installrecord.path(home, "fake").write_text(json.dumps({"installs": [entry]}))
    assert not installrecord.mcp_installed(home, "fake")


def test_the_wake_text_names_the_tools_only_when_the_server_is_installed() -> None:
    plain = compose(["signal: a done"], None, "Fake")
    tools = compose(["signal: a done"], None, "Fake", tools=True)
    assert plain.endswith(NEXT_STEP) and "wake_drain" not in plain
    assert "call the firstmate MCP tool wake_drain" in tools and "wake_ack" in tools
    assert "fm wake drain" in tools  # (the command still works, and says so)
    assert os.linesep not in tools.splitlines()[0]


def test_a_harness_that_asks_first_gets_its_server_approved_in_the_hooks_file(
        project: Path) -> None:
    options = InstallOptions("fake", project, fm_command="/venv/bin/fm")
    settings = project / ".fake" / "settings.json"
    dry = _install(ASKS, attrs.evolve(options, dry_run=True), hooks=True)
    assert [c.path for c in dry.changes] == [settings, project / ".fake" / "mcp.json"]
    assert not (project / ".fake").exists()
    # The hooks create the file and the approval merges into it in the same transaction: one
    # line for it, as created.
    result = _install(ASKS, options, hooks=True)
    assert [(c.path, c.action) for c in result.changes] == [
        (settings, "created"), (project / ".fake" / "mcp.json", "created")]
    assert _doc(settings) == {"hooks": {"Stop": "fm hook fake stop"}, "approved": ["firstmate"]}
    assert not _install(ASKS, options, hooks=True).changed
    removed = _install(ASKS, options, removing=True, hooks=True)
    assert set(removed.removed) == {settings, project / ".fake" / "mcp.json"}
    assert not (project / ".fake").exists()


def test_an_approval_that_is_no_list_is_refused_in_one_line_and_nothing_written(
        project: Path) -> None:
    (project / ".fake").mkdir()
    (project / ".fake" / "settings.json").write_text('{"approved": {"firstmate": true}}')
    with pytest.raises(ConfigFileError, match="'approved' is a JSON dict, expected a list"):
        _install(ASKS, InstallOptions("fake", project, fm_command="/venv/bin/fm"), hooks=True)
    assert (project / ".fake" / "settings.json").read_text() == '{"approved": {"firstmate": true}}'
    assert not (project / ".fake" / "mcp.json").exists()


def test_no_server_registered_means_none_approved(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from firstmate.plugin import mcpsdk

    monkeypatch.setattr(mcpsdk, "sdk_missing", lambda: "mcp: not installed")
    result = _install(ASKS, InstallOptions("fake", project, fm_command="/venv/bin/fm"), hooks=True)
    assert not result.mcp
    assert _doc(project / ".fake" / "settings.json") == {"hooks": {"Stop": "fm hook fake stop"}}
