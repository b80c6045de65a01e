"""Installing an in-process shim (firstmate.plugin.shiminstall) with a throwaway shim package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from firstmate.base.errors import FirstmateError, UsageError
from firstmate.plugin import fmcommand, shiminstall
from firstmate.plugin.configfiles import ConfigFileError
from firstmate.plugin.harness import InstallOptions
from firstmate.testing import snapshot

MARKER = "Firstmate's test extension"
SPEC = shiminstall.ShimSpec(
    harness="testh", package="fm_test_shimpkg", resource="shim/index.ts", marker=MARKER,
    shim=".testh/extensions/firstmate/index.ts", support=".testh/extensions/firstmate",
    npm_shim="extensions/firstmate/index.ts",
    npm_fields={"keywords": ["testh-package"], "testh": {"extensions": ["./extensions"]}},
    load_note="restart testh", npm_note="install {package} with testh",
)


@pytest.fixture(autouse=True)
def shim_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "pkgs"
    shim = root / "fm_test_shimpkg" / "shim"
    shim.mkdir(parents=True)
    (shim.parent / "__init__.py").write_text("")
    (shim / "index.ts").write_text(f"// {MARKER}\nexport default function () {{}}\n")
    monkeypatch.syspath_prepend(str(root))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    made = tmp_path / "project"
    made.mkdir()
    return made


def _options(project: Path, **changes: object) -> InstallOptions:
    return InstallOptions(harness="testh", project=project, **changes)  # type: ignore[arg-type]


def _client() -> str:
    return shiminstall.resource_text("firstmate", "shims/bridge-client.mjs", "testh")


def test_install_writes_the_shim_the_client_and_the_launch_argv(project: Path) -> None:
    result = shiminstall.install(SPEC, _options(project))
    files = snapshot(project)
    assert sorted(files) == sorted(SPEC.owned_files())
    assert MARKER in files[SPEC.shim].decode()
    assert files[f"{SPEC.support}/bridge-client.mjs"].decode() == _client()
    launch = json.loads(files[f"{SPEC.support}/launch.json"])
    # This installation's own entry point by absolute path: no fm on the harness's PATH needed.
    assert launch == {"argv": [*fmcommand.own_argv(), "bridge", "testh"]}
    assert result.notes == ("restart testh",) and result.changed
    again = shiminstall.install(SPEC, _options(project))
    assert snapshot(project) == files and not again.changed and again.notes == ()


def test_home_and_fm_command_reach_the_launch_argv(project: Path, tmp_path: Path) -> None:
    shiminstall.install(SPEC, _options(project, home=tmp_path / "h", fm_command="/opt/fm --x"))
    launch = json.loads((project / SPEC.support / "launch.json").read_text())
    assert launch["argv"] == ["/opt/fm", "--x", "bridge", "testh", "--home", str(tmp_path / "h")]


def test_dry_run_writes_nothing(project: Path) -> None:
    planned = shiminstall.install(SPEC, _options(project, dry_run=True))
    assert snapshot(project) == {} and planned.dry_run
    assert [c.action for c in planned.changes] == ["created"] * 3


def test_an_older_shim_of_ours_is_replaced(project: Path) -> None:
    shim = project / SPEC.shim
    shim.parent.mkdir(parents=True)
    shim.write_text(f"// {MARKER}, an older version\n")
    shiminstall.install(SPEC, _options(project))
    assert shim.read_text().startswith(f"// {MARKER}\nexport default")


def test_a_foreign_file_at_the_shim_path_is_refused_and_kept(project: Path) -> None:
    shim = project / SPEC.shim
    shim.parent.mkdir(parents=True)
    shim.write_text("// another extension called firstmate\n")
    for verb in (shiminstall.install, shiminstall.uninstall):
        with pytest.raises(ConfigFileError, match="is not Firstmate's testh shim; move it aside"):
            verb(SPEC, _options(project))
    assert snapshot(project) == {SPEC.shim: b"// another extension called firstmate\n"}


def test_uninstall_removes_ours_and_prunes_only_empty_directories(project: Path) -> None:
    shiminstall.install(SPEC, _options(project))
    shiminstall.uninstall(SPEC, _options(project))
    assert list(project.iterdir()) == []
    shiminstall.install(SPEC, _options(project))
    mine = project / ".testh" / "extensions" / "mine.ts"
    mine.write_text("// the user's")
    shiminstall.uninstall(SPEC, _options(project))
    assert snapshot(project) == {".testh/extensions/mine.ts": b"// the user's"}


def test_npm_layout_is_a_package_without_a_launch_file(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    flags = {"npm-package": str(package)}
    result = shiminstall.install(SPEC, _options(tmp_path / "unused", flags=flags))
    files = snapshot(package)
    assert sorted(files) == ["extensions/firstmate/bridge-client.mjs",
                             "extensions/firstmate/index.ts", "package.json"]
    manifest = json.loads(files["package.json"])
    assert manifest["name"] == "firstmate-testh" and manifest["files"] == ["extensions"]
    assert manifest["testh"] == {"extensions": ["./extensions"]}
    assert manifest["keywords"] == ["testh-package"] and manifest["type"] == "module"
    assert result.notes == (f"install {package} with testh",)
    shiminstall.uninstall(SPEC, _options(tmp_path / "unused", flags=flags))
    assert not package.exists()


def test_npm_layout_refuses_another_package_and_a_bare_flag(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "package.json").write_text('{"name": "somebody-else"}')
    with pytest.raises(ConfigFileError, match="belongs to another package"):
        shiminstall.install(SPEC, _options(tmp_path, flags={"npm-package": str(package)}))
    with pytest.raises(UsageError, match="needs a directory"):
        shiminstall.install(SPEC, _options(tmp_path, flags={"npm-package": "true"}))
    assert snapshot(package) == {"package.json": b'{"name": "somebody-else"}'}


def test_a_missing_shim_resource_names_the_reinstall(project: Path) -> None:
    broken = shiminstall.ShimSpec(harness="testh", package="fm_test_shimpkg",
                                  resource="shim/missing.ts", marker=MARKER, shim="a/index.ts",
                                  support="a", npm_shim="index.ts")
    with pytest.raises(FirstmateError, match="reinstall fm-test-shimpkg") as err:
        shiminstall.install(broken, _options(project))
    assert err.value.exit_code == 5
    assert snapshot(project) == {}


def test_a_missing_project_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError) as err:
        shiminstall.install(SPEC, _options(tmp_path / "missing"))
    assert err.value.exit_code == 2
