from __future__ import annotations

import subprocess

from firstmate import __version__
from firstmate.testing import fm_command


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fm_command(*args), capture_output=True, text=True, timeout=60, check=False)


def test_version() -> None:
    out = run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"fm {__version__}"


def test_unknown_command_is_a_usage_error_in_one_line() -> None:
    out = run("no-such-command")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("fm: unknown command")
    assert "Traceback" not in out.stderr


def test_bare_fm_prints_usage_and_exits_2() -> None:
    out = run()
    assert out.returncode == 2
    assert "usage: fm" in out.stdout


def test_plugins_require_missing_exits_5() -> None:
    out = run("plugins", "--require", "no-such-harness")
    assert out.returncode == 5
    assert "pip install firstmate-plugin-no-such-harness" in out.stderr
