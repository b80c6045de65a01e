"""The checks every plugin's MCP registration tests share: ``fm install <harness>`` puts ``fm
mcp`` into the harness's own config file beside the user's servers, kept out of git; ``fm
doctor`` finds a stale entry and its printed fix puts it back; a server of the user's own named
``firstmate`` is refused in one line with nothing changed. Real ``fm`` processes, real files,
real git (the rig of :mod:`firstmate.testing.installs`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from firstmate.plugin.mcpsdk import sdk_missing
from firstmate.testing.installs import config_finding, run_fm
from firstmate.testing.procs import DEADLINE

#: Marks a test module that needs the MCP SDK in this environment (``tox -e mcp`` has it).
needs_sdk = pytest.mark.skipif(sdk_missing() is not None,
                               reason="the MCP SDK is not installed (tox -e mcp)")


def git_status(project: Path) -> str:
    """``git status --porcelain`` of *project*: empty when fm's files are kept out of git."""
    return subprocess.run(["git", "-C", str(project), "status", "--porcelain"],
                          capture_output=True, text=True, check=True, timeout=DEADLINE).stdout


def install(env: dict[str, str], project: Path, harness: str, *more: str) -> str:
    """``fm install <harness> --project <project> *more``, which must succeed; its stdout."""
    done = run_fm(env, project, "install", harness, "--project", str(project), *more)
    assert done.returncode == 0, done.stderr
    return done.stdout


def uninstall(env: dict[str, str], project: Path, harness: str) -> None:
    """``fm uninstall <harness> --project <project>``, which must succeed."""
    done = run_fm(env, project, "uninstall", harness, "--project", str(project))
    assert done.returncode == 0, done.stderr


def stale_entry_is_found_and_fixed(env: dict[str, str], project: Path, harness: str,
                                   config: Path, spoil: Callable[[str], str]) -> None:
    """*config*'s text spoilt by *spoil* (fm's entry edited or taken out): ``fm doctor`` warns,
    naming the file, and running the fix it prints gives back the text as it was."""
    good = config.read_text()
    config.write_text(spoil(good))
    assert config.read_text() != good, "the spoilt text must differ"
    finding = config_finding(env, project, harness)
    assert finding["status"] == "warn", finding
    assert str(config.relative_to(project)) in finding["detail"], finding
    assert finding["fix"].startswith(f"fm install {harness} --project"), finding
    done = run_fm(env, project, *finding["fix"].split()[1:])
    assert done.returncode == 0, done.stderr
    assert config.read_text() == good


def users_own_server_is_refused(env: dict[str, str], project: Path, harness: str,
                                config: Path, original: str) -> None:
    """*config* holding a server of the user's own named ``firstmate`` (*original*): ``fm
    install`` refuses in one line, exit 1, and leaves the file as it was."""
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(original)
    done = run_fm(env, project, "install", harness, "--project", str(project))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "a server of your own, not fm mcp; rename it" in done.stderr
    assert config.read_text() == original


__all__ = ["git_status", "install", "needs_sdk", "stale_entry_is_found_and_fixed", "uninstall",
           "users_own_server_is_refused"]
