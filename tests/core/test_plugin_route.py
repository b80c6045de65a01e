"""How fm was installed and the command that adds a plugin there (firstmate.plugin.installroute),
and the plugins other environments on the machine hold (firstmate.plugin.elsewhere): real
directories laid out as pipx, uv and pip leave them; the installers themselves run in
tests/core/test_cli_plugin.py (pip) and tests/packaging/test_pipx.py (pipx and uv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from firstmate.base.errors import FirstmateError, UsageError
from firstmate.plugin import elsewhere
from firstmate.plugin.installroute import PIP, PIPX, UV_TOOL, detect, located


def pipx_venv(root: Path, name: str, main: str | None = None) -> Path:
    venv = root / "venvs" / name
    (venv / "bin").mkdir(parents=True)
    (venv / "pipx_metadata.json").write_text(json.dumps(
        {"main_package": {"package": main or name}, "pipx_metadata_version": "0.5"}))
    return venv


def uv_tool(root: Path, name: str, receipt: str) -> Path:
    tool = root / name
    (tool / "bin").mkdir(parents=True)
    (tool / "uv-receipt.toml").write_text(receipt)
    return tool


def test_a_pipx_venv_gets_pipx_inject_and_uninject(tmp_path: Path) -> None:
    user = tmp_path / "user"
    venv = pipx_venv(user / ".local/share/pipx", "firstmate")
    route = detect(venv, str(venv / "bin/python"), {"HOME": str(user)})
    assert (route.kind, route.name, route.env) == (PIPX, "firstmate", ())
    add = route.add("firstmate-plugin-acme", "firstmate-plugin-acme")
    assert add.shown() == "pipx inject firstmate firstmate-plugin-acme"
    assert route.add("/w/a b.whl", "firstmate-plugin-acme").argv == (
        "pipx", "inject", "firstmate", "/w/a b.whl")
    assert route.remove("firstmate-plugin-acme").shown() == (
        "pipx uninject firstmate firstmate-plugin-acme")
    with pytest.raises(UsageError, match="removing it removes fm: run pipx uninstall firstmate"):
        route.remove("firstmate")


def test_a_venv_made_for_a_plugin_takes_more_plugins_but_never_loses_its_own(
        tmp_path: Path) -> None:
    home = tmp_path / "pipx"
    venv = pipx_venv(home, "firstmate-plugin-acme", "firstmate_plugin_acme")
    route = detect(venv, str(venv / "bin/python"), {"PIPX_HOME": str(home)})
    assert route.add("firstmate-plugin-b", "firstmate-plugin-b").argv == (
        "pipx", "inject", "firstmate-plugin-acme", "firstmate-plugin-b")
    with pytest.raises(UsageError, match="is the package this fm was installed with"):
        route.remove("firstmate-plugin-acme")


def test_a_pipx_venv_outside_the_home_pipx_would_pick_names_its_home(tmp_path: Path) -> None:
    venv = pipx_venv(tmp_path / "opt pipx", "firstmate")
    route = detect(venv, str(venv / "bin/python"), {"HOME": str(tmp_path / "user")})
    assert route.env == (("PIPX_HOME", str(tmp_path / "opt pipx")),)
    assert route.add("firstmate-plugin-acme", "firstmate-plugin-acme").shown() == (
        f"PIPX_HOME='{tmp_path / 'opt pipx'}' pipx inject firstmate firstmate-plugin-acme")


RECEIPT = """\
[tool]
requirements = [
    { name = "firstmate", path = "/w/firstmate-0.1.0-py3-none-any.whl" },
    { name = "firstmate-plugin-acme", specifier = ">=0.1" },
    { name = "firstmate-plugin-dev", editable = "/src/dev" },
    { name = "extra", extras = ["x", "y"], marker = "python_version >= '3.11'" },
]
python = "3.12"
entrypoints = [{ name = "fm", install-path = "/bin/fm", from = "firstmate" }]
"""


def test_a_uv_tool_is_reinstalled_with_every_requirement_its_receipt_keeps(tmp_path: Path) -> None:
    tool = uv_tool(tmp_path / "tools", "firstmate", RECEIPT)
    route = detect(tool, str(tool / "bin/python"), {})
    assert (route.kind, route.name, route.main) == (UV_TOOL, "firstmate", "firstmate")
    kept = ("--with", "firstmate-plugin-acme>=0.1", "--with-editable", "/src/dev",
            "--with", "extra[x,y] ; python_version >= '3.11'")
    head = ("uv", "tool", "install", "--python", "3.12", "/w/firstmate-0.1.0-py3-none-any.whl")
    assert route.add("/w/b.whl", "firstmate-plugin-b").argv == (*head, *kept, "--with", "/w/b.whl")
    # Adding one it has replaces it; removing one leaves the others.
    assert route.add("/w/acme.whl", "firstmate_plugin_acme").argv == (
        *head, *kept[2:], "--with", "/w/acme.whl")
    assert route.remove("firstmate-plugin-dev").argv == (*head, *kept[:2], *kept[4:])
    with pytest.raises(UsageError, match="run uv tool uninstall firstmate to remove both"):
        route.remove("firstmate")


def test_an_unreadable_receipt_still_names_the_environment(tmp_path: Path) -> None:
    tool = uv_tool(tmp_path, "firstmate", "not toml [")
    assert located({}, tool) == (tool, f"the Python environment {tool}")
    fine = uv_tool(tmp_path, "good", '[tool]\nrequirements = [{ name = "firstmate" }]\n')
    assert located({}, fine) == (fine, f"uv tool good ({fine})")


def test_an_editable_uv_tool_stays_editable(tmp_path: Path) -> None:
    tool = uv_tool(tmp_path, "firstmate", '[tool]\nrequirements = [{ name = "firstmate", '
                                          'editable = "/src/firstmate" }]\n')
    assert detect(tool, "py", {}).add("firstmate-plugin-a", "firstmate-plugin-a").argv == (
        "uv", "tool", "install", "--editable", "/src/firstmate", "--with", "firstmate-plugin-a")


@pytest.mark.parametrize(("receipt", "why"), [
    ("not toml [", "cannot read uv's receipt"),
    ("[tool]\nrequirements = []\n", "lists no requirements"),
    ("[tool]\nrequirements = [{ name = \"firstmate\" }]\nconstraints = [{ name = \"x\" }]\n",
     "installed with constraints, which fm plugin add cannot repeat"),
    ("[tool]\nrequirements = [{ name = \"firstmate\", git = \"https://example.invalid/x\" }]\n",
     "by a source fm plugin add cannot repeat"),
    ("[tool]\nrequirements = [42]\n", "holds a requirement fm cannot read"),
])
def test_a_receipt_fm_cannot_repeat_is_refused_naming_the_manual_command(
        tmp_path: Path, receipt: str, why: str) -> None:
    tool = uv_tool(tmp_path, "firstmate", receipt)
    with pytest.raises(FirstmateError, match=why) as err:
        detect(tool, "py", {})
    assert "uv tool install" in err.value.message and "\n" not in err.value.message


def test_any_other_environment_gets_its_own_interpreters_pip(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    route = detect(venv, str(venv / "bin/python"), {})
    assert route.kind == PIP and route.describe() == f"the Python environment {venv}"
    assert route.add("firstmate-plugin-a", "firstmate-plugin-a").argv == (
        str(venv / "bin/python"), "-m", "pip", "install", "firstmate-plugin-a")
    assert route.remove("firstmate-plugin-a").argv == (
        str(venv / "bin/python"), "-m", "pip", "uninstall", "-y", "firstmate-plugin-a")


# --- plugins in other environments ------------------------------------------------------------


def plugin_dist(environment: Path, harness: str, version: str = "0.1.0",
                source: Path | None = None) -> Path:
    site = environment / "lib/python3.11/site-packages"
    info = site / f"firstmate_plugin_{harness}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text(
        f"[console_scripts]\nfirstmate-{harness} = firstmate.cli.app:main\n\n"
        f"[firstmate.plugins]\n{harness} = firstmate_plugin_{harness}.hooks:plugin\n")
    if source is not None:
        (info / "direct_url.json").write_text(json.dumps(
            {"url": source.as_uri(), "archive_info": {}}))
    return info


def test_plugins_of_other_pipx_venvs_and_uv_tools_are_found_with_their_source(
        tmp_path: Path) -> None:
    user = tmp_path / "user"
    own = pipx_venv(user / ".local/share/pipx", "firstmate")
    plugin_dist(own, "mine")
    wheel = tmp_path / "wheels" / "firstmate_plugin_acme-0.2.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    other = pipx_venv(user / ".local/share/pipx", "firstmate-plugin-acme")
    plugin_dist(other, "acme", "0.2.0", source=wheel)
    gone = pipx_venv(user / ".local/pipx", "firstmate-plugin-old")
    plugin_dist(gone, "old", source=tmp_path / "deleted.whl")
    tool = uv_tool(tmp_path / "uvtools", "firstmate", RECEIPT)
    plugin_dist(tool, "uvone")
    env = {"HOME": str(user), "UV_TOOL_DIR": str(tmp_path / "uvtools")}
    found = {f.harness: f for f in elsewhere.find(env, own)}
    assert sorted(found) == ["acme", "old", "uvone"]  # never this fm's own environment
    assert found["acme"].command() == f"fm plugin add {wheel}"
    assert (found["acme"].version, found["acme"].kind) == ("0.2.0", "pipx venv")
    assert found["old"].command() == "fm plugin add old"  # its wheel is gone: by name
    assert found["uvone"].where() == f"uv tool firstmate ({tool})"
    assert [f.harness for f in elsewhere.find(env, own, "acme")] == ["acme"]


def test_hostile_metadata_in_another_environment_is_skipped(tmp_path: Path) -> None:
    home = tmp_path / "pipx"
    venv = pipx_venv(home, "evil")
    info = plugin_dist(venv, "evil", source=tmp_path)
    (info / "direct_url.json").write_text('{"url": "file:///tmp/a%0Ab"}')
    two = plugin_dist(venv, "two")
    (two / "entry_points.txt").write_text("[firstmate.plugins]\na = x:p\nb = y:p\n")
    broken = plugin_dist(venv, "broken")
    (broken / "entry_points.txt").write_text("not an ini file [\n")
    found = elsewhere.find({"PIPX_HOME": str(home), "HOME": str(tmp_path)}, tmp_path / "own")
    assert [(f.harness, f.source) for f in found] == [("evil", None)]


def test_the_missing_plugin_error_names_the_command_that_brings_it_here(tmp_path: Path) -> None:
    home = tmp_path / "pipx"
    other = pipx_venv(home, "firstmate-plugin-acme")
    wheel = tmp_path / "acme dir"
    wheel.mkdir()
    plugin_dist(other, "acme", source=wheel)
    env = {"PIPX_HOME": str(home), "HOME": str(tmp_path)}
    error = elsewhere.missing("acme", ["other"], env)
    assert error.exit_code == 5
    assert error.message.startswith(f"the acme plugin is installed in pipx venv "
                                    f"firstmate-plugin-acme ({other}), not in this fm's "
                                    "environment (")
    assert error.message.endswith(f"; bring it here with: fm plugin add '{wheel}'")
    near = elsewhere.missing("acm", ["acme", "other"], env).message
    assert near == ("no Firstmate plugin for harness 'acm' is installed; did you mean 'acme'? "
                    "otherwise add it with: fm plugin add acm")
    # A word that is no harness name is never echoed back as a command to run.
    hostile = elsewhere.missing("x\x1b[2J y", [], env).message
    assert hostile == ("no Firstmate plugin for harness 'x\\x1b[2J y' is installed; harness names "
                       "are lower-case words (fm plugin list shows the installed ones)")
