"""``fm install`` / ``fm uninstall``: one plugin's installer, its report and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from firstmate.base.homeroot import find_root
from firstmate.testing.sites import declare

DEADLINE = 60.0

PLUGIN = '''
from firstmate import hookimpl
from firstmate.plugin.configfiles import (
    command_owner, hook_command, install_result, remove_grouped_hooks, require_project,
    update_json, upsert_grouped_hook,
)
from firstmate.plugin.harness import HarnessInfo, InstallFlag

INFO = HarnessInfo(
    name="fakei", display_name="Fake", family="hook", rearm_owner="hook", wake_channel="none",
    install_flags=(InstallFlag("local", "write the local variant"),
                   InstallFlag("scope", "where the hooks apply", "SCOPE"),
                   InstallFlag("to", "the target directory", "DIR"),
                   InstallFlag("x", "an experimental switch")),
)


class Fake:
    @hookimpl
    def firstmate_harness_info(self):
        return INFO

    @hookimpl
    def firstmate_install(self, options):
        if options.harness != "fakei":
            return None
        require_project(options)
        owned = command_owner("fakei")
        handler = {"type": "command", "command": hook_command(options, "stop"),
                   "flags": dict(options.flags)}
        change = update_json(options.project / ".fakei" / "hooks.json",
                             lambda d: upsert_grouped_hook(d, "Stop", handler, owned),
                             remove_ours=lambda d: remove_grouped_hooks(d, owned),
                             dry_run=options.dry_run)
        return install_result("fakei", [change], ["restart the harness"], options.dry_run)

    @hookimpl
    def firstmate_uninstall(self, options):
        if options.harness != "fakei":
            return None
        require_project(options)
        owned = command_owner("fakei")
        change = update_json(options.project / ".fakei" / "hooks.json",
                             lambda d: remove_grouped_hooks(d, owned),
                             remove_ours=lambda d: remove_grouped_hooks(d, owned),
                             dry_run=options.dry_run, delete_if_vacant=True,
                             prune_upto=options.project)
        return install_result("fakei", [change], [], options.dry_run)


plugin = Fake()
'''

SILENT = '''
class Silent:
    pass


plugin = Silent()
'''


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "firstmate_plugin_fakei.py").write_text(textwrap.dedent(PLUGIN))
    (site / "firstmate_plugin_silent.py").write_text(textwrap.dedent(SILENT))
    declare(site, "fakei", "firstmate_plugin_fakei")
    declare(site, "silent", "firstmate_plugin_silent")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "FIRSTMATE_"))}
    base["PYTHONPATH"] = os.pathsep.join([str(site), *(os.path.abspath(part) for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part)])
    base["FM_HOME"] = str(tmp_path / "home")
    return base


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def fm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True, text=True,
                          env=env, timeout=DEADLINE, check=False, stdin=subprocess.DEVNULL)


def test_install_reports_each_file_and_is_idempotent(env: dict[str, str], project: Path) -> None:
    done = fm(env, "install", "fakei", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["fm install fakei: created .fakei/hooks.json",
                                        "fm install fakei: note: restart the harness"]
    again = fm(env, "install", "fakei", "--project", str(project))
    assert again.stdout.splitlines()[0] == "fm install fakei: unchanged .fakei/hooks.json"
    gone = fm(env, "uninstall", "fakei", "--project", str(project))
    assert gone.returncode == 0 and gone.stdout == "fm uninstall fakei: removed .fakei/hooks.json\n"
    assert list(project.iterdir()) == []
    nothing = fm(env, "uninstall", "fakei", "--project", str(project))
    assert nothing.stdout == "fm uninstall fakei: no files to change\n"


def test_the_project_defaults_to_the_current_directory(env: dict[str, str], project: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "firstmate", "install", "fakei"], cwd=project,
                          capture_output=True, text=True, env=env, timeout=DEADLINE, check=False)
    assert done.returncode == 0, done.stderr
    assert (project / ".fakei" / "hooks.json").exists()


def test_options_reach_the_plugin(env: dict[str, str], project: Path, tmp_path: Path) -> None:
    home = tmp_path / "the home"
    done = fm(env, "install", "fakei", "--project", str(project), "--home", str(home),
              "--fm-command", "/opt/fm", "--local", "--scope=user", "--to", "a dir", "--x")
    assert done.returncode == 0, done.stderr
    handler = json.loads((project / ".fakei" / "hooks.json").read_text())["hooks"]["Stop"][0]["hooks"][0]
    assert handler["command"] == f"/opt/fm hook fakei stop --home '{home}'"
    assert handler["flags"] == {"local": "true", "scope": "user", "to": "a dir", "x": "true"}


def test_uninstall_takes_the_options_it_hides_and_drops_the_pinned_homes_record(
        env: dict[str, str], project: Path, tmp_path: Path) -> None:
    from firstmate.plugin import installrecord
    from firstmate.store.home import Home

    pinned = tmp_path / "pinned"
    done = fm(env, "install", "fakei", "--project", str(project), "--home", str(pinned))
    assert done.returncode == 0, done.stderr
    record = installrecord.path(Home(pinned), "fakei")
    assert record.exists()
    # Neither --home nor --fm-command is offered, a script's copy of its install line still
    # runs, and the record in the home the install was pinned to goes without being named.
    gone = fm(env, "uninstall", "fakei", "--project", str(project), "--fm-command", "/opt/fm")
    assert (gone.returncode, gone.stderr) == (0, "")
    assert gone.stdout == "fm uninstall fakei: removed .fakei/hooks.json\n"
    assert not record.exists()
    assert fm(env, "install", "fakei", "--project", str(project), "--home", str(pinned)).returncode == 0
    named = fm(env, "uninstall", "fakei", "--project", str(project), "--home", str(pinned))
    assert named.returncode == 0 and not record.exists() and list(project.iterdir()) == []


def test_dry_run_writes_nothing(env: dict[str, str], project: Path) -> None:
    done = fm(env, "install", "fakei", "--project", str(project), "--dry-run")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == "fm install fakei: would create .fakei/hooks.json"
    assert list(project.iterdir()) == []


def test_a_users_file_is_kept_in_the_home_and_put_back_byte_for_byte(
        env: dict[str, str], project: Path) -> None:
    (project / ".fakei").mkdir()
    mine = b'{"mine":   true}'  # the user's own formatting, no final newline
    (project / ".fakei" / "hooks.json").write_bytes(mine)
    done = fm(env, "install", "fakei", "--project", str(project))
    line = done.stdout.splitlines()[0]
    prefix = "fm install fakei: merged .fakei/hooks.json (original kept as "
    assert line.startswith(prefix), line
    kept = Path(line[len(prefix):-1])
    assert kept.parent == Path(env["FM_HOME"]) / "state" / "installs" and kept.read_bytes() == mine
    assert sorted(p.name for p in (project / ".fakei").iterdir()) == ["hooks.json"]
    gone = fm(env, "uninstall", "fakei", "--project", str(project))
    assert gone.stdout == "fm uninstall fakei: restored .fakei/hooks.json\n", gone.stderr
    assert (project / ".fakei" / "hooks.json").read_bytes() == mine
    assert not kept.exists()


def test_a_file_we_cannot_parse_is_exit_1_and_untouched(env: dict[str, str], project: Path) -> None:
    (project / ".fakei").mkdir()
    (project / ".fakei" / "hooks.json").write_text('{"mine": tru')
    done = fm(env, "install", "fakei", "--project", str(project))
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "hooks.json is not valid JSON" in lines[0] and "Traceback" not in done.stderr
    assert (project / ".fakei" / "hooks.json").read_text() == '{"mine": tru'


@pytest.mark.parametrize("verb", ["install", "uninstall"])
def test_a_missing_project_is_exit_2(env: dict[str, str], tmp_path: Path, verb: str) -> None:
    done = fm(env, verb, "fakei", "--project", str(tmp_path / "missing"))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "does not exist" in done.stderr and not (tmp_path / "missing").exists()


def test_an_unknown_harness_is_exit_5(env: dict[str, str], project: Path) -> None:
    done = fm(env, "install", "nosuch", "--project", str(project))
    assert done.returncode == 5 and done.stderr == (
        "fm: no Firstmate plugin for harness 'nosuch' is installed; add it with: "
        "fm plugin add nosuch\n")


def test_a_mistyped_harness_names_the_installed_one(env: dict[str, str], project: Path) -> None:
    done = fm(env, "install", "fake", "--project", str(project))
    assert done.returncode == 5 and done.stderr == (
        "fm: no Firstmate plugin for harness 'fake' is installed; did you mean 'fakei'? "
        "otherwise add it with: fm plugin add fake\n")
    assert list(project.iterdir()) == []


def test_a_plugin_without_an_installer_is_exit_5(env: dict[str, str], project: Path) -> None:
    done = fm(env, "install", "silent", "--project", str(project))
    assert done.returncode == 5 and "does not implement fm install" in done.stderr


@pytest.mark.parametrize(("argv", "needle"), [
    (["install"], "install: the following arguments are required: HARNESS; run 'fm install --help'"),
    (["install", "fakei", "stray"], "install: unrecognized arguments: stray; run 'fm install fakei --help'"),
    (["install", "fakei", "--project"], "install: argument --project: expected one argument"),
    (["install", "fakei", "--fm-command", " "], "install: --fm-command needs a command"),
    (["install", "fakei", "--scope"], "install: argument --scope: expected one argument"),
    (["install", "fakei", "--local=yes"], "install: argument --local: ignored explicit argument 'yes'"),
])
def test_bad_usage_is_one_line_and_exit_2(env: dict[str, str], argv: list[str], needle: str) -> None:
    done = fm(env, *argv)
    assert done.returncode == 2, done.stdout
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(f"fm: {needle}")


@pytest.mark.parametrize("verb", ["install", "uninstall"])
@pytest.mark.parametrize("flag", ["--loacl", "--x=1", "-x", "--scope-wide"])
def test_a_flag_the_plugin_does_not_declare_is_refused_naming_the_accepted_ones(
        env: dict[str, str], project: Path, verb: str, flag: str) -> None:
    done = fm(env, verb, "fakei", "--project", str(project), flag)
    assert done.returncode == 2 and done.stdout == ""
    name = flag.partition("=")[0] if flag != "--x=1" else "--x"
    near = {"--loacl": "did you mean '--local'? ", "--scope-wide": "did you mean '--scope'? ",
            "-x": "did you mean '--x'? "}
    expected = (f"fm: {verb}: unknown option {name}; fakei accepts --local, --scope=SCOPE, "
                f"--to=DIR, --x; {near.get(flag, '')}run 'fm {verb} fakei --help'\n")
    if flag == "--x=1":  # a switch given a value
        expected = (f"fm: {verb}: argument --x: ignored explicit argument '1'; "
                    f"run 'fm {verb} fakei --help'\n")
    assert done.stderr == expected
    assert list(project.iterdir()) == []


def test_a_harness_without_flags_refuses_every_flag(env: dict[str, str], project: Path) -> None:
    done = fm(env, "install", "silent", "--project", str(project), "--local")
    assert done.returncode == 2
    assert done.stderr == ("fm: install: unknown option --local; silent takes no harness flags; "
                           "run 'fm install silent --help'\n")


def test_help(env: dict[str, str]) -> None:
    done = fm(env, "uninstall", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: fm uninstall HARNESS ")
    assert "fm install HARNESS --help lists them" in done.stdout
    flags = fm(env, "install", "fakei", "--help")
    assert flags.returncode == 0 and flags.stdout.startswith(
        "usage: fm install fakei [-h] [--project DIR] [--home DIR] [--dry-run] [--json] "
        "[--fm-command CMD] [--local] [--scope=SCOPE] [--to=DIR] [--x]")
    assert "fakei flags:" in flags.stdout and "--scope SCOPE" in flags.stdout
    assert "where the hooks apply" in flags.stdout
    missing = fm(env, "install", "nosuch", "--help")
    assert missing.returncode == 0
    assert "fm plugin add nosuch" in " ".join(missing.stdout.split())


# --- the home the hook path resolves ---------------------------------------------------------


def test_find_root_matches_the_documented_order(tmp_path: Path) -> None:
    assert find_root({"FM_HOME": " ~/x "}) == os.path.expanduser("~/x")
    assert find_root({"FM_HOME": "rel"}, str(tmp_path)) == os.path.abspath("rel")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (tmp_path / "a" / ".firstmate").mkdir()
    assert find_root({}, str(nested)) == str(tmp_path / "a" / ".firstmate")
    linked = tmp_path / "linked" / "deep"
    linked.mkdir(parents=True)
    (tmp_path / "linked" / ".firstmate").symlink_to(tmp_path / "a" / ".firstmate")
    fallback = find_root({"HOME": "ignored"}, str(linked))
    assert fallback == os.path.join(os.path.expanduser("~"), ".firstmate")
