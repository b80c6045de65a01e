from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
    assert out.stderr == ("fm: required plugin 'no-such-harness' is not loaded; add it: "
                          "fm plugin add no-such-harness\n")


def test_an_argument_that_is_not_utf8_is_echoed_as_its_bytes_on_a_strict_stream(
    tmp_path: Path,
) -> None:
    # PYTHONIOENCODING=utf-8 (tox sets it) makes stdout strict: echoing a surrogate-escaped
    # argument must not become an internal error after the command did its work.
    env = {**os.environ, "FM_HOME": str(tmp_path / "home"), "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run([*(w.encode() for w in fm_command()), b"check", b"add", b"B", b"--",
                           b"echo", b"done: \xff\xfe"], capture_output=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert b"echo 'done: \xff\xfe'" in done.stdout
