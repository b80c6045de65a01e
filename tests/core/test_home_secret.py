"""A home's secret is made once and is never seen half-made, however many first commands race."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.base import keyring


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return {keyring.KEYS_DIR_ENV: str(tmp_path / "keys")}


def test_a_secret_being_written_reads_as_none_yet(tmp_path: Path, env: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = str(tmp_path / "home")
    seen: list[bytes | None] = []
    made = keyring.open_private

    def open_and_look(path: str, flags: int) -> int:
        fd = made(path, flags)
        seen.append(keyring.read_key(home, env))  # another command's look, mid-creation
        return fd

    monkeypatch.setattr(keyring, "open_private", open_and_look)
    key = keyring.ensure_key(home, env)
    assert seen == [None]
    assert keyring.read_key(home, env) == key
    assert os.listdir(env[keyring.KEYS_DIR_ENV]) == [os.path.basename(keyring.key_file(home, env))]


def test_racing_first_uses_all_get_the_one_secret(tmp_path: Path, env: dict[str, str]) -> None:
    home = str(tmp_path / "home")
    script = ("import os, sys\nfrom firstmate.base import keyring\n"
              "sys.stdin.read(1)\n"
              "print(keyring.ensure_key(sys.argv[1], os.environ).hex())\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, home], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env}) for _ in range(8)]
    for proc in procs:  # (all started and waiting before any goes)
        assert proc.stdin is not None
        proc.stdin.write("g")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 8, outs
    keys = {out.strip() for out, _ in outs}
    assert len(keys) == 1
    assert keyring.read_key(home, env) == bytes.fromhex(keys.pop())
    assert len(os.listdir(env[keyring.KEYS_DIR_ENV])) == 1  # no private copy left behind


def test_a_keys_directory_without_hard_links_still_gets_its_secret(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    home = str(tmp_path / "home")

    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    key = keyring.ensure_key(home, env)
    assert keyring.read_key(home, env) == key
    assert keyring.ensure_key(home, env) == key
    assert os.listdir(env[keyring.KEYS_DIR_ENV]) == [os.path.basename(keyring.key_file(home, env))]
